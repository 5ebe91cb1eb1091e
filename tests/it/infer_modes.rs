#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `segtool infer` modes: `--preprocess` / `--argmax` exports driven by their metadata,
//! several sessions through the batch server (`--cpu-sessions`, `--devices`), and accuracy
//! mode (sliding windows, flip) against `segtool_runtime::pipeline::accuracy`.

use crate::common;

use common::{p, segtool};

use std::path::{Path, PathBuf};
use std::process::Output;

use segtool_runtime::pipeline::accuracy::{self, AccuracyOptions};
use segtool_runtime::expert::load_spec;
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{expert::TractEngine, EngineKind, InputLayout, OutputKind, Segmenter};

const W: u32 = 48;
const H: u32 = 32;

fn ok(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "segtool failed: {stderr}");
    stderr
}

const NAMES: [&str; 4] = ["img0", "img1", "img2", "odd"];

/// The tiny checkpoint exported as `<name>.onnx` with each flag set, and four images in
/// `d/imgs` (three 48x32, one 20x28 so that a batch mixes sizes).
fn setup(d: &Path, variants: &[(&str, &[&str])]) -> (Vec<PathBuf>, Vec<image::RgbImage>) {
    let (_, _, ckpt) = common::tiny_checkpoint(d, 11);
    let models = variants
        .iter()
        .map(|(name, flags)| {
            let onnx = d.join(format!("{name}.onnx"));
            let mut args = vec!["export", "--checkpoint", p(&ckpt), "--onnx", p(&onnx)];
            args.extend_from_slice(flags);
            ok(&segtool(&args));
            onnx
        })
        .collect();
    let imgs_dir = d.join("imgs");
    std::fs::create_dir_all(&imgs_dir).unwrap();
    let mut images: Vec<_> = (0..3).map(|seed| common::test_image(seed, W, H)).collect();
    images.push(image::RgbImage::from_fn(20, 28, |x, y| {
        image::Rgb([(x * 12) as u8, (y * 9) as u8, ((x + y) * 5) as u8])
    }));
    for (name, img) in NAMES.iter().zip(&images) {
        img.save(imgs_dir.join(format!("{name}.png"))).unwrap();
    }
    (models, images)
}

/// `segtool infer --labels` of every image in `d/imgs` with `extra` flags; the label
/// maps in `NAMES` order and segtool's stderr.
fn infer_labels(d: &Path, model: &Path, out: &str, extra: &[&str]) -> (Vec<Vec<u8>>, String) {
    let pred = d.join(out);
    let mut args = vec!["infer", "--model", p(model), "--out", p(&pred), "--input"];
    let inputs: Vec<String> = NAMES
        .iter()
        .map(|n| format!("{}/{n}.png", p(&d.join("imgs"))))
        .collect();
    args.extend(inputs.iter().map(String::as_str));
    args.extend_from_slice(&["--labels", "--no-overlay", "--threads", "1", "--quiet"]);
    args.extend_from_slice(extra);
    let stderr = ok(&segtool(&args));
    let labels = NAMES
        .iter()
        .map(|n| {
            let img = image::open(pred.join(format!("{n}_labels.png"))).unwrap();
            assert_eq!(img.color(), image::ColorType::L8);
            img.into_luma8().into_raw()
        })
        .collect();
    (labels, stderr)
}

