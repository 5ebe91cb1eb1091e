//! A run of 2K iterations and a run stopped after K and resumed for K more end with the
//! same weights (max abs diff <= 1e-6 on CPU), the same per-iteration loss and the same lr
//! at every iteration; keep-k, `best` and the NaN stop behave as documented.

use crate::common;

use std::path::Path;
use std::sync::Arc;

use common::spec;
use segtool_core::dataset::{SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;
use segtool_model_spec::BackboneSpec;
use segtool_train::data::Augment;
use segtool_train::metrics_log::MetricsLog;
use segtool_train::optim::SgdConfig;
use segtool_train::run::{self, RunOptions, RunState, ValScore};
use segtool_train::{Checkpoint, TrainConfig, Trainer};

const K: usize = 3;

/// libtorch's RNG is process-global and both tests seed it (initialisation, dropout):
/// run them one at a time, on one intra-op thread.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::set_num_threads(1);
    guard
}

fn dataset() -> Arc<dyn SegDataset> {
    Arc::new(ShapesDataset {
        config: ShapesConfig {
            width: 40,
            height: 40,
            seed: 5,
            ..Default::default()
        },
        offset: 0,
        count: 7, // 3 batches of 2 per epoch: the resume point is mid-epoch, the run crosses one
    })
}

fn config(iterations: usize) -> TrainConfig {
    TrainConfig {
        iterations,
        batch_size: 2,
        lr: 0.01,
        warmup_iters: 2,
        warmup_ratio: 0.2,
        sgd: SgdConfig {
            nesterov: true,
            ..SgdConfig::default()
        },
        grad_clip_norm: Some(5.0),
        augment: Augment {
            flip: true,
            scale: Some((0.75, 1.25)),
            base_size: 40,
            crop: Some(32),
            ..Augment::none()
        },
        seed: 11,
        progress: false,
        ..TrainConfig::default()
    }
}

fn options(dir: &Path) -> RunOptions {
    RunOptions {
        log_every: 1,
        workers: 2,
        prefetch: 2,
        config_text: "# test run\n".into(),
        ..RunOptions::new(dir)
    }
}

fn trainer() -> Trainer {
    Trainer::new(&spec(BackboneSpec::tiny(), 5), config(2 * K)).unwrap()
}

fn lrs(dir: &Path) -> Vec<(usize, f64)> {
    let log = MetricsLog::open(&dir.join("metrics.jsonl"), usize::MAX, false).unwrap();
    log.records()
        .iter()
        .filter(|r| r.kind == "train")
        .map(|r| (r.iteration, r.lr.unwrap()))
        .collect()
}

#[test]
fn interrupted_and_resumed_run_equals_uninterrupted_run() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let (whole_dir, split_dir) = (dir.path().join("whole"), dir.path().join("split"));

    let mut whole = trainer();
    let state = run::run(
        &mut whole,
        dataset(),
        None,
        &options(&whole_dir),
        RunState::default(),
    )
    .unwrap();
    assert_eq!(state.iteration, 2 * K);

    let mut first = trainer();
    let stopped = RunOptions {
        stop_at: Some(K),
        ..options(&split_dir)
    };
    let state = run::run(&mut first, dataset(), None, &stopped, RunState::default()).unwrap();
    assert_eq!(state.iteration, K);
    drop(first);
    // The thread count it trained with (see `serial`), for the resume to reuse.
    let info = Checkpoint::read(&split_dir.join("last.safetensors"))
        .unwrap()
        .info;
    assert_eq!(info.get(run::THREADS_KEY).map(String::as_str), Some("1"));
    assert_eq!(run::recorded_threads(&info).unwrap(), Some(1));

    // A fresh process: different initial weights, restored from the checkpoint.
    tch::manual_seed(999);
    let mut second = Trainer::new(
        &spec(BackboneSpec::tiny(), 5),
        TrainConfig {
            seed: 11,
            ..config(2 * K)
        },
    )
    .unwrap();
    let last = split_dir.join("last.safetensors");
    let state = run::resume(&mut second, &Checkpoint::read(&last).unwrap(), &last).unwrap();
    assert_eq!(state.iteration, K);
    let state = run::run(&mut second, dataset(), None, &options(&split_dir), state).unwrap();
    assert_eq!(state.iteration, 2 * K);

    let mut worst = 0f64;
    for (name, a) in whole.vs.variables() {
        let b = &second.vs.variables()[&name];
        worst = worst.max((&a - b).abs().max().double_value(&[]));
    }
    eprintln!("resumed vs uninterrupted: max abs weight diff {worst:e}");
    assert!(worst <= 1e-6, "final weights differ by {worst:e}");
    assert_eq!(
        whole.losses[K..],
        second.losses[..],
        "loss curve after the resume"
    );
    assert_eq!(lrs(&whole_dir), lrs(&split_dir), "lr at every iteration");
    assert_eq!(lrs(&split_dir).len(), 2 * K);
}

#[test]
fn keeps_k_snapshots_best_and_names_the_checkpoint_on_nan() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let mut t = trainer();
    let opts = RunOptions {
        checkpoint_every: 1,
        keep: 2,
        eval_every: 2,
        ..options(dir.path())
    };
    let mut scores = [0.3, 0.5, 0.4].into_iter();
    let mut validate = |_: &segtool_train::DaNet| Ok(ValScore::new(scores.next().unwrap(), 0.9));
    let state = run::run(
        &mut t,
        dataset(),
        Some(&mut validate),
        &opts,
        RunState::default(),
    )
    .unwrap();
    assert_eq!(
        (state.best_miou, state.best_iteration),
        (Some(0.5), Some(4))
    );
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".safetensors"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "best.safetensors",
            "iter_0000005.safetensors",
            "iter_0000006.safetensors",
            "last.safetensors"
        ]
    );
    for png in ["loss.png", "lr.png", "val_miou.png"] {
        assert!(dir.path().join(png).exists(), "{png}");
    }
    let best = Checkpoint::read(&dir.path().join("best.safetensors")).unwrap();
    assert_eq!(best.info["iterations"], "4");

    // A learning rate this large overflows within a few steps: the run must stop with
    // the iteration and the last checkpoint written before it.
    let nan_dir = tempfile::tempdir().unwrap();
    let mut t = Trainer::new(
        &spec(BackboneSpec::tiny(), 5),
        TrainConfig {
            lr: 1e12,
            grad_clip_norm: None,
            ..config(50)
        },
    )
    .unwrap();
    let opts = RunOptions {
        checkpoint_every: 1,
        ..options(nan_dir.path())
    };
    let err = run::run(&mut t, dataset(), None, &opts, RunState::default()).unwrap_err();
    let message = format!("{err:#}");
    assert!(message.contains("loss became"), "{message}");
    assert!(message.contains("last good checkpoint"), "{message}");
    assert!(message.contains("last.safetensors"), "{message}");
}
