#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! The `segtool` binary end to end on tiny inputs: bad input gives a clear error naming
//! the file and a non-zero exit, and leaves no half-written output.

use std::path::Path;
use std::process::{Command, Output};

fn segtool(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(args)
        .output()
        .expect("segtool runs")
}

fn assert_fails_naming(out: &Output, needles: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "expected failure, stderr: {stderr}");
    for n in needles {
        assert!(stderr.contains(n), "stderr should mention {n:?}: {stderr}");
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
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
    let ckpt = d.join("m.safetensors");
    let ok = segtool(&[
        "train",
        "--data",
        p(&data),
        "--iterations",
        "2",
        "--batch-size",
        "2",
        "--out",
        p(&ckpt),
    ]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(d.join("m.loss.png").is_file() && d.join("m.loss.csv").is_file());
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
