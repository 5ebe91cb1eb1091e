//! Writes that fail (issue 19): a checkpoint, an export, a calibration, a report written
//! onto a full disk or into a read-only directory fail with a clear error, leave the
//! previous file intact and no temp file behind; training stops at the failed checkpoint and `--resume`
//! from the last good one still repeats the uninterrupted run bit for bit.
//!
//! How the failures are made (the tests run as root, where `chmod 555` stops nothing):
//! - full disk: `ulimit -f` in the child's shell, with `trap '' XFSZ` so the write fails
//!   with EFBIG instead of the kernel killing the process with SIGXFSZ (Rust's runtime
//!   ignores SIGPIPE only; an ignored signal stays ignored across exec);
//! - read-only directory: a read-only bind mount of the output folder in a private mount
//!   namespace (`unshare -m`; writes fail with EROFS), skipped with a note where unshare is
//!   not allowed.
//! The same for the `segtool report` page.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::p;

/// `segtool args` with each file limited to `limit_kib` KiB (SIGXFSZ ignored).
fn segtool_full_disk(limit_kib: u64, args: &[&str]) -> Output {
    Command::new("bash")
        .arg("-c")
        .arg(format!("trap '' XFSZ; ulimit -f {limit_kib}; exec \"$@\""))
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_segtool"))
        .args(args)
        .output()
        .unwrap()
}

/// `segtool args` with `dir` mounted read-only; `None` where mount namespaces are not
/// available.
fn segtool_read_only(dir: &Path, args: &[&str]) -> Option<Output> {
    let probe = Command::new("unshare").args(["-m", "true"]).output().ok()?;
    if !probe.status.success() {
        segtool_testkit::skipped("the read-only directory part: unshare -m not permitted");
        return None;
    }
    Some(
        Command::new("unshare")
            .arg("-m")
            .arg("bash")
            .arg("-c")
            .arg(
                "mount --bind \"$1\" \"$1\" && mount -o remount,ro,bind \"$1\" && shift && \
                 exec \"$@\"",
            )
            .arg("bash")
            .arg(dir)
            .arg(env!("CARGO_BIN_EXE_segtool"))
            .args(args)
            .output()
            .unwrap(),
    )
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Names in `dir` that look like write_atomic's temp files (`.name.tmp-<pid>`).
fn temp_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp-"))
        .collect()
}

/// Fails unless `out` failed with a message naming `file` and `why`, without a panic.
fn assert_clean_failure(out: &Output, file: &Path, why: &str) {
    let err = text(&out.stderr);
    assert!(!out.status.success(), "succeeded: {err}");
    assert_eq!(
        out.status.code(),
        Some(1),
        "not a clean exit: {:?} {err}",
        out.status
    );
    assert!(!err.contains("panicked"), "{err}");
    let name = file.file_name().unwrap().to_string_lossy();
    assert!(err.contains(name.as_ref()) && err.contains(why), "{err}");
}

#[test]
fn export_and_calibration_on_a_full_disk_or_read_only_dir() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (_, _, ckpt) = common::tiny_checkpoint(d, 5);
    let out_dir = d.join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let onnx = out_dir.join("m.onnx");
    std::fs::write(&onnx, b"previous model").unwrap();
    let export = ["export", "--checkpoint", p(&ckpt), "--onnx", p(&onnx)];

    let out = segtool_full_disk(16, &export);
    assert_clean_failure(&out, &onnx, "File too large");
    assert_eq!(std::fs::read(&onnx).unwrap(), b"previous model");
    assert_eq!(temp_files(&out_dir), Vec::<String>::new());

    if let Some(out) = segtool_read_only(&out_dir, &export) {
        assert_clean_failure(&out, &onnx, "Read-only file system");
        assert_eq!(std::fs::read(&onnx).unwrap(), b"previous model");
        assert_eq!(temp_files(&out_dir), Vec::<String>::new());
    }

    // A real export to calibrate, then the calibrated model onto the full disk.
    let model = d.join("fp32.onnx");
    let ok = common::segtool(&["export", "--checkpoint", p(&ckpt), "--onnx", p(&model)]);
    assert!(ok.status.success(), "{}", text(&ok.stderr));
    let images = d.join("imgs");
    std::fs::create_dir(&images).unwrap();
    for i in 0..2 {
        common::test_image(i, 32, 24)
            .save(images.join(format!("{i}.png")))
            .unwrap();
    }
    let int8 = out_dir.join("int8.onnx");
    std::fs::write(&int8, b"previous int8").unwrap();
    let calibrate = [
        "calibrate",
        "--model",
        p(&model),
        "--images",
        p(&images),
        "--samples",
        "2",
        "--latency-runs",
        "0",
        "--out",
        p(&int8),
    ];
    let out = segtool_full_disk(16, &calibrate);
    assert_clean_failure(&out, &int8, "File too large");
    assert_eq!(std::fs::read(&int8).unwrap(), b"previous int8");
    assert_eq!(temp_files(&out_dir), Vec::<String>::new());
}

#[test]
fn training_stops_at_a_failed_checkpoint_and_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let data = d.join("data");
    let ok = common::segtool(&[
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
    let args = |run: &PathBuf| -> Vec<String> {
        let mut a: Vec<String> = ["train", "--threads", "1", "--set", &dataset]
            .iter()
            .map(|s| s.to_string())
            .collect();
        a.extend(["--set".into(), format!("out_dir={}", p(run))]);
        for set in [
            "optim.iterations=6",
            "optim.batch_size=2",
            "data.workers=1",
            "data.val_split=\"\"",
            "checkpoint.every=3",
        ] {
            a.extend(["--set".into(), set.into()]);
        }
        a
    };
    let run = |a: &[String]| {
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let out = common::segtool(&a);
        assert!(out.status.success(), "{a:?}: {}", text(&out.stderr));
    };
    let whole = d.join("whole");
    run(&args(&whole));
    let split = d.join("split");
    let mut first = args(&split);
    first.extend(["--stop-at".into(), "3".into()]);
    run(&first);
    let last = split.join("last.safetensors");
    let good = std::fs::read(&last).unwrap();

    // The next checkpoint (iteration 6) does not fit: the run fails there, naming it.
    let limit_kib = good.len() as u64 / 2048;
    let out = segtool_full_disk(limit_kib, &["train", "--resume", p(&split)]);
    assert_clean_failure(&out, &last, "File too large");
    assert_eq!(
        std::fs::read(&last).unwrap(),
        good,
        "last good checkpoint changed"
    );
    assert_eq!(temp_files(&split), Vec::<String>::new());

    // Resumed from the last good checkpoint: the uninterrupted run's tensors bit for bit.
    run(&["train".into(), "--resume".into(), p(&split).into()]);
    common::assert_same_tensors(&whole.join("last.safetensors"), &last);

    // The run report (inline PNGs: far over 8 KiB) onto a full disk and into a read-only
    // folder: a clean failure, the previous page intact, no temp file.
    let page_dir = d.join("pages");
    std::fs::create_dir(&page_dir).unwrap();
    let page = page_dir.join("report.html");
    std::fs::write(&page, b"previous page").unwrap();
    let report = ["report", p(&whole), "-o", p(&page)];
    let out = segtool_full_disk(8, &report);
    assert_clean_failure(&out, &page, "File too large");
    assert_eq!(std::fs::read(&page).unwrap(), b"previous page");
    assert_eq!(temp_files(&page_dir), Vec::<String>::new());
    if let Some(out) = segtool_read_only(&page_dir, &report) {
        assert_clean_failure(&out, &page, "Read-only file system");
        assert_eq!(std::fs::read(&page).unwrap(), b"previous page");
    }
}
