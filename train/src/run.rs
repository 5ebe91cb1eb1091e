//! A training run around [`Trainer`]: the prefetching loader, `last` / keep-k / `best`
//! checkpoints, validation, exact resume, a JSONL metrics log and PNG curves.
//!
//! Resume is exact because everything random is a function of a position the checkpoint
//! records: the sampler's (epoch, batch) position fixes the next batch and its
//! augmentation, the iteration fixes the learning rate and the dropout stream
//! ([`Trainer::step_accumulated`]), and the momentum buffers travel with the weights.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use segtool_core::dataset::SegDataset;
use serde::{Deserialize, Serialize};

use crate::checkpoint::{self, Checkpoint, CheckpointInfo};
use crate::loader::{Loader, LoaderConfig, SamplerPosition};
use crate::metrics_log::{MetricsLog, Record};
use crate::model::DaNet;
use crate::progress::Progress;
use crate::trainer::{NonFiniteLoss, Trainer};

/// Checkpoint metadata key of the [`RunState`] (JSON).
pub const STATE_KEY: &str = "segtool.train_state";
/// Checkpoint metadata key of the resolved run configuration (TOML).
pub const CONFIG_KEY: &str = "segtool.config";
/// Checkpoint metadata key of the libtorch intra-op thread count the run trained with
/// (decimal). CPU kernels split fp32 reductions by thread, so a resume repeats the
/// uninterrupted run bit for bit only at the same count: see [`choose_threads`].
pub const THREADS_KEY: &str = "segtool.threads";

/// Where the thread count of a run comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadSource {
    /// Given by the user (`--threads`).
    Given,
    /// The count recorded in the checkpoint being resumed ([`THREADS_KEY`]).
    Checkpoint,
    /// libtorch's default: nothing given, and nothing recorded (a fresh run, or a
    /// checkpoint written before [`THREADS_KEY`] existed).
    Default,
}

/// The libtorch intra-op thread count to train with, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThreadChoice {
    pub threads: i32,
    pub source: ThreadSource,
    /// The count the resumed checkpoint's run trained with, when it records one.
    pub recorded: Option<i32>,
    /// A count was given that is not the recorded one: the resumed run will not repeat
    /// the uninterrupted run bit for bit.
    pub differs_from_checkpoint: bool,
}

/// The thread count a run uses: `given` (`Some(0)`: libtorch's default), else the count
/// `recorded` in the checkpoint it resumes, else `default` (libtorch's, e.g.
/// `tch::get_num_threads()` before any change).
pub fn choose_threads(given: Option<i32>, recorded: Option<i32>, default: i32) -> ThreadChoice {
    let (threads, source) = match (given, recorded) {
        (Some(n), _) if n > 0 => (n, ThreadSource::Given),
        (Some(_), _) => (default, ThreadSource::Given),
        (None, Some(n)) => (n, ThreadSource::Checkpoint),
        (None, None) => (default, ThreadSource::Default),
    };
    ThreadChoice {
        threads,
        source,
        recorded,
        differs_from_checkpoint: recorded.is_some_and(|r| r != threads),
    }
}

/// The thread count recorded in a checkpoint's metadata; `None` for checkpoints written
/// before it was recorded (or by something other than [`run`]).
pub fn recorded_threads(info: &CheckpointInfo) -> Result<Option<i32>> {
    info.get(THREADS_KEY)
        .map(|v| {
            v.trim()
                .parse::<i32>()
                .ok()
                .filter(|&n| n > 0)
                .with_context(|| {
                    format!("checkpoint metadata {THREADS_KEY}={v:?} is not a thread count")
                })
        })
        .transpose()
}

/// Where a run stands: everything a resume needs besides weights and momentum.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunState {
    /// Iterations completed (the next one to run, 0-based).
    pub iteration: usize,
    /// Sampler position of the next batch.
    pub position: SamplerPosition,
    pub best_miou: Option<f64>,
    pub best_iteration: Option<usize>,
    /// fp16 loss scaling: (scale, growth tracker) and steps skipped so far, so a resumed
    /// run continues the scale where it was instead of restarting at 65536.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<(f64, i64)>,
    #[serde(default)]
    pub skipped_steps: usize,
}

// Validation scores and `validate` are telemetry's (the run loop only calls them).
pub use crate::telemetry::{validate, ValScore, VAL_OVERLAYS};

