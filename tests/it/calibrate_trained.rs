#![cfg(all(feature = "train", feature = "ort"))]
//! The accuracy acceptance for `segtool calibrate`: on a DANet *trained* by
//! `segtool train` (the tiny shapes preset, briefly, one thread), the int8 model's argmax
//! must agree with fp32's on at least 98% of the synthetic validation pixels in ONNX
//! Runtime, for the entropy and the minmax calibrators.

use crate::common;

use common::{agreement, p, read_images, segtool};

use std::process::Output;
use std::time::Instant;

use segtool_runtime::{EngineKind, Segmenter};

/// The acceptance threshold (argmax agreement with fp32 on the val images).
const MIN_AGREEMENT: f64 = 0.98;

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

#[test]
fn int8_of_a_trained_model_agrees_with_fp32_on_98_percent_of_val_pixels() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = d.join("run");
    let start = Instant::now();
    // shapes-tiny, 64 x 64 images, 600 iterations (the preset's schedule), no periodic
    // validation: ~30 s on one thread.
    ok(segtool(&[
        "train",
        "--config",
        "shapes-tiny",
        "--threads",
        "1",
        "--set",
        "optim.iterations=600",
        "--set",
        "data.shapes_size=64",
        "--set",
        "augment.base_size=64",
        "--set",
        "eval.every=0",
        "--set",
        "checkpoint.every=0",
        "--set",
        &format!("out_dir={}", p(&run)),
    ]));
    eprintln!("trained in {:.1} s", start.elapsed().as_secs_f64());
    let ckpt = run.join("last.safetensors");
    let fp32 = d.join("m.onnx");
    ok(segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&fp32),
    ]));
    let data = d.join("data");
    ok(segtool(&[
        "generate",
        "--out",
        p(&data),
        "--size",
        "64",
        "--train-count",
        "32",
        "--val-count",
        "32",
    ]));
    let val = read_images(&data.join("images/val"));
    let reference = Segmenter::builder(&fp32)
        .engine(EngineKind::Ort)
        .open()
        .unwrap()
        .segment_batch(&val)
        .unwrap();
    let mut results = Vec::new();
    for method in ["entropy", "minmax"] {
        let out = d.join(format!("m.{method}.onnx"));
        let o = ok(segtool(&[
            "calibrate",
            "--model",
            p(&fp32),
            "--images",
            p(&data.join("images/train")),
            "--method",
            method,
            "--samples",
            "32",
            "--per-channel",
            "-o",
            p(&out),
            "--latency-runs",
            "0",
            "--threads",
            "1",
            "--quiet",
        ]));
        eprintln!("{method}:\n{}", String::from_utf8_lossy(&o.stdout));
        let int8 = Segmenter::builder(&out)
            .engine(EngineKind::Ort)
            .open()
            .unwrap()
            .segment_batch(&val)
            .unwrap();
        let a = agreement(&int8, &reference);
        eprintln!(
            "{method}: argmax agreement with fp32 on {} val images (ORT): {:.2}%",
            val.len(),
            a * 100.0
        );
        results.push((method, a));
    }
    eprintln!("total {:.1} s", start.elapsed().as_secs_f64());
    for (method, a) in results {
        assert!(
            a >= MIN_AGREEMENT,
            "{method}: agreement {a:.4} < {MIN_AGREEMENT}"
        );
    }
}
