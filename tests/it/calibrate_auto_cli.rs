#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `segtool calibrate --auto` on the command line: the exit status and the files written
//! when the model meets every target, misses the speed target (with and without
//! `--accept-miss`) or misses the accuracy target, and the verdict saying which.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::calibrate::{ok, tiny_model_and_images};
use crate::common::{p, segtool};

/// What one `--auto` run left behind.
struct Run {
    out: Output,
    /// The model's path (`<d>/out/m.onnx`).
    model: PathBuf,
    /// Every file in `<d>/out` (the model's folder, empty before the run).
    files: BTreeSet<String>,
    /// The trade-off table as JSON (`m.auto.json`).
    json: serde_json::Value,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    fn verdict(&self) -> &str {
        self.json["verdict"].as_str().unwrap()
    }
}

/// `calibrate --auto` of the tiny DANet in `d` with `extra` flags, kept small: 8
/// calibration and 4 validation images (1 held out for the final check), no search
/// beyond all-INT8 when it meets the target, 2 timed runs per model unless `extra` says.
fn auto(d: &Path, fp32: &Path, data: &Path, tag: &str, extra: &[&str]) -> Run {
    let dir = d.join(tag);
    let model = dir.join("m.onnx");
    let (calib, val) = (data.join("images/train"), data.join("images/val"));
    let mut args = vec![
        "calibrate",
        "--model",
        p(fp32),
        "--images",
        p(&calib),
        "--val-images",
        p(&val),
        "--samples",
        "8",
        "--val-samples",
        "4",
        "--report-samples",
        "2",
        "--latency-rounds",
        "1",
        "--quiet",
        "--auto",
        "-o",
        p(&model),
    ];
    args.extend_from_slice(extra);
    if !extra.contains(&"--latency-runs") {
        args.extend_from_slice(&["--latency-runs", "2"]);
    }
    let out = segtool(&args);
    eprintln!(
        "{tag}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let files = match std::fs::read_dir(&dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => BTreeSet::new(),
    };
    let json = std::fs::read(dir.join("m.auto.json"))
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or(serde_json::Value::Null);
    Run {
        out,
        model,
        files,
        json,
    }
}

fn names(names: &[&str]) -> BTreeSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The table's three files and nothing else: no model, no temporary file.
fn only_the_table(r: &Run) {
    assert!(!r.model.exists(), "{}", r.stderr());
    assert_eq!(
        r.files,
        names(&["m.auto.csv", "m.auto.json", "m.auto.png"]),
        "{}",
        r.stderr()
    );
}

/// A miss exits 1 with the message naming it and saying that nothing was written.
fn refused(r: &Run, miss: &str) {
    assert_eq!(r.out.status.code(), Some(1), "{}", r.stderr());
    let err = r.stderr();
    assert!(err.contains(&format!("--auto missed ({miss}")), "{err}");
    assert!(err.contains("nothing written"), "{err}");
    assert!(err.contains("--accept-miss writes it anyway"), "{err}");
    only_the_table(r);
    assert_eq!(r.json["model"]["written"], false, "{:#}", r.json);
    assert!(
        r.verdict()
            .contains(&format!("nothing written: {}", r.model.display())),
        "{}",
        r.verdict()
    );
    assert!(!r.verdict().contains("model written"), "{}", r.verdict());
}

/// Accuracy target met (all-INT8 agrees far above 50%) and speed target met (0.5x: the
/// chosen point is INT8 faster than fp32, or fp32 itself at 1x): exit 0, model written.
#[test]
fn auto_meeting_every_target_exits_0_and_writes_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (fp32, data) = tiny_model_and_images(d);
    let r = auto(
        d,
        &fp32,
        &data,
        "met",
        &["--min-agreement", "0.5", "--min-speedup", "0.5"],
    );
    ok(r.out.clone());
    assert!(r.model.exists());
    assert_eq!(
        r.files,
        names(&["m.onnx", "m.auto.csv", "m.auto.json", "m.auto.png"])
    );
    assert_eq!(r.json["misses"], serde_json::json!([]), "{:#}", r.json);
    assert_eq!(r.json["model"]["written"], true);
    assert_eq!(r.json["model"]["path"], p(&r.model));
    assert_eq!(r.json["model"]["chosen"], true);
    let v = r.verdict();
    assert!(
        v.contains(&format!("written: {} (", r.model.display())) && v.contains("the chosen point"),
        "{v}"
    );
    let text = String::from_utf8_lossy(&r.out.stdout);
    assert!(text.contains(v), "{text}");
}

/// `--min-speedup 1000` misses: exit 1, no model and no temporary file; with
/// `--accept-miss`, exit 0 and the model written, the verdict saying it misses.
#[test]
fn auto_missing_the_speed_target_exits_1_unless_accept_miss() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (fp32, data) = tiny_model_and_images(d);
    let flags = ["--min-agreement", "0.5", "--min-speedup", "1000"];
    let r = auto(d, &fp32, &data, "missed", &flags);
    refused(&r, "speed");
    assert_eq!(
        r.json["misses"],
        serde_json::json!(["speed"]),
        "{:#}",
        r.json
    );
    assert!(
        r.verdict().contains("a 1000.00x speed-up over fp32"),
        "{}",
        r.verdict()
    );
    assert_eq!(r.json["meets_speed"], false);

    let accepted = [&flags[..], &["--accept-miss"]].concat();
    let r = auto(d, &fp32, &data, "accepted", &accepted);
    ok(r.out.clone());
    assert!(r.model.exists(), "{}", r.stderr());
    assert_eq!(r.json["misses"], serde_json::json!(["speed"]));
    assert_eq!(r.json["model"]["written"], true);
    let v = r.verdict();
    assert!(
        v.contains(&format!(
            "written despite the miss (--accept-miss): {} (",
            r.model.display()
        )) && v.contains("a 1000.00x speed-up over fp32"),
        "{v}"
    );
    assert!(
        r.stderr().contains("--auto missed (speed)"),
        "{}",
        r.stderr()
    );

    // A speed target nothing times could only pass unchecked: refused up front.
    let untimed = [&flags[..], &["--latency-runs", "0"]].concat();
    let r = auto(d, &fp32, &data, "untimed", &untimed);
    assert!(!r.out.status.success());
    assert!(r.stderr().contains("needs timing"), "{}", r.stderr());
    assert!(r.files.is_empty(), "{:?}", r.files);
}

/// No mix meets 100% agreement's 95% lower bound when the search may keep no layer
/// float (`--candidates 0`: all-INT8 alone, which a random tiny DANet does not reach):
/// exit 1, nothing written. A target out of range is refused before anything runs.
#[test]
fn auto_missing_the_accuracy_target_exits_1_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (fp32, data) = tiny_model_and_images(d);
    let r = auto(
        d,
        &fp32,
        &data,
        "missed",
        &["--min-agreement", "1.0", "--candidates", "0"],
    );
    refused(&r, "accuracy");
    assert_eq!(r.json["chosen"], serde_json::Value::Null);
    assert_eq!(r.json["misses"][0], "accuracy", "{:#}", r.json);
    assert!(
        r.verdict().contains("no mix of up to 0 float layers meets")
            && r.verdict()
                .contains("the last one measured, as none was chosen"),
        "{}",
        r.verdict()
    );

    let r = auto(d, &fp32, &data, "impossible", &["--min-agreement", "1.01"]);
    assert!(!r.out.status.success());
    assert!(r.stderr().contains("is not a fraction"), "{}", r.stderr());
    assert!(r.files.is_empty(), "{:?}", r.files);
}
