//! Fixtures shared by the binary's integration tests.
#![allow(dead_code)]

pub mod npy_file;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::{checkpoint, DaNet};
use tch::{nn, Kind, Tensor};

/// Runs the `segtool` binary built for this test run.
pub fn segtool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(args)
        .output()
        .expect("segtool runs")
}

/// Every image in `dir`, in file-name order.
pub fn read_images(dir: &Path) -> Vec<image::RgbImage> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|f| image::open(f).unwrap().to_rgb8())
        .collect()
}

/// Fraction of pixels on which two runs over the same images predict the same class.
pub fn agreement(a: &[segtool_runtime::Segmentation], b: &[segtool_runtime::Segmentation]) -> f64 {
    let (mut same, mut all) = (0usize, 0usize);
    for (x, y) in a.iter().zip(b) {
        same += x
            .mask
            .iter()
            .zip(y.mask.iter())
            .filter(|(u, v)| u == v)
            .count();
        all += x.mask.len();
    }
    same as f64 / all as f64
}

/// A path as the `&str` the command line takes.
pub fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// A DANet whose every variable is random: conv weights (kaiming), biases, BN affine
/// parameters and running statistics, and non-zero attention gammas (zero would hide
/// PAM and CAM entirely).
pub fn random_model(spec: &ModelSpec, seed: i64) -> (nn::VarStore, DaNet) {
    // libtorch's generator is process-global: tests running in parallel threads would
    // interleave their draws between `manual_seed` and the last fill, and a seed would
    // no longer fix the weights. One model is drawn at a time.
    static DRAWING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _drawing = DRAWING.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = DaNet::new(&vs.root(), spec);
    tch::no_grad(|| {
        // Sorted: `variables()` is a HashMap, whose order (and so which draw each
        // variable gets) would otherwise change from one process to the next.
        let mut variables: Vec<_> = vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, mut var) in variables {
            let shape = var.size();
            let opts = (Kind::Float, tch::Device::Cpu);
            let fresh = if name.ends_with("running_var") {
                Tensor::rand(shape.as_slice(), opts) + 0.5
            } else if name.ends_with("running_mean") || name.ends_with(".bias") {
                Tensor::randn(shape.as_slice(), opts) * 0.1
            } else if name.ends_with("gamma") {
                Tensor::from_slice(&[if name.contains(".sa.") { 0.6f32 } else { -0.5 }])
            } else if shape.len() == 1 {
                // BN scales below 1 keep the logits O(1..10), as in a trained model: with
                // gains above 1 through ~20 layers they reach ~60, where fp32 rounding in
                // CAM's unscaled energies alone exceeds 1e-4 absolute.
                Tensor::rand(shape.as_slice(), opts) * 0.4 + 0.6
            } else {
                continue;
            };
            var.copy_(&fresh);
        }
    });
    (vs, model)
}

/// The venv's python (scripts/setup.sh exports SEGTOOL_PYTHON), else `python3`.
pub fn python() -> Command {
    Command::new(std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into()))
}

/// The tiny DANet (5 classes) with [`random_model`]'s weights, saved as `dir/m.safetensors`.
pub fn tiny_checkpoint(dir: &Path, seed: i64) -> (ModelSpec, DaNet, PathBuf) {
    let classes = (0..5).map(|c| format!("c{c}")).collect();
    let spec = ModelSpec::new("tiny", BackboneSpec::tiny(), classes);
    let (vs, model) = random_model(&spec, seed);
    let ckpt = dir.join("m.safetensors");
    checkpoint::save(&ckpt, &vs, &spec, &Default::default()).unwrap();
    (spec, model, ckpt)
}

/// A `w` x `h` test image: deterministic coloured noise with a few solid blocks, so the
/// model sees structure.
pub fn test_image(seed: u32, w: u32, h: u32) -> image::RgbImage {
    let mut state = 0x2545_F491u32.wrapping_mul(seed + 1);
    image::RgbImage::from_fn(w, h, |x, y| {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let block = ((x / 12 + y / 8 + seed) % 3) as u8;
        let n = (state >> 24) as u8;
        image::Rgb([
            n / 2 + block * 60,
            (n / 3).saturating_add(200 - block * 70),
            n.wrapping_mul(3) / 2,
        ])
    })
}

/// A `.npy` array of little-endian `<f4` or `|u1` values, flattened.
pub fn npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let a = npy_file::read(path);
    let values = if a.header.contains("'<f4'") {
        a.data
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    } else {
        assert!(a.header.contains("'|u1'"), "{}", a.header);
        a.data.iter().map(|&v| f32::from(v)).collect()
    };
    (a.shape, values)
}