pub struct RunOptions {
    pub out_dir: PathBuf,
    /// Iterations between `last` saves (and keep-k snapshots); 0: only at the end.
    pub checkpoint_every: usize,
    /// Periodic `iter_NNNNNNN.safetensors` snapshots kept; 0: none.
    pub keep: usize,
    /// Iterations between validations; 0: only at the end.
    pub eval_every: usize,
    pub log_every: usize,
    pub plot_every: usize,
    /// TensorBoard event files in `out_dir` (main process only).
    pub tensorboard: bool,
    pub workers: usize,
    pub prefetch: usize,
    pub rank: usize,
    pub world_size: usize,
    /// Resolved configuration, written to `config.toml` and into every checkpoint.
    pub config_text: String,
    /// Stop (with a `last` checkpoint) once this many iterations are done, although the
    /// schedule spans all of them: a preempted job, or the first half of a resume test.
    pub stop_at: Option<usize>,
    /// Where the run reports its progress (on the main process, when the trainer's
    /// `config.progress` is set); `None`: nowhere.
    pub progress: Option<Arc<dyn Progress>>,
}

impl RunOptions {
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        Self {
            out_dir: out_dir.into(),
            checkpoint_every: 0,
            keep: 0,
            eval_every: 0,
            log_every: 10,
            plot_every: 100,
            tensorboard: true,
            workers: 2,
            prefetch: 4,
            rank: 0,
            world_size: 1,
            config_text: String::new(),
            stop_at: None,
            progress: None,
        }
    }

    pub fn last_path(&self) -> PathBuf {
        self.out_dir.join("last.safetensors")
    }

    pub fn best_path(&self) -> PathBuf {
        self.out_dir.join("best.safetensors")
    }

    fn is_main(&self) -> bool {
        self.rank == 0
    }
}

/// Loads weights, momentum buffers and the [`RunState`] of `checkpoint` into `trainer`.
pub fn resume(trainer: &mut Trainer, checkpoint: &Checkpoint, path: &Path) -> Result<RunState> {
    checkpoint
        .load_into(&mut trainer.vs)
        .with_context(|| format!("loading weights from {}", path.display()))?;
    trainer
        .optimizer
        .load_state(|name| checkpoint.tensor(name))
        .with_context(|| format!("loading optimiser state from {}", path.display()))?;
    let json = checkpoint.info.get(STATE_KEY).with_context(|| {
        format!(
            "{} has no training state (`{STATE_KEY}`): it is a weights-only checkpoint; \
             use it as model.init instead of resuming from it",
            path.display()
        )
    })?;
    let state: RunState = serde_json::from_str(json)
        .with_context(|| format!("training state in {}", path.display()))?;
    restore_amp(trainer, &state);
    Ok(state)
}

/// Puts the saved loss scale and skip count back into the trainer's AMP state (a
/// checkpoint without one, or a run without AMP, leaves it as it is).
pub fn restore_amp(trainer: &mut Trainer, state: &RunState) {
    if let Some(amp) = trainer.amp.as_mut() {
        amp.skipped_steps = state.skipped_steps;
        if let (Some(scaler), Some((scale, tracker))) = (amp.scaler_mut(), state.loss_scale) {
            scaler.load_state(scale, tracker);
        }
    }
}

/// The trainer's AMP state, recorded in `state` before a checkpoint is written.
fn record_amp(trainer: &Trainer, state: &mut RunState) {
    if let Some(amp) = &trainer.amp {
        state.skipped_steps = amp.skipped_steps;
        state.loss_scale = amp.scaler().map(|s| s.state());
    }
}

