//! `segtool_train::Run`, the library entry of a training run: a run stopped early and
//! resumed reports what it did through events, progress and its summary, and starts
//! another run from its weights (`model.init`), all without printing.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use segtool_core::config::RunConfig;
use segtool_train::progress::Progress;
use segtool_train::run::ThreadSource;
use segtool_train::session::{resolve_config, Event};
use segtool_train::{Run, RunSummary, TrainConfig};

/// Counts a loop's calls.
#[derive(Default)]
struct Counter {
    started: Mutex<Option<(u64, u64)>>,
    advanced: AtomicU64,
    lines: AtomicU64,
    finished: AtomicU64,
}

impl Progress for Counter {
    fn start(&self, _what: &str, total: u64, done: u64) {
        *self.started.lock().unwrap() = Some((total, done));
    }
    fn advance(&self, n: u64) {
        self.advanced.fetch_add(n, Ordering::Relaxed);
    }
    fn line(&self, _text: String) {
        self.lines.fetch_add(1, Ordering::Relaxed);
    }
    fn finish(&self, _text: Option<String>) {
        self.finished.fetch_add(1, Ordering::Relaxed);
    }
}

fn config(dir: &Path, extra: &[&str]) -> RunConfig {
    let mut sets = vec![
        format!("out_dir={}", dir.display()),
        "optim.iterations=2".into(),
        "optim.batch_size=2".into(),
        "data.workers=1".into(),
        "log.every=1".into(),
        "log.tensorboard=false".into(),
        "data.shapes_size=32".into(),
        "data.shapes_train_count=4".into(),
        "data.shapes_val_count=2".into(),
    ];
    sets.extend(extra.iter().map(|s| s.to_string()));
    let mut cfg = RunConfig::preset("shapes-tiny").unwrap();
    cfg.apply_overrides(&sets).unwrap();
    cfg
}

fn execute(run: Run<'_>) -> (RunSummary, Vec<Event>) {
    let events = Mutex::new(Vec::new());
    let summary = run
        .on_event(|e| events.lock().unwrap().push(e.clone()))
        .execute()
        .unwrap();
    (summary, events.into_inner().unwrap())
}

#[test]
fn run_stop_resume_and_init() {
    tch::set_num_threads(1);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");

    // Stopped after one of two iterations: a `last` checkpoint, no validation yet.
    let progress = Arc::new(Counter::default());
    let run = Run::new(config(&dir, &[]), tch::Device::Cpu, None)
        .stop_at(Some(1))
        .progress(progress.clone());
    let (summary, events) = execute(run);
    assert!(summary.is_main() && summary.world_size == 1);
    assert_eq!((summary.state.iteration, summary.total_iterations), (1, 2));
    assert_eq!(summary.last_checkpoint, dir.join("last.safetensors"));
    assert!(summary.last_checkpoint.is_file());
    assert!(summary.best_checkpoint.is_none() && summary.last_validation.is_none());
    assert_eq!(summary.threads.source, ThreadSource::Default);
    assert!(summary.notes.is_empty(), "{:?}", summary.notes);
    assert!(matches!(&events[..], [Event::Plan(p)] if p.contains("schedule: 2 iterations")));
    assert_eq!(*progress.started.lock().unwrap(), Some((2, 0)));
    assert_eq!(progress.advanced.load(Ordering::Relaxed), 1);
    assert_eq!(progress.lines.load(Ordering::Relaxed), 1);
    assert_eq!(progress.finished.load(Ordering::Relaxed), 1);

    // Resumed from the run directory with its stored configuration.
    let (cfg, point) = resolve_config(None, Some(&dir), &[]).unwrap();
    let point = point.expect("a resume point");
    assert_eq!(point.path, dir.join("last.safetensors"));
    assert_eq!(point.threads, Some(1));
    let (summary, events) = execute(Run::new(cfg, tch::Device::Cpu, None).resume(Some(point)));
    assert_eq!(summary.state.iteration, 2);
    assert_eq!(summary.threads.source, ThreadSource::Checkpoint);
    assert_eq!(summary.notes.len(), 1, "the thread count it resumes with");
    assert!(summary.notes[0].starts_with("1 libtorch thread(s), as "));
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Resuming { iteration: 1, .. })));
    let (miou, acc) = summary.last_validation.expect("validated at the end");
    assert!((0.0..=1.0).contains(&miou) && (0.0..=1.0).contains(&acc));
    assert!(events
        .iter()
        .any(|e| e.to_string().starts_with("  val mIoU ")));
    assert_eq!(summary.best_checkpoint, Some(dir.join("best.safetensors")));
    let closing = summary.closing_lines();
    assert_eq!(
        closing[0],
        format!("wrote {}", dir.join("last.safetensors").display())
    );
    assert!(closing[1].starts_with("best val mIoU "), "{closing:?}");

    // A new run from those weights: the import's lines, as `segtool import` prints them.
    let init = format!("model.init={}", dir.join("last.safetensors").display());
    let cfg = config(&tmp.path().join("init"), &[&init, "optim.iterations=1"]);
    let (_, events) = execute(Run::new(cfg, tch::Device::Cpu, None));
    let lines: Vec<String> = events
        .iter()
        .filter(|e| e.is_output())
        .map(|e| e.to_string())
        .collect();
    assert!(lines[0].starts_with("read "), "{lines:?}");
    assert!(lines[1].starts_with("Full import: "), "{lines:?}");
}

#[test]
fn train_config_from_run_config() {
    let cfg = config(
        Path::new("unused"),
        &["optim.ohem=true", "optim.accumulation=2"],
    );
    let t = TrainConfig::from_run_config(&cfg, 7, tch::Device::Cpu);
    assert_eq!((t.iterations, t.batch_size, t.accumulation), (7, 2, 2));
    assert_eq!(t.lr, cfg.effective_lr());
    assert!(t.ohem.is_some() && t.progress && !t.freeze_bn);
    assert_eq!(t.seed, cfg.seed);
}