/// A mask against a reference's, both flattened: equal wherever the reference's top-two
/// gap (`margin`: logits, or a probability's distance to its threshold) is at least 1e-3,
/// float32 noise aside; near-ties may differ, on at most 0.1% of the pixels.
pub fn assert_masks_match(ours: &[u8], want: &[f32], margin: &[f32], what: &str) -> usize {
    assert_eq!(ours.len(), want.len(), "{what}: mask size");
    let mut differ = 0;
    for ((&got, &want), &gap) in ours.iter().zip(want).zip(margin) {
        if f32::from(got) != want {
            assert!(
                gap < 1e-3,
                "{what}: class {got} where the reference says {want}, with a margin of {gap} \
                 (not a near-tie)"
            );
            differ += 1;
        }
    }
    assert!(
        differ * 1000 <= want.len(),
        "{what}: {differ} near-tie pixels differ"
    );
    differ
}

/// Runs `tests/reference/<script>` with `args`; it must succeed, and its stdout is the
/// JSON it printed.
pub fn reference_json(script: &str, args: &[&str]) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/reference")
        .join(script);
    let out = python()
        .arg(path)
        .args(args)
        .output()
        .expect("python runs (SEGTOOL_PYTHON)");
    assert!(
        out.status.success(),
        "{script} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Runs `script` (tests/reference/) with `--out` a fresh folder `name` under cargo's test
/// temp dir; returns the folder and the JSON line the script printed.
pub fn reference(script: &str, name: &str) -> (PathBuf, serde_json::Value) {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let json = reference_json(script, &["--out", p(&dir)]);
    (dir, json)
}

/// A successful segtool run's stderr (the run's stderr in the failure message otherwise).
pub fn ok(out: Output) -> String {
    assert!(
        out.status.success(),
        "segtool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `segtool infer` of `model` on every image of `images` with `extra` flags, on `engine`,
/// writing into `out`; each `<image>_labels.png` against `refs/<image>.npy` (and its
/// `.margin.npy`) with [`assert_masks_match`].
#[allow(clippy::too_many_arguments)]
pub fn serve_and_compare(
    images: &Path,
    refs: &Path,
    out: &Path,
    model: &Path,
    engine: &str,
    extra: &[&str],
    what: &str,
) -> (usize, usize) {
    let mut args = vec![
        "infer",
        "--model",
        p(model),
        "--input",
        p(images),
        "--out",
        p(out),
        "--labels",
        "--no-overlay",
        "--quiet",
        "--engine",
        engine,
    ];
    args.extend_from_slice(extra);
    ok(segtool(&args));
    let (mut compared, mut differ, mut pixels) = (0, 0, 0);
    for entry in std::fs::read_dir(images).unwrap() {
        let stem = entry
            .unwrap()
            .path()
            .file_stem()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let ours = image::open(out.join(format!("{stem}_labels.png")))
            .unwrap()
            .to_luma8();
        let (shape, want) = npy(&refs.join(format!("{stem}.npy")));
        let (_, margin) = npy(&refs.join(format!("{stem}.margin.npy")));
        assert_eq!(
            (ours.height() as usize, ours.width() as usize),
            (shape[0], shape[1]),
            "{what} on {engine}, image {stem}: mask size"
        );
        differ += assert_masks_match(
            ours.as_raw(),
            &want,
            &margin,
            &format!("{what} on {engine}, image {stem}"),
        );
        pixels += want.len();
        compared += 1;
    }
    assert!(compared > 0, "{what}: no images");
    (differ, pixels)
}

/// Every tensor of two checkpoints (weights, BN statistics, momentum, QAT thresholds) bit
/// for bit: what a resumed run must end with.
pub fn assert_same_tensors(a: &std::path::Path, b: &std::path::Path) {
    let read = |path: &std::path::Path| {
        let mut tensors = tch::Tensor::read_safetensors(path).unwrap();
        tensors.sort_by(|x, y| x.0.cmp(&y.0));
        tensors
    };
    let (a, b) = (read(a), read(b));
    let names = |t: &[(String, tch::Tensor)]| t.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a), names(&b));
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let bits = |t: &tch::Tensor| {
            let flat = t.to_kind(tch::Kind::Float).flatten(0, -1);
            Vec::<f32>::try_from(&flat)
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert!(bits(x) == bits(y), "{name} differs");
    }
}