/// Trains from `state` to `trainer.config.iterations` (or `opts.stop_at`), validating
/// with `validate` when given. Returns the final state.
pub fn run(
    trainer: &mut Trainer,
    train_set: Arc<dyn SegDataset>,
    mut validate: Option<&mut dyn FnMut(&DaNet) -> Result<ValScore>>,
    opts: &RunOptions,
    mut state: RunState,
) -> Result<RunState> {
    let cfg = trainer.config.clone();
    let end = opts.stop_at.unwrap_or(cfg.iterations).min(cfg.iterations);
    let main = opts.is_main();
    let mut log = open_run_dir(trainer, opts, state.iteration)?;
    let loader_config = LoaderConfig {
        batch_size: cfg.batch_size,
        workers: opts.workers,
        prefetch: opts.prefetch,
        seed: cfg.seed,
        rank: opts.rank,
        world_size: opts.world_size,
    };
    let mut loader = Loader::new(
        train_set,
        cfg.augment.clone(),
        loader_config,
        state.position,
    )?;
    let progress = opts.progress.as_deref().filter(|_| cfg.progress && main);
    if let Some(p) = progress {
        p.start("train", cfg.iterations as u64, state.iteration as u64);
    }
    let mut window = Window::new(loader.wait_time());
    let mut last_saved: Option<PathBuf> =
        (state.iteration > 0 && opts.last_path().exists()).then(|| opts.last_path());
    // QAT: the thresholds at the previous record (the start: the calibration's, or the
    // resumed checkpoint's), for the movement each record reports.
    let mut qat_ranges: Option<Vec<f32>> = trainer.model.qat().map(|q| q.threshold_values());

    while state.iteration < end {
        let stats = train_step(trainer, &mut loader, &mut state, last_saved.as_deref())?;
        let done = state.iteration;
        window.add(&stats);
        record_amp(trainer, &mut state);
        if let Some(p) = progress {
            p.advance(1);
        }
        if done % opts.log_every.max(1) == 0 || done == end {
            let mut record = window.record(done, stats.lr, loader.wait_time());
            if let Some(q) = trainer.model.qat() {
                let now = q.threshold_values();
                let t = crate::qat::ThresholdSummary::of(&now);
                record.qat_threshold_min = Some(t.min);
                record.qat_threshold_median = Some(t.median);
                record.qat_threshold_max = Some(t.max);
                let before = qat_ranges.replace(now.clone());
                record.qat_range_movement = before
                    .as_deref()
                    .map(|b| crate::qat::threshold_movement(b, &now));
                let per_tensor: Vec<(String, f64)> = q
                    .sources
                    .iter()
                    .zip(&now)
                    .map(|(name, &v)| (format!("qat/threshold/{name}"), v as f64))
                    .collect();
                log.tensorboard_scalars(done, &per_tensor)?;
            }
            if let Some(p) = progress {
                show_record(p, &record, stats.lr, cfg.iterations);
            }
            log.push(record)?;
        }
        if let Some(validate) = validate.as_deref_mut() {
            let due = opts.eval_every > 0 && done % opts.eval_every == 0;
            if due || done == cfg.iterations {
                validate_and_keep_best(trainer, validate, &mut log, &mut state, opts)?;
            }
        }
        let finished = done == end;
        if main {
            save_checkpoints(trainer, &state, opts, finished, &mut last_saved)?;
            if done % opts.plot_every.max(1) == 0 || finished {
                log.plot(&opts.out_dir)?;
            }
        }
    }
    if let Some(p) = progress {
        p.finish(None);
    }
    Ok(state)
}

/// Creates the run directory with its `config.toml` and environment record (main rank),
/// and opens the metrics log, resuming at `iteration`.
fn open_run_dir(trainer: &Trainer, opts: &RunOptions, iteration: usize) -> Result<MetricsLog> {
    let main = opts.is_main();
    if main {
        std::fs::create_dir_all(&opts.out_dir)
            .with_context(|| format!("creating run directory {}", opts.out_dir.display()))?;
        let config_path = opts.out_dir.join("config.toml");
        segtool_model_spec::io::write_atomic(&config_path, opts.config_text.as_bytes())
            .with_context(|| format!("writing {}", config_path.display()))?;
    }
    let mut log = MetricsLog::open(&opts.out_dir.join("metrics.jsonl"), iteration, main)?;
    if main {
        crate::telemetry::write_environment(&opts.out_dir, trainer, opts.world_size, iteration)?;
        if opts.tensorboard {
            log = log.with_tensorboard(&opts.out_dir, iteration, &opts.config_text)?;
        }
    }
    Ok(log)
}

