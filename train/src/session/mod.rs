//! One training run from a run configuration, wired end to end: the datasets, the model
//! and its initial weights or the checkpoint it resumes, mixed precision, the process
//! group with SyncBN and DDP, validation, checkpoints and telemetry ([`crate::run::run`]).
//! What `segtool train` does, as a library: it returns a [`RunSummary`] and reports
//! along the way through [`Event`]s and a [`Progress`], printing nothing.
//!
//! ```no_run
//! # fn main() -> anyhow::Result<()> {
//! use segtool_core::config::RunConfig;
//! let cfg = RunConfig::preset("shapes-tiny")?;
//! let dist = segtool_train::distributed::DistEnv::from_env()?;
//! let mut log = Vec::new();
//! let summary = segtool_train::Run::new(cfg, tch::Device::Cpu, dist)
//!     .stop_at(Some(10))
//!     .on_event(|e| log.push(e.to_string()))
//!     .execute()?;
//! assert_eq!(summary.state.iteration, 10);
//! assert!(summary.last_checkpoint.ends_with("last.safetensors"));
//! # Ok(()) }
//! ```

mod convert;
mod events;
mod steps;

pub use convert::{config_notes, resolve_config, ResumePoint};
pub use events::{thread_note, AmpSummary, Event, RunSummary};

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use segtool_core::config::RunConfig;
use tch::Device;

use crate::distributed::{Backend, DistEnv, DEFAULT_BUCKET_MB};
use crate::model::DaNet;
use crate::progress::Progress;
use crate::run::{self, RunOptions, ValScore};

/// A training run: built from a [`RunConfig`], the device and the distributed
/// environment (`None`: one process), with the CLI's overrides as builder options;
/// [`Run::execute`] trains and returns what happened.
pub struct Run<'a> {
    config: RunConfig,
    device: Device,
    dist: Option<DistEnv>,
    resume: Option<ResumePoint>,
    threads: Option<i32>,
    stop_at: Option<usize>,
    backend: Backend,
    timeout: Duration,
    bucket_mb: f64,
    progress: Option<Arc<dyn Progress>>,
    on_event: Box<dyn FnMut(&Event) + 'a>,
}

impl<'a> Run<'a> {
    /// A fresh run of `config` on `device`; in the job `dist` describes (torchrun's or
    /// Slurm's variables, [`DistEnv::from_env`]) when given.
    pub fn new(config: RunConfig, device: Device, dist: Option<DistEnv>) -> Self {
        Self {
            config,
            device,
            dist,
            resume: None,
            threads: None,
            stop_at: None,
            backend: Backend::Gloo,
            timeout: Duration::from_secs(600),
            bucket_mb: DEFAULT_BUCKET_MB,
            progress: None,
            on_event: Box::new(|_| {}),
        }
    }

    /// Continue from `point` (see [`resolve_config`], which also gives its configuration).
    pub fn resume(mut self, point: Option<ResumePoint>) -> Self {
        self.resume = point;
        self
    }

    /// libtorch intra-op threads (`Some(0)`: libtorch's default). Default: on resume the
    /// count the checkpoint was trained with, else libtorch's.
    pub fn threads(mut self, threads: Option<i32>) -> Self {
        self.threads = threads;
        self
    }

    /// Stop with a checkpoint after this many iterations (the schedule still spans all).
    pub fn stop_at(mut self, stop_at: Option<usize>) -> Self {
        self.stop_at = stop_at;
        self
    }

    /// Collective backend of a distributed run (default gloo).
    pub fn dist_backend(mut self, backend: Backend) -> Self {
        self.backend = backend;
        self
    }

    /// How long a rendezvous or collective may take before the rank fails (at least 1 s).
    pub fn dist_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_secs(1));
        self
    }

    /// DDP's gradient bucket size in MiB.
    pub fn bucket_mb(mut self, mb: f64) -> Self {
        self.bucket_mb = mb;
        self
    }

    /// Where rank 0 reports the training loop's progress.
    pub fn progress(mut self, progress: Arc<dyn Progress>) -> Self {
        self.progress = Some(progress);
        self
    }

    /// Receives each [`Event`] as it happens.
    pub fn on_event(mut self, f: impl FnMut(&Event) + 'a) -> Self {
        self.on_event = Box::new(f);
        self
    }

    /// Trains: to the end of the schedule or `stop_at`.
    pub fn execute(mut self) -> Result<RunSummary> {
        let dist = self.dist.take();
        let world = dist.as_ref().map_or(1, |e| e.world_size);
        let rank = dist.as_ref().map_or(0, |e| e.rank);
        let mut notes = Vec::new();
        if let Some(env) = &dist {
            self.emit(Event::Joined(env.clone()));
        }
        if dist.is_some() {
            // Before the model exists: its GPU is this rank's current device.
            crate::device::make_current(self.device)?;
        }
        let threads = self.set_threads(rank == 0, &mut notes);
        let cfg = self.settle_config(world, rank, &mut notes)?;
        let data = self.open_data(&cfg, rank)?;
        let mut opts = RunOptions::from_run_config(&cfg, rank, world);
        opts.stop_at = self.stop_at;
        opts.progress = self.progress.clone();
        let (mut trainer, state) = self.start_trainer(&cfg, &data, &opts, dist.as_ref())?;

        let eval_opts = convert::eval_options(&cfg.eval);
        let mut last_validation = None;
        let on_event = &mut self.on_event;
        let device = self.device;
        let mut validate = |model: &DaNet| -> Result<ValScore> {
            let val = data
                .val
                .as_deref()
                .expect("validation only runs with a val split");
            let score = steps::validate(model, val, &eval_opts, device)?;
            last_validation = Some((score.0, score.1));
            // dist: every rank evaluates the whole split (same result); rank 0 reports.
            if rank == 0 {
                on_event(&Event::Validation {
                    miou: score.0,
                    pixel_accuracy: score.1,
                });
            }
            Ok(score.2)
        };
        let validate: Option<&mut dyn FnMut(&DaNet) -> Result<ValScore>> =
            data.val.is_some().then_some(&mut validate as _);
        let state = run::run(&mut trainer, data.train.clone(), validate, &opts, state)?;

        Ok(RunSummary {
            rank,
            world_size: world,
            total_iterations: data.total,
            last_checkpoint: opts.last_path(),
            best_checkpoint: state.best_iteration.map(|_| opts.best_path()),
            last_validation,
            final_loss: trainer.losses.last().map(|l| l.1),
            amp: trainer.amp.as_ref().map(AmpSummary::of),
            threads,
            notes,
            state,
        })
    }

    fn emit(&mut self, event: Event) {
        (self.on_event)(&event);
    }

    fn note(&mut self, notes: &mut Vec<String>, text: String) {
        notes.push(text.clone());
        self.emit(Event::Note(text));
    }
}
