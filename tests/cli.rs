#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! The `segtool` binary end to end on tiny inputs: bad input gives a clear error naming
//! the file and a non-zero exit, and leaves no half-written output.

mod common;

use common::{p, segtool};

use std::process::Output;

fn assert_fails_naming(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr should mention {n:?}: {stderr}");
    }
}

#[test]
fn train_export_infer_and_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let ok = segtool(&[
        "generate",
        "--out",
        p(&data),
        "--size",
        "40",
        "--train-count",
        "4",
        "--val-count",
        "2",
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let run_dir = d.join("run");
    let dataset = format!("data.dataset={}", p(&data));
    let out_dir = format!("out_dir={}", p(&run_dir));
    let train = |extra: &[&str]| {
        let mut args = vec!["train", "--set", &dataset, "--set", &out_dir];
        for set in [
            "optim.iterations=2",
            "optim.batch_size=2",
            "data.workers=1",
            "log.every=1",
        ] {
            args.extend(["--set", set]);
        }
        args.extend(extra);
        segtool(&args)
    };
    // A typo in a key is an error naming the key, before any work.
    assert_fails_naming(&train(&["--set", "optim.lrr=0.1"]), &["lrr"]);
    // Stopped after one iteration, then resumed from the run directory.
    let ok = train(&["--stop-at", "1"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let ok = segtool(&["train", "--resume", p(&run_dir)]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stderr).contains("at iteration 1"));
    for file in [
        "last.safetensors",
        "best.safetensors",
        "config.toml",
        "metrics.jsonl",
        "loss.png",
        "lr.png",
    ] {
        assert!(run_dir.join(file).is_file(), "{file}");
    }
    let metrics = std::fs::read_to_string(run_dir.join("metrics.jsonl")).unwrap();
    let iterations: Vec<u64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "train")
        .map(|r| r["iteration"].as_u64().unwrap())
        .collect();
    assert_eq!(iterations, [1, 2]);
    let ckpt = run_dir.join("last.safetensors");
    let onnx = d.join("m.onnx");
    let ok = segtool(&["export", "--checkpoint", p(&ckpt), "--onnx", p(&onnx)]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let out = d.join("pred");
    for engine in ["ort", "tract"] {
        let ok = segtool(&[
            "infer",
            "--model",
            p(&onnx),
            "--input",
            p(&data.join("images/val")),
            "--engine",
            engine,
            "--out",
            p(&out),
        ]);
        assert!(
            ok.status.success(),
            "{engine}: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
    }
    assert!(
        out.join("4294967296_mask.png").is_file() && out.join("4294967296_overlay.png").is_file()
    );

    // Missing checkpoint.
    let missing = d.join("missing.safetensors");
    assert_fails_naming(
        &segtool(&[
            "export",
            "--checkpoint",
            p(&missing),
            "--onnx",
            p(&d.join("x.onnx")),
        ]),
        &["missing.safetensors"],
    );
    assert!(!d.join("x.onnx").exists());
    assert_fails_naming(
        &segtool(&["eval", "--checkpoint", p(&missing)]),
        &["missing.safetensors"],
    );

    // Corrupt image.
    let corrupt = d.join("corrupt.png");
    std::fs::write(&corrupt, b"\x89PNG\r\n\x1a\nthis is not a png").unwrap();
    assert_fails_naming(
        &segtool(&[
            "infer",
            "--model",
            p(&onnx),
            "--input",
            p(&corrupt),
            "--engine",
            "tract",
            "--out",
            p(&out),
        ]),
        &["corrupt.png"],
    );

    // Truncated ONNX, with both engines.
    let bytes = std::fs::read(&onnx).unwrap();
    let truncated = d.join("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    for engine in ["ort", "tract"] {
        let img = data.join("images/val/4294967296.png");
        assert_fails_naming(
            &segtool(&[
                "infer",
                "--model",
                p(&truncated),
                "--input",
                p(&img),
                "--engine",
                engine,
                "--out",
                p(&out),
            ]),
            &["truncated.onnx"],
        );
    }

    // Truncated checkpoint: export fails and writes nothing.
    let bytes = std::fs::read(&ckpt).unwrap();
    let truncated_ckpt = d.join("truncated.safetensors");
    std::fs::write(&truncated_ckpt, &bytes[..bytes.len() - 100]).unwrap();
    assert_fails_naming(
        &segtool(&[
            "export",
            "--checkpoint",
            p(&truncated_ckpt),
            "--onnx",
            p(&d.join("y.onnx")),
        ]),
        &["truncated.safetensors"],
    );
    assert!(!d.join("y.onnx").exists());
}