/// One optimiser step over `accumulation` batches; advances `state` past it. A
/// non-finite loss stops the run, naming the last good checkpoint.
fn train_step(
    trainer: &mut Trainer,
    loader: &mut Loader,
    state: &mut RunState,
    last_saved: Option<&Path>,
) -> Result<crate::trainer::StepStats> {
    let it = state.iteration;
    let mut batches = Vec::with_capacity(trainer.config.accumulation);
    for _ in 0..trainer.config.accumulation {
        let batch = loader.next_batch()?;
        state.position = batch.position;
        batches.push(trainer.batch_tensors(&batch.samples));
    }
    let refs: Vec<_> = batches.iter().map(|(i, m)| (i, m)).collect();
    let stats = trainer.step_accumulated(&refs, it).map_err(|e| {
        if !e.is::<NonFiniteLoss>() {
            return e;
        }
        let last = last_saved.map_or("none written yet".to_string(), |p| p.display().to_string());
        e.context(format!(
            "training stopped at iteration {it}; last good checkpoint: {last}"
        ))
    })?;
    state.iteration += 1;
    Ok(stats)
}

/// The progress bar's message and log line for a metrics record.
fn show_record(progress: &dyn Progress, record: &Record, lr: f64, iterations: usize) {
    progress.message(format!(
        "loss {:.4} lr {:.2e} data-wait {:.0}%",
        record.loss.unwrap_or(f64::NAN),
        lr,
        record.data_wait.unwrap_or(0.0) * 100.0
    ));
    progress.line(format!("  {}", record.describe(iterations)));
}

/// Validates the model, logs the score, and (main rank) saves `best` on a new best mIoU.
fn validate_and_keep_best(
    trainer: &Trainer,
    validate: &mut dyn FnMut(&DaNet) -> Result<ValScore>,
    log: &mut MetricsLog,
    state: &mut RunState,
    opts: &RunOptions,
) -> Result<()> {
    let done = state.iteration;
    let score = validate(&trainer.model)?;
    let record = Record {
        class_iou: (!score.class_iou.is_empty()).then(|| score.class_iou.clone()),
        ..Record::val(done, score.miou, score.pixel_accuracy)
    };
    log.push_validation(record, &score.overlays)?;
    if opts.is_main() && state.best_miou.is_none_or(|b| score.miou > b) {
        state.best_miou = Some(score.miou);
        state.best_iteration = Some(done);
        save(trainer, &opts.best_path(), state, opts)?;
    }
    Ok(())
}

/// Saves `last` when a periodic checkpoint is due or the run is `finished`, with the
/// keep-k `iter_*` snapshots.
fn save_checkpoints(
    trainer: &Trainer,
    state: &RunState,
    opts: &RunOptions,
    finished: bool,
    last_saved: &mut Option<PathBuf>,
) -> Result<()> {
    let done = state.iteration;
    let periodic = opts.checkpoint_every > 0 && done % opts.checkpoint_every == 0;
    if !(periodic || finished) {
        return Ok(());
    }
    save(trainer, &opts.last_path(), state, opts)?;
    *last_saved = Some(opts.last_path());
    if periodic && opts.keep > 0 {
        let snapshot = opts.out_dir.join(format!("iter_{done:07}.safetensors"));
        snapshot_of(&opts.last_path(), &snapshot)?;
        prune_snapshots(&opts.out_dir, opts.keep)?;
    }
    Ok(())
}

fn save(trainer: &Trainer, path: &Path, state: &RunState, opts: &RunOptions) -> Result<()> {
    let mut info = CheckpointInfo::from([
        (STATE_KEY.to_string(), serde_json::to_string(state)?),
        (CONFIG_KEY.to_string(), opts.config_text.clone()),
        (THREADS_KEY.to_string(), tch::get_num_threads().to_string()),
        ("iterations".to_string(), state.iteration.to_string()),
    ]);
    // QAT: the contract `segtool export` reads (the thresholds are a variable).
    if let Some(q) = trainer.model.qat() {
        let (key, value) = q.metadata(q.options.init_samples);
        info.insert(key, value);
    }
    checkpoint::save_with(
        path,
        &trainer.vs,
        &trainer.model.spec,
        &info,
        &trainer.optimizer.state(),
    )
}

/// `snapshot` with the contents of `last`: a hard link (free; `last` is later replaced by
/// rename, so the link keeps this version), else a copy through a temp file and rename.
fn snapshot_of(last: &Path, snapshot: &Path) -> Result<()> {
    if std::fs::hard_link(last, snapshot).is_ok() {
        return Ok(());
    }
    let tmp = segtool_model_spec::io::temp_path(snapshot);
    std::fs::copy(last, &tmp)
        .and_then(|_| std::fs::rename(&tmp, snapshot))
        .inspect_err(|_| {
            let _ = std::fs::remove_file(&tmp);
        })
        .with_context(|| format!("writing {}", snapshot.display()))
}

