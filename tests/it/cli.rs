#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! The `segtool` binary end to end on tiny inputs: bad input gives a clear error naming
//! the file and a non-zero exit, and leaves no half-written output.

use crate::common;

use common::{assert_same_tensors, p, segtool};

use std::path::{Path, PathBuf};
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
    train_stop_and_resume(&data, &run_dir);
    let ckpt = run_dir.join("last.safetensors");
    let onnx = export_and_infer(d, &ckpt, &data);
    bad_inputs_name_their_file(d, &ckpt, &onnx, &data);
}

/// Two iterations of `segtool train`, stopped after one and resumed: the run folder's
/// files, and metrics for both iterations.
fn train_stop_and_resume(data: &Path, run_dir: &Path) {
    let dataset = format!("data.dataset={}", p(data));
    let out_dir = format!("out_dir={}", p(run_dir));
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
    let ok = segtool(&["train", "--resume", p(run_dir)]);
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
}

/// The checkpoint exported and run in ONNX Runtime and tract; returns the export.
fn export_and_infer(d: &Path, ckpt: &Path, data: &Path) -> PathBuf {
    let onnx = d.join("m.onnx");
    let ok = segtool(&["export", "--checkpoint", p(ckpt), "--onnx", p(&onnx)]);
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

    onnx
}

/// A missing checkpoint, a corrupt image, a truncated ONNX file and a truncated
/// checkpoint: each an error naming the file, and nothing written.
fn bad_inputs_name_their_file(d: &Path, ckpt: &Path, onnx: &Path, data: &Path) {
    let out = d.join("pred");
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
            p(onnx),
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
    let bytes = std::fs::read(onnx).unwrap();
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
    let bytes = std::fs::read(ckpt).unwrap();
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

/// The `segtool` binary with no torchrun or Slurm variables (the test may run inside a job).
fn segtool_command() -> std::process::Command {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_segtool"));
    for var in ["WORLD_SIZE", "RANK", "SLURM_PROCID", "SLURM_NTASKS"] {
        cmd.env_remove(var);
    }
    cmd
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn print_config_needs_no_dataset() {
    // An empty directory: the preset's data/cityscapes does not exist there.
    let dir = tempfile::tempdir().unwrap();
    let out = segtool_command()
        .args([
            "train",
            "--config",
            "cityscapes-danet-r101",
            "--print-config",
        ])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("backbone = \"resnet101\""), "{stdout}");
    assert!(stdout.contains("world_size = 4"), "{stdout}");
    for part in [
        "2 per process x 4 processes x 1 accumulation = 8 global",
        "lr: 0.003 effective",
        "dataset not opened",
    ] {
        assert!(stderr.contains(part), "{part:?} missing in:\n{stderr}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "wrote nothing"
    );
    // What it prints is a configuration that reads back to the same one.
    let file = dir.path().join("printed.toml");
    std::fs::write(&file, &stdout).unwrap();
    let again = segtool(&["train", "--config", p(&file), "--print-config"]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), stdout);
}

/// A copy of the checkpoint `from` without the metadata entry `key` (a checkpoint written
/// before the key existed). The header keeps its length: JSON allows trailing spaces.
fn without_metadata_key(from: &std::path::Path, to: &std::path::Path, key: &str) {
    let bytes = std::fs::read(from).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert!(header["__metadata__"]
        .as_object_mut()
        .unwrap()
        .remove(key)
        .is_some());
    let mut json = serde_json::to_vec(&header).unwrap();
    json.resize(n, b' ');
    let mut out = bytes[..8].to_vec();
    out.extend(json);
    out.extend(&bytes[8 + n..]);
    std::fs::write(to, out).unwrap();
}

#[test]
fn resume_keeps_the_thread_count_of_the_checkpoint() {
    use segtool_train::run::THREADS_KEY;
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
        "6",
        "--val-count",
        "1",
    ]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let dataset = format!("data.dataset={}", p(&data));
    // Without --threads, libtorch would use OMP_NUM_THREADS = 2 threads.
    let train = |args: &[&str]| {
        let out = segtool_command()
            .arg("train")
            .args(args)
            .env("OMP_NUM_THREADS", "2")
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", text(&out.stderr));
        text(&out.stderr)
    };
    let fresh = |run: &str, extra: &[&str]| {
        let out_dir = format!("out_dir={}", p(&d.join(run)));
        let mut args = vec!["--threads", "1", "--set", &dataset, "--set", &out_dir];
        for set in [
            "optim.iterations=6",
            "optim.batch_size=2",
            "data.workers=1",
            "data.val_split=\"\"",
        ] {
            args.extend(["--set", set]);
        }
        args.extend(extra);
        train(&args);
    };
    fresh("whole", &[]);
    fresh("split", &["--stop-at", "3"]);
    let stopped = d.join("split/last.safetensors");
    let info = segtool_train::Checkpoint::read(&stopped).unwrap().info;
    assert_eq!(info.get(THREADS_KEY).map(String::as_str), Some("1"));
    for copy in ["other", "old"] {
        std::fs::create_dir(d.join(copy)).unwrap();
    }
    std::fs::copy(&stopped, d.join("other/last.safetensors")).unwrap();
    without_metadata_key(&stopped, &d.join("old/last.safetensors"), THREADS_KEY);

    // Resumed without --threads: the checkpoint's one thread, and the uninterrupted run's
    // weights bit for bit.
    let stderr = train(&["--resume", p(&d.join("split"))]);
    assert!(stderr.contains("1 libtorch thread(s), as"), "{stderr}");
    assert!(!stderr.contains("note:"), "{stderr}");
    assert_same_tensors(
        &d.join("whole/last.safetensors"),
        &d.join("split/last.safetensors"),
    );

    // Another count, given: said to break the bitwise repeat.
    let stderr = train(&["--resume", p(&d.join("other")), "--threads", "2"]);
    assert!(
        stderr.contains("trained with 1 libtorch thread(s) and this run uses 2")
            && stderr.contains("no longer repeat the uninterrupted run bit for bit"),
        "{stderr}"
    );
    let info = segtool_train::Checkpoint::read(&d.join("other/last.safetensors"))
        .unwrap()
        .info;
    assert_eq!(info.get(THREADS_KEY).map(String::as_str), Some("2"));

    // A checkpoint from before the key: as before (libtorch's default), said to be unknown.
    let stderr = train(&["--resume", p(&d.join("old"))]);
    assert!(
        stderr.contains("does not record the libtorch thread count"),
        "{stderr}"
    );
}

/// The options that open a model have one set of names (`SegmenterOptions::NAMES`), and
/// the command line's flags are those names: `--engine`, `--providers`, `--threads`,
/// `--card`, `--strict`, `--logits` (`fixed_size` is no flag: `infer` plans for the one
/// size its inputs have, `--dynamic-shapes` turns that off).
#[test]
fn model_options_are_flags_of_the_same_names() {
    let help = String::from_utf8(segtool(&["infer", "--help"]).stdout).unwrap();
    for name in segtool_runtime::SegmenterOptions::NAMES {
        if name == "fixed_size" {
            continue;
        }
        let flag = format!("--{}", name.replace('_', "-"));
        assert!(
            help.contains(&flag),
            "`segtool infer` has no {flag}:\n{help}"
        );
    }
}
