//! mmseg's test-time geometry against mmseg, mmcv and OpenCV themselves
//! (tests/reference/mmseg_resize_ref.py, run with the venv's python, `SEGTOOL_PYTHON`
//! from scripts/setup.sh; without it a missing reference: a failure under `make test`,
//! else a counted skip):
//! - `resize_linear_u8` against `cv2.resize(INTER_LINEAR)` on ~320 random uint8 RGB
//!   images and sizes (up, down, exact 2x, integer factors, one-pixel sides, mmseg's TTA
//!   ratios, one 1024x2048 Cityscapes frame): tolerance none, every byte equal;
//! - `keep_ratio_size` / `ratio_size` against mmcv's `Resize(keep_ratio=True)` with a
//!   scale and with a scale factor, on 600 random sizes: equal;
//! - `windows` against the crops mmseg's own `EncoderDecoder.slide_inference` cuts:
//!   equal, in the same order.

use std::path::Path;
use std::process::Command;

use segtool_model_spec::protocol::resize::{keep_ratio_size, ratio_size, resize_linear_u8};
use segtool_model_spec::protocol::windows;
use serde_json::Value;

// segtool-testkit's skip helper, by path: testkit depends on this crate.
#[path = "../../../testkit/src/skip.rs"]
#[allow(dead_code)]
mod skip;

fn reference(dir: &Path) -> Option<(Value, Vec<u8>)> {
    let Ok(python) = std::env::var("SEGTOOL_PYTHON") else {
        skip::missing_reference(
            "the project venv's python (SEGTOOL_PYTHON), with mmseg, mmcv and OpenCV",
            "source \"$(bash scripts/setup.sh)\"",
        );
        return None;
    };
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/mmseg_resize_ref.py");
    let run = Command::new(python)
        .arg(script)
        .arg(dir)
        .output()
        .expect("running the venv python");
    assert!(
        run.status.success(),
        "mmseg_resize_ref.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let json = std::fs::read(dir.join("ref.json")).unwrap();
    Some((
        serde_json::from_slice(&json).unwrap(),
        std::fs::read(dir.join("ref.bin")).unwrap(),
    ))
}

fn pair(v: &Value) -> (usize, usize) {
    (
        v[0].as_u64().unwrap() as usize,
        v[1].as_u64().unwrap() as usize,
    )
}

#[test]
fn geometry_matches_mmseg_mmcv_and_cv2() {
    let dir = tempfile::tempdir().unwrap();
    let Some((refs, blob)) = reference(dir.path()) else {
        return;
    };

    let resizes = refs["resizes"].as_array().unwrap();
    let mut bad = Vec::new();
    let mut bytes = 0usize;
    for case in resizes {
        let (sh, sw) = pair(&case["src"]);
        let (dh, dw) = pair(&case["dst"]);
        let at = case["offset"].as_u64().unwrap() as usize;
        let src = &blob[at..at + sh * sw * 3];
        let want = &blob[at + sh * sw * 3..at + sh * sw * 3 + dh * dw * 3];
        let got = resize_linear_u8(src, sh, sw, 3, dh, dw);
        let wrong = got.iter().zip(want).filter(|(a, b)| a != b).count();
        bytes += want.len();
        if wrong > 0 {
            bad.push(format!("{sh}x{sw} -> {dh}x{dw}: {wrong} bytes"));
        }
    }
    eprintln!(
        "cv2 {}: {} of {} resizes bit-identical ({bytes} bytes)",
        refs["cv2"],
        resizes.len() - bad.len(),
        resizes.len()
    );
    assert!(resizes.len() > 300);
    assert!(bad.is_empty(), "{} resizes differ: {bad:?}", bad.len());

    let sizes = refs["sizes"].as_array().unwrap();
    for case in sizes {
        let (h, w) = pair(&case["src"]);
        let want = pair(&case["dst"]);
        let got = match case.get("ratio") {
            Some(r) => ratio_size(h, w, r.as_f64().unwrap()),
            None => {
                let (long, short) = pair(&case["scale"]);
                keep_ratio_size(h, w, [long, short])
            }
        };
        assert_eq!(got, want, "{case}");
    }
    assert!(sizes.len() >= 600);

    for case in refs["windows"].as_array().unwrap() {
        let (h, w) = pair(&case["size"]);
        let crop = case["crop"].as_u64().unwrap() as usize;
        let stride = case["stride"].as_u64().unwrap() as usize;
        let got: Vec<[usize; 4]> = windows(h, w, crop, stride)
            .iter()
            .map(|win| [win.y, win.x, win.h, win.w])
            .collect();
        let want: Vec<[usize; 4]> = case["crops"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| std::array::from_fn(|i| c[i].as_u64().unwrap() as usize))
            .collect();
        assert_eq!(got, want, "{h}x{w} crop {crop} stride {stride}");
    }
}
