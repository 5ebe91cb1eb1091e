//! The TensorBoard event files of a tiny run, read back with the real `tensorboard`
//! package's `EventAccumulator` (installed by scripts/setup.sh from
//! requirements-telemetry.txt): every scalar tag, step and value equals metrics.jsonl,
//! validation overlays are images at each validation, the resolved config is text, and
//! a run resumed from an earlier snapshot reads as one continuous run (the events the
//! first run logged past the snapshot are dropped by the reader, as in metrics.jsonl).
//! `tensorboard: false` writes no event file.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common::spec;
use segtool_core::dataset::{SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;
use segtool_model_spec::BackboneSpec;
use segtool_train::eval::EvalOptions;
use segtool_train::run::{self, RunOptions, RunState};
use segtool_train::{Checkpoint, TrainConfig, Trainer};

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::set_num_threads(1);
    guard
}

fn shapes(offset: u64, count: usize) -> ShapesDataset {
    ShapesDataset {
        config: ShapesConfig {
            width: 32,
            height: 32,
            seed: 3,
            ..Default::default()
        },
        offset,
        count,
    }
}

fn trainer(iterations: usize) -> Trainer {
    let config = TrainConfig {
        iterations,
        batch_size: 2,
        lr: 0.01,
        seed: 7,
        progress: false,
        ..TrainConfig::default()
    };
    Trainer::new(&spec(BackboneSpec::tiny(), 5), config).unwrap()
}

fn options(dir: &Path) -> RunOptions {
    RunOptions {
        log_every: 1,
        eval_every: 3,
        checkpoint_every: 2,
        keep: 3,
        workers: 1,
        prefetch: 2,
        config_text: "# tensorboard test run\nname = \"tb\"\n".into(),
        ..RunOptions::new(dir)
    }
}

fn train(dir: &Path, resume: Option<&Path>) {
    let mut t = trainer(6);
    let state = match resume {
        Some(path) => run::resume(&mut t, &Checkpoint::read(path).unwrap(), path).unwrap(),
        None => RunState::default(),
    };
    let val = shapes(100, 3);
    let mut validate = |model: &segtool_train::DaNet| {
        run::validate(model, &val, &EvalOptions::new(), tch::Device::Cpu)
    };
    let train_set: Arc<dyn SegDataset> = Arc::new(shapes(0, 8));
    run::run(&mut t, train_set, Some(&mut validate), &options(dir), state).unwrap();
}

/// What TensorBoard's reader makes of the directory, as JSON.
const READER: &str = r#"
import json, sys
from tensorboard.backend.event_processing import event_accumulator as ea
acc = ea.EventAccumulator(sys.argv[1], size_guidance={ea.SCALARS: 0, ea.IMAGES: 0, ea.TENSORS: 0})
acc.Reload()
tags = acc.Tags()
print(json.dumps({
    "scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)] for t in tags["scalars"]},
    "images": {t: [[e.step, e.width, e.height, len(e.encoded_image_string)] for e in acc.Images(t)]
               for t in tags["images"]},
    "text": {t: [[e.step, e.tensor_proto.string_val[0].decode()] for e in acc.Tensors(t)]
             for t in tags["tensors"]},
}))
"#;