#[test]
fn preprocess_and_argmax_exports_give_the_same_labels() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let variants: [(&str, &[&str]); 4] = [
        ("plain", &[]),
        ("pre", &["--preprocess"]),
        ("argmax", &["--argmax"]),
        ("both", &["--preprocess", "--argmax"]),
    ];
    let (models, _) = setup(d, &variants);

    // The contract comes from the metadata and the graph.
    for (model, (input, output)) in models.iter().zip([
        (InputLayout::NchwF32, OutputKind::Logits),
        (InputLayout::NhwcU8, OutputKind::Logits),
        (InputLayout::NchwF32, OutputKind::Mask),
        (InputLayout::NhwcU8, OutputKind::Mask),
    ]) {
        let seg = Segmenter::builder(model)
            .engine(EngineKind::Tract)
            .open()
            .unwrap();
        assert_eq!(
            (seg.contract().input, seg.contract().output),
            (input, output)
        );
    }

    let (reference, _) = infer_labels(d, &models[0], "plain-ort", &["--batch-size", "2"]);
    let distinct: std::collections::HashSet<u8> = reference.concat().into_iter().collect();
    assert!(distinct.len() > 1, "degenerate prediction {distinct:?}");
    for (model, (name, _)) in models.iter().zip(&variants) {
        for engine in ["ort", "tract"] {
            let out = format!("{name}-{engine}");
            let (labels, _) =
                infer_labels(d, model, &out, &["--engine", engine, "--batch-size", "2"]);
            for (i, n) in NAMES.iter().enumerate() {
                assert!(
                    labels[i] == reference[i],
                    "{name} with {engine}: labels of {n} differ from the plain export's"
                );
            }
        }
    }

    // Same-size inputs only: the ORT session is fixed to their size (the height/width
    // axes are 1 and 2 for the uint8 NHWC contract, 2 and 3 otherwise); same labels.
    let same_size: Vec<String> = NAMES[..3]
        .iter()
        .map(|n| format!("{}/{n}.png", p(&d.join("imgs"))))
        .collect();
    for (model, (name, _)) in models.iter().zip(&variants) {
        let pred = d.join(format!("{name}-fixed"));
        let mut args = vec!["infer", "--model", p(model), "--out", p(&pred), "--labels"];
        args.extend(["--no-overlay", "--threads", "1", "--input"]);
        args.extend(same_size.iter().map(String::as_str));
        let out = segtool(&args);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("fixed"),
            "{name}: {stdout}"
        );
        for (i, n) in NAMES[..3].iter().enumerate() {
            let labels = image::open(pred.join(format!("{n}_labels.png"))).unwrap();
            assert!(
                labels.into_luma8().into_raw() == reference[i],
                "{name}, fixed-size session: labels of {n} differ"
            );
        }
    }

    // An --argmax export has no logits to write.
    let out = segtool(&[
        "infer",
        "--model",
        p(&models[2]),
        "--input",
        p(&d.join("imgs/img0.png")),
        "--out",
        p(&d.join("x")),
        "--logits",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--argmax"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // bench drives the contract too (ONNX Runtime named: `auto` picks by the CPU).
    let out = ok(&segtool(&[
        "bench",
        "--engine",
        "ort",
        "--model",
        p(&models[3]),
        "--iterations",
        "2",
        "--warmup",
        "0",
        "--batch-sizes",
        "1,2",
        "--size",
        &format!("{H}x{W}"),
        "--threads",
        "1",
    ]));
    assert!(out.contains("engine onnxruntime"), "{out}");
}

#[test]
fn sessions_sliding_windows_and_devices() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (models, images) = setup(
        d,
        &[("plain", &[]), ("both", &["--preprocess", "--argmax"])],
    );
    let plain = &models[0];
    let (reference, _) = infer_labels(d, plain, "single", &["--batch-size", "2"]);

    // Two CPU sessions behind the batch server: same labels, same order.
    for (model, name) in models.iter().zip(["plain", "both"]) {
        for engine in ["ort", "tract"] {
            let out = format!("sessions-{name}-{engine}");
            let (labels, stderr) = infer_labels(
                d,
                model,
                &out,
                &[
                    "--cpu-sessions",
                    "2",
                    "--batch-size",
                    "2",
                    "--engine",
                    engine,
                    "--max-wait-ms",
                    "5",
                ],
            );
            assert!(stderr.contains("session 1"), "{stderr}");
            assert!(
                labels == reference,
                "{name} {engine}: --cpu-sessions 2 differs"
            );
        }
    }

    // Accuracy mode: sliding windows with flip, as runtime::accuracy computes it.
    let (labels, _) = infer_labels(
        d,
        plain,
        "sliding",
        &[
            "--engine",
            "tract",
            "--mode",
            "sliding",
            "--crop",
            "24",
            "--stride",
            "16",
            "--flip",
            "--batch-size",
            "1",
        ],
    );
    let spec = load_spec(plain).unwrap();
    let mut engine = TractEngine::open(plain).unwrap();
    let opts = AccuracyOptions::new()
        .sliding(24, 16)
        .flip(true)
        .batch_size(1);
    for (i, img) in images.iter().enumerate() {
        let (masks, _) =
            accuracy::segment(&mut engine, &spec, std::slice::from_ref(img), &opts).unwrap();
        assert_eq!(
            masks[0].dim(),
            (img.height() as usize, img.width() as usize)
        );
        assert!(
            masks[0].to_le_bytes() == labels[i].as_slice(),
            "sliding labels of {} differ from accuracy::segment",
            NAMES[i]
        );
    }
    // Sliding differs from whole-image inference somewhere (windows see less context).
    assert!(labels != reference, "sliding windows changed nothing");

    // Accuracy mode is single-session, and needs logits.
    let img0 = d.join("imgs/img0.png");
    let refused = d.join("refused");
    let refuse = |model: &Path, extra: &[&str], needle: &str| {
        let mut args = vec![
            "infer",
            "--model",
            p(model),
            "--input",
            p(&img0),
            "--out",
            p(&refused),
        ];
        args.extend_from_slice(extra);
        let out = segtool(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} accepted");
        assert!(err.contains(needle), "{extra:?}: {err}");
    };
    refuse(plain, &["--flip", "--cpu-sessions", "2"], "single session");
    refuse(
        &models[1],
        &["--mode", "sliding", "--crop", "24"],
        "--argmax",
    );

    // --devices 0 without a GPU: a reported CPU fallback, the same labels; --strict fails.
    let (labels, stderr) = infer_labels(d, plain, "devices", &["--devices", "0"]);
    if stderr.contains("on cuda:0") {
        eprintln!("a GPU is present: no fallback to check");
    } else {
        assert!(stderr.contains("CPU fallback"), "{stderr}");
        assert!(labels == reference, "--devices 0 (CPU fallback) differs");
        refuse(plain, &["--devices", "0", "--strict"], "cuda");
    }
}
