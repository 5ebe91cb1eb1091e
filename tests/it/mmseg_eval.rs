#![cfg(feature = "train")]
//! `--protocol mmseg` against mmsegmentation 1.2.2's own test loop: a small registry-built
//! EncoderDecoder (ResNetV1c-50 at base width 16, DAHead with 64/8 channels, FCNHead aux,
//! well-conditioned random weights) saved in mmseg's file format by
//! tests/reference/mmseg_eval_ref.py, with a config whose test pipeline is
//! `Resize(scale=(128, 64), keep_ratio=True)` and whose `test_cfg` slides 48-pixel windows
//! 32 apart; 49x66 images (upscaled to 64x86 by the pipeline, so several windows; at TTA
//! ratio 0.5 one unpadded window smaller than the crop). mmseg predicts them with its
//! `model.test_step` (and `SegTTAModel` over its tta_pipeline: ratios 0.5..1.75, flip).
//! segtool imports the file with no flag and predicts with `segtool eval` (its defaults:
//! the file's test config), the training crate's evaluation (tch) and the runtime's
//! accuracy mode (ONNX Runtime and tract on the export).
//!
//! Tolerance: label maps identical, every pixel, for whole, slide, TTA whole and TTA
//! slide, with align_corners false and true. (segtool's float32 logits differ from
//! mmseg's by float noise only; an argmax near-tie could flip a pixel, which this model
//! and these images do not have.)

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::{p, python, segtool};
use segtool_model_spec::spec::MmsegTestCfg;
use segtool_train::eval::{sliding, EvalOptions};
use tempfile::TempDir;

/// mmseg's prediction folders; TTA ones hold the first image only (twelve passes each).
const SETTINGS: [&str; 4] = ["single_slide", "single_whole", "tta_slide", "tta_whole"];

/// mmseg's checkpoint, dataset and predictions, and segtool's import of it, made once
/// per `align_corners` for every test of this binary.
fn reference(align_corners: bool) -> &'static (TempDir, PathBuf) {
    static CACHE: [OnceLock<(TempDir, PathBuf)>; 2] = [OnceLock::new(), OnceLock::new()];
    CACHE[align_corners as usize].get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let ckpt = make_reference(dir.path(), align_corners);
        (dir, ckpt)
    })
}

