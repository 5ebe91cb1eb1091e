#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `segtool calibrate` end to end: export a random tiny DANet, generate images, calibrate
//! with every method, and check the int8 models (ONNX Runtime, tract, onnx checker,
//! agreement with fp32, byte-identical reruns).

use crate::common;

use common::{agreement, p, read_images, segtool};

use std::path::{Path, PathBuf};
use std::process::Output;

use segtool_runtime::{EngineKind, Segmenter};

pub(crate) fn ok(out: Output) -> Output {
    assert!(
        out.status.success(),
        "stderr: {}\nstdout: {}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

/// Argmax agreement with fp32 that a *random* tiny DANet must reach. Its logits are
/// nearly tied in many pixels (no training), so int8 noise flips more of them than in a
/// trained model, for which the target is 98%.
const RANDOM_MODEL_MIN_AGREEMENT: f64 = 0.90;

/// A random tiny DANet exported to `d/m.onnx`, and `d/data` with 8 training and 4
/// validation images of 48x48 (`segtool generate`).
pub(crate) fn tiny_model_and_images(d: &Path) -> (PathBuf, PathBuf) {
    let (_, _, ckpt) = common::tiny_checkpoint(d, 3);
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
        "48",
        "--train-count",
        "8",
        "--val-count",
        "4",
    ]));
    (fp32, data)
}

