//! Globs, folders and files mixed, `--labels`/`--logits`, fixed and dynamic shapes, raw
//! frames on stdin, and `segtool bench`.

use std::path::Path;

use crate::common::{self, p, segtool};

use super::{labels, ok, segtool_stdin, setup, H, W};

#[test]
fn glob_raw_frames_logits_and_bench() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (onnx, images) = setup(d);
    // Glob (quoted: segtool expands it): img0..img2, not other.png or notes.txt.
    let pattern = format!("{}/img*.png", p(&d.join("imgs")));
    let png_labels = glob_with_labels_and_logits(d, &onnx, &pattern);
    dynamic_shapes_agree(d, &onnx, &pattern, &png_labels);
    mixed_inputs_agree(d, &onnx, &png_labels);
    let frames: Vec<u8> = images.iter().flat_map(|i| i.as_raw().clone()).collect();
    raw_frames_agree(d, &onnx, &frames, &png_labels);
    bad_raw_input_is_refused(&onnx, &pattern, &frames, &png_labels);
    bench_reports_its_json(d, &onnx);
}

/// The glob at a fixed size, with `--labels` and `--logits`: every file written, the
/// logits' argmax (numpy) equal to the labels; returns the labels, the reference of
/// the other paths.
fn glob_with_labels_and_logits(d: &Path, onnx: &Path, pattern: &str) -> Vec<Vec<u8>> {
    let pred = d.join("pred");
    let first = segtool(&[
        "infer",
        "--model",
        p(onnx),
        "--input",
        pattern,
        "--out",
        p(&pred),
        "--labels",
        "--logits",
        "--batch-size",
        "2",
        "--threads",
        "1",
    ]);
    ok(&first);
    // All three share one size, so the session was fixed to it (and said so).
    let summary = String::from_utf8_lossy(&first.stdout);
    assert!(summary.contains(&format!("fixed {H}x{W}")), "{summary}");
    for i in 0..3 {
        for suffix in ["mask.png", "overlay.png", "labels.png", "logits.npy"] {
            assert!(pred.join(format!("img{i}_{suffix}")).is_file(), "{suffix}");
        }
    }
    assert!(!pred.join("other_mask.png").exists());
    let png_labels: Vec<Vec<u8>> = (0..3)
        .map(|i| labels(&pred.join(format!("img{i}_labels.png"))))
        .collect();
    // A random model should still predict more than one class somewhere.
    let distinct: std::collections::HashSet<u8> = png_labels.concat().into_iter().collect();
    assert!(distinct.len() > 1, "degenerate prediction {distinct:?}");

    // --logits: numpy loads [5, H, W] float32 whose argmax is the mask.
    for i in 0..3 {
        let npy = pred.join(format!("img{i}_logits.npy"));
        let argmax = d.join(format!("argmax{i}.bin"));
        let script = "import sys, numpy as np\n\
                      a = np.load(sys.argv[1])\n\
                      assert a.dtype == np.float32, a.dtype\n\
                      print(a.shape)\n\
                      a.argmax(axis=0).astype(np.uint8).tofile(sys.argv[2])\n";
        let out = common::python()
            .args(["-c", script, p(&npy), p(&argmax)])
            .output()
            .expect("python runs");
        ok(&out);
        let shape = String::from_utf8_lossy(&out.stdout);
        assert_eq!(shape.trim(), format!("(5, {H}, {W})"));
        assert_eq!(std::fs::read(&argmax).unwrap(), png_labels[i], "image {i}");
    }

    png_labels
}

fn dynamic_shapes_agree(d: &Path, onnx: &Path, pattern: &str, png_labels: &[Vec<u8>]) {
    // The dynamic-shape session gives the same masks (batch 2 then 1, like above).
    let dynamic = d.join("pred_dynamic");
    let out = segtool(&[
        "infer",
        "--model",
        p(onnx),
        "--input",
        pattern,
        "--out",
        p(&dynamic),
        "--labels",
        "--batch-size",
        "2",
        "--dynamic-shapes",
    ]);
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("fixed"));
    for (i, want) in png_labels.iter().enumerate() {
        assert_eq!(&labels(&dynamic.join(format!("img{i}_labels.png"))), want);
    }
}