fn make_reference(dir: &Path, align_corners: bool) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/mmseg_eval_ref.py");
    let run = python()
        .arg(script)
        .arg(dir)
        .args(["--align-corners", if align_corners { "1" } else { "0" }])
        .output()
        .expect("python runs (SEGTOOL_PYTHON)");
    assert!(
        run.status.success(),
        "mmseg_eval_ref.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let ckpt = dir.join("m.safetensors");
    let out = segtool(&[
        "import",
        "--from",
        p(&dir.join("mmseg.pth")),
        "--out",
        p(&ckpt),
    ]);
    assert!(
        out.status.success(),
        "segtool import failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spec = segtool_train::Checkpoint::read(&ckpt).unwrap().spec;
    assert_eq!(spec.align_corners, align_corners);
    assert_eq!(spec.mmseg_test, Some(test_cfg()));
    ckpt
}

fn test_cfg() -> MmsegTestCfg {
    MmsegTestCfg {
        scale: [128, 64],
        crop: Some(48),
        stride: Some(32),
    }
}

/// The protocol of mmseg's `setting` folder (the import's test config, as `segtool
/// eval --protocol mmseg` defaults to it; TTA as `--ms --flip`).
fn options(setting: &str) -> EvalOptions {
    let single = EvalOptions::new().mmseg_test(&test_cfg());
    match setting {
        "single_slide" => single,
        "single_whole" => single.whole(),
        "tta_slide" => single.mmseg_tta(),
        "tta_whole" => single.whole().mmseg_tta(),
        other => unreachable!("{other}"),
    }
}

fn labels(path: &Path) -> Vec<u8> {
    image::open(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .to_luma8()
        .into_raw()
}

/// Images of mmseg's `setting` folder (TTA: the first only).
fn names(setting: &str) -> &'static [&'static str] {
    if setting.starts_with("tta") {
        &["img0"]
    } else {
        &["img0", "img1"]
    }
}

/// Differing pixels and all pixels between mmseg's `setting` folder and `ours`.
fn differing(dir: &Path, setting: &str, ours: impl Fn(usize) -> Vec<u8>) -> (usize, usize) {
    let (mut diff, mut total) = (0, 0);
    for (i, name) in names(setting).iter().enumerate() {
        let theirs = labels(&dir.join(setting).join(format!("{name}.png")));
        let ours = ours(i);
        assert_eq!(ours.len(), theirs.len(), "{setting} {name}: size");
        diff += ours.iter().zip(&theirs).filter(|(a, b)| a != b).count();
        total += theirs.len();
    }
    (diff, total)
}

/// `segtool eval --protocol mmseg` with the checkpoint's defaults (the CLI path), then
/// the training crate's evaluation (`sliding::predict_images`, what `eval` runs per
/// batch) for the other settings.
fn eval_matches_mmseg(align_corners: bool) {
    let (dir, ckpt) = reference(align_corners);
    let d = dir.path();
    let pred = d.join("ours_cli");
    let data = d.join("data");
    let out = segtool(&[
        "eval",
        "--checkpoint",
        p(ckpt),
        "--data",
        p(&data),
        "--split",
        "val",
        "--protocol",
        "mmseg",
        "--batch-size",
        "2",
        "--threads",
        "1",
        "--predictions",
        p(&pred),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "segtool eval: {stderr}");
    assert!(
        stderr.contains("keep-ratio resize to (128, 64), 48 windows every 32"),
        "{stderr}"
    );
    let (diff, total) = differing(d, "single_slide", |i| {
        labels(&pred.join(format!("img{i}.png")))
    });
    eprintln!("align_corners {align_corners} segtool eval: {diff} of {total} pixels differ");
    assert_eq!(diff, 0, "align_corners {align_corners}: segtool eval");

    tch::set_num_threads(1);
    let checkpoint = segtool_train::Checkpoint::read(ckpt).unwrap();
    let (_vs, model) = segtool_train::load_model(&checkpoint, tch::Device::Cpu).unwrap();
    let imgs = common::read_images(&data.join("images/val"));
    for setting in SETTINGS {
        let batch: Vec<&image::RgbImage> = imgs.iter().take(names(setting).len()).collect();
        let scores = sliding::predict_images(&model, &batch, &options(setting), tch::Device::Cpu);
        let masks = scores.argmax(1, false).to_kind(tch::Kind::Uint8);
        let (diff, total) = differing(d, setting, |i| {
            Vec::<u8>::try_from(&masks.get(i as i64).contiguous().view(-1)).unwrap()
        });
        eprintln!("align_corners {align_corners} tch {setting}: {diff} of {total} pixels differ");
        assert_eq!(diff, 0, "align_corners {align_corners}: tch {setting}");
    }
}

#[test]
fn eval_matches_mmseg_test_loop_align_corners_false() {
    eval_matches_mmseg(false);
}

#[test]
fn eval_matches_mmseg_test_loop_align_corners_true() {
    eval_matches_mmseg(true);
}

#[cfg(all(feature = "ort", feature = "tract"))]
#[test]
fn accuracy_mode_matches_mmseg_test_loop() {
    use segtool_runtime::pipeline::accuracy;
    use segtool_runtime::{
        expert::{Engine, OrtEngine, TractEngine},
        OrtOptions,
    };

    let (dir, ckpt) = reference(false);
    let d = dir.path();
    let spec = segtool_train::Checkpoint::read(ckpt).unwrap().spec;
    let onnx = d.join("accuracy.onnx");
    segtool_export::export_onnx(ckpt, &onnx, &Default::default()).unwrap();
    let imgs = common::read_images(&d.join("data/images/val"));
    let engines: Vec<Box<dyn Engine>> = vec![
        Box::new(OrtEngine::open(&onnx, &OrtOptions::new().with_intra_threads(1)).unwrap()),
        Box::new(TractEngine::open(&onnx).unwrap()),
    ];
    // `segtool infer --protocol mmseg` on the export: the spec's test pipeline (keep-ratio
    // resize, slide 48/32) by default, from the images' pixels.
    let out = d.join("ours_infer");
    let o = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        p(&d.join("data/images/val")),
        "--protocol",
        "mmseg",
        "--labels",
        "--no-overlay",
        "--out",
        p(&out),
    ]);
    assert!(
        o.status.success(),
        "segtool infer: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (diff, total) = differing(d, "single_slide", |i| {
        labels(&out.join(format!("img{i}_labels.png")))
    });
    eprintln!("segtool infer --protocol mmseg: {diff} of {total} pixels differ");
    assert_eq!(diff, 0, "segtool infer --protocol mmseg");
    for mut engine in engines {
        for setting in SETTINGS {
            let batch = &imgs[..names(setting).len()];
            let opts = options(setting);
            let (masks, _) = accuracy::segment(engine.as_mut(), &spec, batch, &opts).unwrap();
            let (diff, total) = differing(d, setting, |i| masks[i].to_le_bytes());
            eprintln!(
                "{} {setting}: {diff} of {total} pixels differ",
                engine.name()
            );
            assert_eq!(diff, 0, "{} {setting}", engine.name());
        }
    }
}
