#![cfg(all(feature = "train", feature = "ort"))]
//! `segtool compare` end to end on a random tiny DANet: two fp32 targets agree within
//! 1e-4 at every shared layer; fp32 vs `--fp16 --keep-fp32` and vs INT8 give a
//! per-layer table in graph order and name the first layer past the tolerance.

use crate::common;

use std::path::Path;

use common::{p, segtool};

use std::process::Output;

fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

fn json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

#[test]
fn compare_per_layer_tables() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, _, ckpt) = common::tiny_checkpoint(d, 5);
    let export = |name: &str, extra: &[&str]| {
        let out = d.join(format!("{name}.onnx"));
        let mut args = vec!["export", "--checkpoint", p(&ckpt), "--onnx", p(&out)];
        args.extend_from_slice(extra);
        ok(segtool(&args));
        out
    };
    let legacy = export("legacy", &[]);
    let ort = export("ort", &["--target", "ort"]);
    let fp16 = export("fp16", &["--fp16", "--keep-fp32", "head.conv8,head.conv52"]);
    let data = d.join("data");
    ok(segtool(&[
        "generate",
        "--out",
        p(&data),
        "--size",
        "40",
        "--train-count",
        "4",
        "--val-count",
        "2",
    ]));
    let images = data.join("images/train");

    two_fp32_targets_agree(d, &legacy, &ort, &images);
    fp16_is_compared_through_a_cast(d, &legacy, &fp16, &images);
    int8_names_its_first_layer_past_the_snr(d, &legacy, &images);
}

/// Two fp32 targets: every shared layer within 1e-4, in graph order.
fn two_fp32_targets_agree(d: &Path, legacy: &Path, ort: &Path, images: &Path) {
    let j = d.join("targets.json");
    let out = ok(segtool(&[
        "compare",
        p(legacy),
        p(ort),
        "--images",
        p(images),
        "--samples",
        "2",
        "--json",
        p(&j),
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("every layer within the tolerance"), "{text}");
    let v = json(&j);
    assert_eq!(v["all_within_tolerance"], true);
    let layers = v["layers"].as_array().unwrap();
    assert!(layers.len() > 20, "{}", layers.len());
    assert_eq!(layers[0]["name"], "pretrained.conv1");
    assert_eq!(layers.last().unwrap()["name"], "logits");
    let pos = |n: &str| layers.iter().position(|l| l["name"] == n).unwrap();
    assert!(
        pos("head.conv5a.0") < pos("head.conv51.0") && pos("head.conv51.0") < pos("head.conv8.1")
    );
    for l in layers {
        assert!(l["max_abs_diff"].as_f64().unwrap() <= 1e-4, "{l}");
    }
}

/// fp32 vs fp16 with fp32 islands: FLOAT16 tensors are compared through a Cast.
fn fp16_is_compared_through_a_cast(d: &Path, legacy: &Path, fp16: &Path, images: &Path) {
    let j = d.join("fp16.json");
    ok(segtool(&[
        "compare",
        p(legacy),
        p(fp16),
        "--images",
        p(images),
        "--samples",
        "2",
        "--json",
        p(&j),
    ]));
    let v = json(&j);
    let layers = v["layers"].as_array().unwrap();
    assert!(layers
        .iter()
        .any(|l| l["name"] == "pretrained.layer1.0.conv1"));
    assert!(layers.iter().any(|l| l["name"] == "head.conv8.1"));
    assert_eq!(v["first_past_tolerance"], layers[0]["name"]);
}

/// fp32 vs INT8: the SNR tolerance names a layer, the worst layers are listed, and
/// OpenVINO's precisions are reported.
fn int8_names_its_first_layer_past_the_snr(d: &Path, legacy: &Path, images: &Path) {
    let int8 = d.join("int8.onnx");
    ok(segtool(&[
        "calibrate",
        "--model",
        p(legacy),
        "--images",
        p(images),
        "--samples",
        "4",
        "--latency-runs",
        "0",
        "--quiet",
        "-o",
        p(&int8),
    ]));
    let j = d.join("int8.json");
    let out = ok(segtool(&[
        "compare",
        p(legacy),
        p(&int8),
        "--images",
        p(images),
        "--samples",
        "2",
        "--min-snr",
        "60",
        "--openvino",
        "f32",
        "--json",
        p(&j),
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    let v = json(&j);
    // OpenVINO ran the fp32 file in f32 and the INT8 file's quantised layers in INT8.
    assert!(v["openvino"]["a"]["f32"].as_u64().unwrap() > 0, "{text}");
    assert!(v["openvino"]["a"].get("int8").is_none(), "{text}");
    assert!(v["openvino"]["b"]["int8"].as_u64().unwrap() > 0, "{text}");
    assert!(text.contains("nodes by precision"), "{text}");
    let first = v["first_past_tolerance"]
        .as_str()
        .expect("a layer under 60 dB");
    assert!(
        text.contains(&format!(
            "first layer past the tolerance (SNR >= 60 dB): {first}"
        )),
        "{text}"
    );
    assert_eq!(v["worst_layers"].as_array().unwrap().len(), 5);
}