fn mixed_inputs_agree(d: &Path, onnx: &Path, png_labels: &[Vec<u8>]) {
    // Explicit files, a folder and a glob mixed; duplicates are dropped, same outputs.
    let pred2 = d.join("pred2");
    ok(&segtool(&[
        "infer",
        "--model",
        p(onnx),
        "--input",
        p(&d.join("imgs/img1.png")),
        "--input",
        &format!("{}/img[02].png", p(&d.join("imgs"))),
        p(&d.join("imgs/img1.png")),
        // Another size in the same batch: its own engine run.
        p(&d.join("imgs/other.png")),
        "--out",
        p(&pred2),
        "--labels",
        "--no-overlay",
        "--engine",
        "tract",
    ]));
    for i in 0..3 {
        assert_eq!(
            labels(&pred2.join(format!("img{i}_labels.png"))),
            png_labels[i]
        );
    }
    assert!(!pred2.join("img0_overlay.png").exists());
    let other = image::open(pred2.join("other_mask.png")).unwrap();
    assert_eq!((other.width(), other.height()), (16, 24));
    // A pattern matching nothing names itself.
    let out = segtool(&[
        "infer",
        "--model",
        p(onnx),
        "--input",
        &format!("{}/zz*.png", p(&d.join("imgs"))),
        "--out",
        p(&pred2),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zz*.png"));
}

fn raw_frames_agree(d: &Path, onnx: &Path, frames: &[u8], png_labels: &[Vec<u8>]) {
    // Raw frames on stdin -> raw class maps on stdout, identical to the PNG path.
    let raw = format!("{W}x{H}");
    for batch in ["1", "2"] {
        let out = segtool_stdin(
            &[
                "infer",
                "--model",
                p(onnx),
                "--raw",
                &raw,
                "--out",
                "-",
                "--batch-size",
                batch,
                "--threads",
                "1",
            ],
            frames,
        );
        ok(&out);
        assert_eq!(out.stdout.len(), 3 * (W * H) as usize);
        assert!(
            out.stdout == png_labels.concat(),
            "raw class maps differ from the PNG path (batch {batch})"
        );
    }
    // Raw frames -> PNGs in a folder.
    let pred3 = d.join("pred3");
    ok(&segtool_stdin(
        &[
            "infer",
            "--model",
            p(onnx),
            "--raw",
            &raw,
            "--out",
            p(&pred3),
            "--labels",
        ],
        frames,
    ));
    for i in 0..3 {
        assert!(pred3.join(format!("frame_{i:06}_mask.png")).is_file());
        assert_eq!(
            labels(&pred3.join(format!("frame_{i:06}_labels.png"))),
            png_labels[i]
        );
    }
}

fn bad_raw_input_is_refused(onnx: &Path, pattern: &str, frames: &[u8], png_labels: &[Vec<u8>]) {
    let raw = format!("{W}x{H}");
    // Bad --raw sizes: unparsable, zero, and frames that do not divide the input.
    for bad in ["48", "48x", "0x32", "axb"] {
        let out = segtool_stdin(
            &["infer", "--model", p(onnx), "--raw", bad, "--out", "-"],
            frames,
        );
        assert!(!out.status.success(), "--raw {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("WIDTHxHEIGHT"), "--raw {bad}: {err}");
    }
    let frame = (W * H * 3) as usize;
    let out = segtool_stdin(
        &["infer", "--model", p(onnx), "--raw", &raw, "--out", "-"],
        &frames[..2 * frame + 100],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("100 of {frame} bytes")) && err.contains("frame 2"),
        "{err}"
    );
    // The two whole frames before it were still written.
    assert_eq!(out.stdout, png_labels[..2].concat());
    // --out - without --raw is refused.
    let out = segtool(&[
        "infer",
        "--model",
        p(onnx),
        "--input",
        pattern,
        "--out",
        "-",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--raw"));
}

fn bench_reports_its_json(d: &Path, onnx: &Path) {
    // bench: JSON with per-batch-size latency stats, throughput and the provider (ONNX
    // Runtime named: `auto` picks by the CPU).
    let json_path = d.join("f.json");
    let out = segtool(&[
        "bench",
        "--engine",
        "ort",
        "--model",
        p(onnx),
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--batch-sizes",
        "1,2",
        "--size",
        &format!("{H}x{W}"),
        "--threads",
        "1",
        "--json",
        p(&json_path),
    ]);
    ok(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("median") && table.contains("img/s"),
        "{table}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(report["engine"], "onnxruntime");
    assert_eq!(report["provider"], "cpu");
    assert_eq!(report["threads"], 1);
    assert_eq!(report["size"]["height"], H);
    assert_eq!(report["size"]["width"], W);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, n) in results.iter().zip([1, 2]) {
        assert_eq!(r["batch_size"], n);
        assert_eq!(r["iterations"], 3);
        assert!(r["throughput_ips"].as_f64().unwrap() > 0.0);
        for key in ["latency_ms", "preprocess_ms", "engine_ms", "postprocess_ms"] {
            let s = &r[key];
            let v = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{key}.{k}"));
            assert!(v("min") <= v("median") && v("median") <= v("p90") && v("p90") <= v("p99"));
        }
        assert!(
            r["latency_ms"]["min"].as_f64().unwrap() >= r["engine_ms"]["min"].as_f64().unwrap()
        );
    }
    // tract, by duration.
    ok(&segtool(&[
        "bench",
        "--model",
        p(onnx),
        "--engine",
        "tract",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--size",
        &format!("{H}x{W}"),
    ]));
}