#[test]
fn calibrate_every_method_runs_in_ort_and_tract_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (fp32, data) = tiny_model_and_images(d);
    // For bench/calibrate_vs_ort_quant.py: keep the random tiny model.
    if let Some(keep) = std::env::var_os("SEGTOOL_CALIBRATE_KEEP_MODEL") {
        std::fs::copy(&fp32, keep).unwrap();
    }
    let calib_images = data.join("images/train");
    let val_images = data.join("images/val");
    let imgs = read_images(&val_images);
    let reference = Segmenter::builder(&fp32)
        .engine(EngineKind::Ort)
        .open()
        .unwrap()
        .segment_batch(&imgs)
        .unwrap();

    let calibrate = |method: &str, tag: &str| {
        let out = d.join(format!("m.{tag}.onnx"));
        let cache = d.join(format!("m.{tag}.calib"));
        let report = d.join(format!("r.{tag}.json"));
        let o = ok(segtool(&[
            "calibrate",
            "--model",
            p(&fp32),
            "--images",
            p(&calib_images),
            "--labels",
            p(&data.join("masks/train")),
            "--method",
            method,
            "--samples",
            "8",
            "--per-channel",
            "-o",
            p(&out),
            "--trt-cache",
            p(&cache),
            "--report",
            p(&report),
            "--latency-runs",
            "3",
            "--quiet",
        ]));
        eprintln!("{method}:\n{}", String::from_utf8_lossy(&o.stdout));
        (out, cache, report)
    };

    for method in ["minmax", "percentile", "entropy", "mse"] {
        let (out, cache, report) = calibrate(method, method);
        let r: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        let reported = r["argmax_agreement"].as_f64().unwrap();
        assert!(r["miou_int8"].as_f64().is_some());
        assert!(!r["layers"].as_array().unwrap().is_empty());
        assert!(r["size_int8_bytes"].as_u64().unwrap() < r["size_fp32_bytes"].as_u64().unwrap());
        let text = std::fs::read_to_string(&cache).unwrap();
        assert!(text.starts_with("TRT-8601-EntropyCalibration2\n"), "{text}");
        assert!(text.lines().skip(1).all(|l| {
            l.rsplit_once(": ")
                .is_some_and(|(_, h)| h.len() == 8 && u32::from_str_radix(h, 16).is_ok())
        }));
        // The int8 model in ORT and in tract (runtime Segmenter) on held-out images.
        let ort = Segmenter::builder(&out)
            .engine(EngineKind::Ort)
            .open()
            .unwrap()
            .segment_batch(&imgs)
            .unwrap();
        let tract = Segmenter::builder(&out)
            .engine(EngineKind::Tract)
            .open()
            .unwrap()
            .segment_batch(&imgs)
            .unwrap();
        let (a_ort, a_tract) = (agreement(&ort, &reference), agreement(&tract, &reference));
        eprintln!(
            "{method}: argmax agreement with fp32: report (calibration images) {:.4}, \
             ORT (val) {a_ort:.4}, tract (val) {a_tract:.4}",
            reported
        );
        for a in [reported, a_ort, a_tract] {
            assert!(a >= RANDOM_MODEL_MIN_AGREEMENT, "{method}: agreement {a}");
        }
        // ONNX's own checker, full check (shape inference included).
        let check = common::python()
            .args([
                "-c",
                "import onnx, sys; onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)",
                p(&out),
            ])
            .output()
            .unwrap();
        assert!(
            check.status.success(),
            "onnx checker: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    // Same inputs, byte-identical model and cache.
    let (a, ac, _) = calibrate("entropy", "again");
    let (b, bc, _) = calibrate("entropy", "entropy");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(std::fs::read(&ac).unwrap(), std::fs::read(&bc).unwrap());
}

/// The ORT CPU layout against onnxruntime's own quantiser on the same model and images:
/// ORT's optimiser must turn as many of our nodes into int8 kernels (Conv, Add,
/// MaxPool) as of its best configuration's (uint8 asymmetric; Conv, Add, Relu and
/// MaxPool only), but for the logits Conv, which stays float by design (its output is
/// the scores; quantising it costs agreement for a fraction of a millisecond); our
/// Relus fold into the quantised range where the portable layout's stay float. `segtool
/// compare` shows the kernels from ORT's profile.
#[test]
fn the_ort_cpu_layout_fuses_at_least_what_onnxruntimes_quantiser_does() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (fp32, data) = tiny_model_and_images(d);
    let (calib, val) = (data.join("images/train"), data.join("images/val"));
    let ours: Vec<_> = ["portable", "ort-cpu"]
        .iter()
        .map(|layout| {
            let out = d.join(format!("m.{layout}.onnx"));
            ok(segtool(&[
                "calibrate",
                "--model",
                p(&fp32),
                "--images",
                p(&calib),
                "--method",
                "minmax",
                "--samples",
                "8",
                "--per-channel",
                "--layout",
                layout,
                "--latency-runs",
                "0",
                "--quiet",
                "-o",
                p(&out),
            ]));
            out
        })
        .collect();
    let r = common::reference_json(
        "qdq_fusions.py",
        &[p(&fp32), p(&calib), p(&val), p(&ours[0]), p(&ours[1])],
    );
    eprintln!("{r:#}");
    let ops = |file: &str, op: &str| r[file]["ops"][op].as_u64().unwrap_or(0);
    let (portable, ort_cpu) = (p(&ours[0]), p(&ours[1]));
    let best = "quantize_static uint8 CNN ops";
    let float_convs = |f: &str| ops(f, "Conv") + ops(f, "FusedConv");
    assert_eq!(float_convs(ort_cpu), 1, "only the logits Conv stays float");
    assert!(ops(ort_cpu, "QLinearConv") + 1 >= ops(best, "QLinearConv").max(2));
    assert!(ops(ort_cpu, "QLinearAdd") >= ops(best, "QLinearAdd").max(1));
    assert!(ops(ort_cpu, "NhwcMaxPool") >= ops(best, "NhwcMaxPool"));
    assert!(ops(ort_cpu, "Relu") < ops(portable, "Relu"));
    for file in [portable, ort_cpu] {
        let a = r[file]["agreement"].as_f64().unwrap();
        assert!(a >= RANDOM_MODEL_MIN_AGREEMENT, "{file}: agreement {a}");
    }
    // tract reads the uint8 zero points too.
    let imgs = read_images(&val);
    let reference = Segmenter::builder(&fp32)
        .engine(EngineKind::Ort)
        .open()
        .unwrap()
        .segment_batch(&imgs)
        .unwrap();
    let tract = Segmenter::builder(&ours[1])
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .segment_batch(&imgs)
        .unwrap();
    assert!(agreement(&tract, &reference) >= RANDOM_MODEL_MIN_AGREEMENT);

    let c = ok(segtool(&[
        "compare",
        p(&fp32),
        ort_cpu,
        "--images",
        p(&val),
        "--samples",
        "2",
        "--min-snr",
        "0",
    ]));
    let text = String::from_utf8_lossy(&c.stdout);
    assert!(
        text.contains(&format!("ONNX Runtime CPU kernels of {ort_cpu}")),
        "{text}"
    );
    assert!(
        text.contains("int8 (") && text.contains("QLinearConv"),
        "{text}"
    );
}