/// Deletes all but the newest `keep` `iter_*.safetensors` snapshots.
fn prune_snapshots(dir: &Path, keep: usize) -> Result<()> {
    let mut snapshots: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("iter_") && n.ends_with(".safetensors"))
        })
        .collect();
    snapshots.sort(); // zero-padded iteration numbers sort chronologically
    let excess = snapshots.len().saturating_sub(keep);
    for old in &snapshots[..excess] {
        std::fs::remove_file(old).with_context(|| format!("removing {}", old.display()))?;
    }
    Ok(())
}

/// Losses and timings since the last log record.
struct Window {
    start: Instant,
    wait_at_start: std::time::Duration,
    losses: Vec<f64>,
    terms: Vec<[f64; 3]>,
    aux: Vec<f64>,
    grad_norms: Vec<f64>,
    skipped: usize,
    loss_scale: Option<f64>,
}

impl Window {
    fn new(wait: std::time::Duration) -> Self {
        Self {
            start: Instant::now(),
            wait_at_start: wait,
            losses: Vec::new(),
            terms: Vec::new(),
            aux: Vec::new(),
            grad_norms: Vec::new(),
            skipped: 0,
            loss_scale: None,
        }
    }

    fn add(&mut self, stats: &crate::trainer::StepStats) {
        self.losses.push(stats.loss);
        self.terms.push(stats.loss_terms);
        self.aux.extend(stats.loss_aux);
        self.grad_norms.extend(stats.grad_norm);
        self.skipped += stats.skipped as usize;
        self.loss_scale = stats.loss_scale.or(self.loss_scale);
    }

    /// The record of this window; starts the next one.
    fn record(&mut self, iteration: usize, lr: f64, wait: std::time::Duration) -> Record {
        let seconds = self.start.elapsed().as_secs_f64().max(1e-9);
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let term = |k: usize| mean(&self.terms.iter().map(|t| t[k]).collect::<Vec<_>>());
        let record = Record {
            loss: mean(&self.losses),
            loss_fused: term(0),
            loss_pam: term(1),
            loss_cam: term(2),
            loss_aux: mean(&self.aux),
            lr: Some(lr),
            it_per_s: Some(self.losses.len() as f64 / seconds),
            data_wait: Some(((wait - self.wait_at_start).as_secs_f64() / seconds).min(1.0)),
            grad_norm: mean(&self.grad_norms),
            skipped_steps: (self.skipped > 0).then_some(self.skipped),
            loss_scale: self.loss_scale,
            ..Record::empty("train", iteration)
        };
        *self = Self::new(wait);
        record
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_choice() {
        use ThreadSource::*;
        let choice = |given, recorded| choose_threads(given, recorded, 8);
        let expect = |threads, source, recorded, differs| ThreadChoice {
            threads,
            source,
            recorded,
            differs_from_checkpoint: differs,
        };
        // Fresh runs: the flag, else libtorch's default.
        assert_eq!(choice(None, None), expect(8, Default, None, false));
        assert_eq!(choice(Some(2), None), expect(2, Given, None, false));
        assert_eq!(choice(Some(0), None), expect(8, Given, None, false));
        // Resumes: the recorded count unless one is given; a different one is flagged.
        assert_eq!(choice(None, Some(1)), expect(1, Checkpoint, Some(1), false));
        assert_eq!(choice(Some(1), Some(1)), expect(1, Given, Some(1), false));
        assert_eq!(choice(Some(4), Some(1)), expect(4, Given, Some(1), true));
        assert_eq!(choice(Some(0), Some(1)), expect(8, Given, Some(1), true));
        assert_eq!(choice(Some(0), Some(8)), expect(8, Given, Some(8), false));
    }

    #[test]
    fn recorded_thread_count() {
        let info = |v: &str| CheckpointInfo::from([(THREADS_KEY.to_string(), v.to_string())]);
        assert_eq!(recorded_threads(&CheckpointInfo::new()).unwrap(), None);
        assert_eq!(recorded_threads(&info("3")).unwrap(), Some(3));
        for bad in ["0", "-1", "two", ""] {
            let message = format!("{:#}", recorded_threads(&info(bad)).unwrap_err());
            assert!(message.contains(THREADS_KEY), "{message}");
        }
    }
}