fn read_tensorboard(dir: &Path) -> serde_json::Value {
    let out = common::python()
        .args(["-c", READER])
        .arg(dir)
        .output()
        .expect("running python");
    assert!(
        out.status.success(),
        "the tensorboard reader failed (is requirements-telemetry.txt installed? \
         run scripts/setup.sh):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

type Curves = BTreeMap<String, Vec<(i64, f64)>>;

/// metrics.jsonl as TensorBoard scalars: every number `<kind>/<field>` and each class's
/// IoU `<kind>/iou/<class>`, at the record's iteration.
fn expected_from_jsonl(path: &Path) -> Curves {
    let mut curves = Curves::new();
    for line in std::fs::read_to_string(path).unwrap().lines() {
        let record: serde_json::Value = serde_json::from_str(line).unwrap();
        let kind = record["kind"].as_str().unwrap();
        let step = record["iteration"].as_i64().unwrap();
        for (key, value) in record.as_object().unwrap() {
            if key == "iteration" {
                continue;
            }
            if let Some(v) = value.as_f64() {
                curves
                    .entry(format!("{kind}/{key}"))
                    .or_default()
                    .push((step, v));
            }
        }
        for c in record["class_iou"].as_array().into_iter().flatten() {
            if let Some(v) = c["iou"].as_f64() {
                let tag = format!("{kind}/iou/{}", c["class"].as_str().unwrap());
                curves.entry(tag).or_default().push((step, v));
            }
        }
    }
    curves
}

fn check_against_jsonl(dir: &Path, tb: &serde_json::Value) {
    let expected = expected_from_jsonl(&dir.join("metrics.jsonl"));
    let got: Curves = tb["scalars"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(tag, events)| {
            let events = events
                .as_array()
                .unwrap()
                .iter()
                .map(|e| (e[0].as_i64().unwrap(), e[1].as_f64().unwrap()))
                .collect();
            (tag.clone(), events)
        })
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "scalar tags"
    );
    for (tag, want) in &expected {
        let have = &got[tag];
        let steps = |v: &[(i64, f64)]| v.iter().map(|e| e.0).collect::<Vec<_>>();
        assert_eq!(steps(have), steps(want), "steps of {tag}");
        for ((step, h), (_, w)) in have.iter().zip(want) {
            // TensorBoard scalars are float32.
            assert!(
                (h - w).abs() <= 1e-6 * w.abs().max(1e-3),
                "{tag} at {step}: tensorboard {h}, metrics.jsonl {w}"
            );
        }
    }
    for tag in [
        "train/loss",
        "train/loss_fused",
        "train/loss_pam",
        "train/loss_cam",
        "train/lr",
        "train/it_per_s",
        "train/data_wait",
        "val/miou",
        "val/pixel_accuracy",
    ] {
        assert!(expected.contains_key(tag), "metrics.jsonl lacks {tag}");
    }
    assert!(
        expected.keys().any(|t| t.starts_with("val/iou/")),
        "no per-class IoU"
    );
}

#[test]
fn event_files_match_metrics_and_survive_a_resume() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("tb");

    // The whole run: 6 iterations, validations at 3 and 6.
    train(&dir, None);
    let tb = read_tensorboard(&dir);
    check_against_jsonl(&dir, &tb);
    let images = tb["images"].as_object().unwrap();
    // The validation split has 3 images.
    assert_eq!(
        images.len(),
        run::VAL_OVERLAYS.min(3),
        "overlay tags: {images:?}"
    );
    for events in images.values() {
        let steps: Vec<i64> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[0].as_i64().unwrap())
            .collect();
        assert_eq!(steps, [3, 6]);
        // image | ground truth | prediction, 32x32 each
        assert_eq!(
            (events[0][1].as_i64(), events[0][2].as_i64()),
            (Some(96), Some(32))
        );
    }
    let text = &tb["text"]["config"];
    assert_eq!(text[0][0], 0);
    assert!(text[0][1]
        .as_str()
        .unwrap()
        .contains("# tensorboard test run"));

    // Resume from the snapshot at 4: metrics.jsonl drops 5 and 6 and logs them again; so
    // must TensorBoard's reader (no step twice), over two event files.
    train(&dir, Some(&dir.join("iter_0000004.safetensors")));
    assert_eq!(
        segtool_train::tensorboard::event_files(&dir).unwrap().len(),
        2
    );
    let tb = read_tensorboard(&dir);
    check_against_jsonl(&dir, &tb);
    let steps: Vec<i64> = tb["scalars"]["train/loss"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_i64().unwrap())
        .collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6]);
    for events in tb["images"].as_object().unwrap().values() {
        let steps: Vec<i64> = events
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e[0].as_i64().unwrap())
            .collect();
        assert_eq!(steps, [3, 6]);
    }
    let config_steps: Vec<i64> = tb["text"]["config"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e[0].as_i64().unwrap())
        .collect();
    assert_eq!(config_steps, [0, 4]);
}

#[test]
fn tensorboard_off_writes_no_event_file() {
    let _serial = serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut t = trainer(2);
    let opts = RunOptions {
        tensorboard: false,
        eval_every: 0,
        ..options(tmp.path())
    };
    let train_set: Arc<dyn SegDataset> = Arc::new(shapes(0, 4));
    run::run(&mut t, train_set, None, &opts, RunState::default()).unwrap();
    assert!(tmp.path().join("metrics.jsonl").exists());
    assert!(segtool_train::tensorboard::event_files(tmp.path())
        .unwrap()
        .is_empty());
}
