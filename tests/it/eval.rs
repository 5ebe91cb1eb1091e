#![cfg(feature = "train")]
//! `segtool eval` end to end: the paper's protocol (sliding windows smaller than the
//! image, flip, two scales) on a tiny random checkpoint, with the saved predictions
//! re-scored by an independent numpy implementation of the confusion matrix.

use crate::common;

use common::{p, segtool};

use std::path::Path;
use std::process::Output;

use serde_json::Value;

fn ok(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "segtool failed: {stderr}");
    String::from_utf8(out.stdout).unwrap()
}

/// `tests/reference/eval_confusion.py` on the prediction and mask folders.
fn numpy_metrics(pred: &Path, gt: &Path, classes: usize) -> Value {
    let classes = classes.to_string();
    common::reference_json(
        "eval_confusion.py",
        &["--pred", p(pred), "--gt", p(gt), "--num-classes", &classes],
    )
}

/// The paper's protocol in miniature: 48-pixel windows 32 apart over 64-pixel images
/// (four windows; at scale 0.75 one padded window), flip, two scales.
const PROTOCOL: &str =
    "--mode sliding --crop 48 --stride 32 --flip --scales 0.75,1.0 --batch-size 4 --threads 1";

/// `segtool eval` of `ckpt` on the folder `data` under [`PROTOCOL`], plus `extra`.
fn eval(ckpt: &Path, data: &Path, extra: &[&str]) -> String {
    let mut args = vec![
        "eval",
        "--checkpoint",
        p(ckpt),
        "--data",
        p(data),
        "--split",
        "val",
    ];
    args.extend(PROTOCOL.split(' '));
    args.extend(extra);
    ok(segtool(&args))
}

fn read_json(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn sliding_flip_multiscale_metrics_match_numpy() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let generate = "generate --size 64 --train-count 1 --val-count 6 --out";
    ok(segtool(
        &[generate.split(' ').collect(), vec![p(&data)]].concat(),
    ));
    let (spec, _model, ckpt) = common::tiny_checkpoint(d, 3);
    let (pred, metrics) = (d.join("pred"), d.join("m.json"));
    let started = std::time::Instant::now();
    let stdout = eval(
        &ckpt,
        &data,
        &["--predictions", p(&pred), "--metrics", p(&metrics)],
    );
    eprintln!(
        "segtool eval: {:.2} s\n{stdout}",
        started.elapsed().as_secs_f64()
    );
    assert!(stdout.contains("mIoU") && stdout.contains("c4"), "{stdout}");

    let names: Vec<String> = std::fs::read_dir(data.join("masks/val"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 6);
    for name in &names {
        let stem = name.trim_end_matches(".png");
        assert!(pred.join(name).is_file() && pred.join(format!("{stem}_color.png")).is_file());
    }

    let ours = read_json(&metrics);
    let theirs = numpy_metrics(&pred, &data.join("masks/val"), spec.num_classes());
    assert_eq!(theirs["images"], 6);
    assert_eq!(ours["confusion"], theirs["confusion"]);
    for key in ["mean_iou", "pixel_accuracy"] {
        let (a, b) = (ours[key].as_f64().unwrap(), theirs[key].as_f64().unwrap());
        assert!((a - b).abs() < 1e-9, "{key}: segtool {a} numpy {b}");
    }
    assert_eq!(
        ours["per_class"].as_array().unwrap().len(),
        spec.num_classes()
    );
    assert_eq!(ours["protocol"]["mode"], "sliding");

    // Same checkpoint, same protocol: the same confusion matrix, run after run.
    let again = d.join("again.json");
    eval(&ckpt, &data, &["--metrics", p(&again)]);
    assert_eq!(read_json(&again)["confusion"], ours["confusion"]);
}

/// Flags are checked before the checkpoint is read, so the error is about the flag.
#[test]
fn bad_protocol_flags_are_rejected() {
    for (args, needle) in [
        (&["--crop", "32"][..], "--mode sliding"),
        (
            &["--mode", "sliding", "--crop", "32", "--stride", "40"],
            "stride",
        ),
        (&["--ms", "--scales", "1.0"], "--ms"),
        (&["--scales", "1.0,-2"], "scales"),
    ] {
        let out = segtool(&[&["eval", "--checkpoint", "unread.safetensors"], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
}

/// `--protocol danet` end to end: DANet's window placement and stride default
/// (int(48 * 2/3) = 32), recorded in the metrics, predictions re-scored by numpy. (The
/// protocol's numbers are checked against a transcription of MultiEvalModule in
/// tests/it/protocol_danet.rs.)
#[test]
fn danet_protocol_runs_and_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let generate = "generate --size 64 --train-count 1 --val-count 3 --out";
    ok(segtool(
        &[generate.split(' ').collect(), vec![p(&data)]].concat(),
    ));
    let (spec, _model, ckpt) = common::tiny_checkpoint(d, 4);
    let (pred, metrics) = (d.join("pred"), d.join("m.json"));
    let out = segtool(&[
        "eval",
        "--checkpoint",
        p(&ckpt),
        "--data",
        p(&data),
        "--split",
        "val",
        "--protocol",
        "danet",
        "--base-size",
        "80",
        "--crop",
        "48",
        "--flip",
        "--threads",
        "1",
        "--predictions",
        p(&pred),
        "--metrics",
        p(&metrics),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    ok(out);
    assert!(stderr.contains("protocol: danet, long side 80"), "{stderr}");
    let ours = read_json(&metrics);
    let protocol = &ours["protocol"];
    assert_eq!(protocol["name"], "danet");
    assert_eq!(protocol["base_size"], 80);
    assert_eq!(protocol["mode"], "sliding");
    assert_eq!(protocol["stride"], 32);
    let theirs = numpy_metrics(&pred, &data.join("masks/val"), spec.num_classes());
    assert_eq!(ours["confusion"], theirs["confusion"]);

    for (args, needle) in [
        (
            &["--protocol", "mmseg", "--base-size", "80"][..],
            "danet protocol",
        ),
        (&["--base-size", "80"][..], "danet protocol"),
        (
            &["--protocol", "danet", "--mode", "whole", "--crop", "32"][..],
            "--mode sliding",
        ),
    ] {
        let out = segtool(&[&["eval", "--checkpoint", p(&ckpt)], args].concat());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(needle),
            "{args:?}: {stderr}"
        );
    }
}
