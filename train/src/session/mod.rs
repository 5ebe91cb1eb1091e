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
//! let dist = segtool_train::dist::DistEnv::from_env()?;
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

pub use convert::{config_notes, resolve_config, ResumePoint};
pub use events::{thread_note, AmpSummary, Event, RunSummary};

use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use segtool_core::config::{Precision, RunConfig};
use segtool_core::dataset::SegDataset;
use tch::Device;

use crate::amp::Amp;
use crate::checkpoint::Checkpoint;
use crate::datasets::{dataset_classes, open_dataset, ShapesOptions};
use crate::dist::{Backend, Ddp, DistEnv, ProcessGroup, DEFAULT_BUCKET_MB};
use crate::eval::{evaluate_with, EvalOptions};
use crate::model::DaNet;
use crate::progress::Progress;
use crate::run::{self, choose_threads, RunOptions, RunState, ThreadSource, ValScore};
use crate::trainer::{TrainConfig, Trainer};

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
        let threads = self.set_threads(rank == 0, &mut notes);
        let mut cfg = self.config.clone();
        // dist: the world is what the environment says; say so rather than silently
        // training with a different global batch than configured.
        if cfg.optim.world_size != world {
            if rank == 0 {
                self.note(
                    &mut notes,
                    format!(
                        "note: optim.world_size = {} but this run has {world} process(es); \
                         the global batch below is for {world}",
                        cfg.optim.world_size
                    ),
                );
            }
            cfg.optim.world_size = world;
        }
        cfg.validate()?;

        let shapes = ShapesOptions::from_run_config(&cfg);
        let (classes, palette) = dataset_classes(&cfg.data.dataset)?;
        let train_set: Arc<dyn SegDataset> =
            open_dataset(&cfg.data.dataset, &cfg.data.train_split, &shapes)?.into();
        let total = cfg.total_iterations(train_set.len()) as usize;
        if total == 0 {
            bail!(
                "no iterations to run: {} training images, global batch {}",
                train_set.len(),
                cfg.global_batch()
            );
        }
        if rank == 0 {
            self.emit(Event::Plan(cfg.summary(Some(train_set.len()))));
        }
        let val_set = match cfg.data.val_split.as_str() {
            "" => None,
            split => Some(
                open_dataset(&cfg.data.dataset, split, &shapes).with_context(|| {
                    format!(
                        "validation split {split:?} (set data.val_split=\"\" to train without one)"
                    )
                })?,
            ),
        };

        let spec = crate::presets::model_spec(&cfg, classes, palette)?;
        let device = self.device;
        let mut train_cfg = TrainConfig::from_run_config(&cfg, total, device);
        train_cfg.progress = rank == 0;
        // amp: fp16 is refused off CUDA here, before any data is read.
        let amp = match cfg.optim.effective_precision() {
            Precision::Fp32 => None,
            p => Some(Amp::new(p, device)?),
        };
        let mut trainer = Trainer::new(&spec, train_cfg)?;
        let state = match &self.resume {
            Some(point) => {
                let checkpoint = Checkpoint::read(&point.path)?;
                let state = run::resume(&mut trainer, &checkpoint, &point.path)?;
                let path = point.path.clone();
                self.emit(Event::Resuming {
                    path,
                    iteration: state.iteration,
                });
                state
            }
            None => {
                if let Some(init) = &cfg.model.init {
                    let on_event = &mut self.on_event;
                    crate::import::init_from_file(
                        &mut trainer.vs,
                        std::path::Path::new(init),
                        &mut |line| on_event(&Event::Import(line)),
                    )?;
                }
                RunState::default()
            }
        };
        if let Some(env) = &dist {
            self.join(env, &cfg, &mut trainer)?;
        }

        let mut opts = RunOptions::from_run_config(&cfg, rank, world);
        opts.stop_at = self.stop_at;
        opts.progress = self.progress.clone();
        if let Some(mut amp) = amp {
            // Skipped steps (fp16 loss scaling) go to metrics.jsonl as "amp_skip" records.
            if rank == 0 {
                amp.log = Some(opts.out_dir.join("metrics.jsonl"));
            }
            trainer.enable_amp(amp);
            // The checkpoint's loss scale and skip count (read above, before AMP existed).
            run::restore_amp(&mut trainer, &state);
        }
        let eval_opts = EvalOptions::from_eval_config(&cfg.eval);
        let mut last_validation = None;
        let on_event = &mut self.on_event;
        let mut validate = |model: &DaNet| -> Result<ValScore> {
            let val = val_set
                .as_deref()
                .expect("validation only runs with a val split");
            let mut kept = Vec::new();
            let result = evaluate_with(model, val, &eval_opts, device, None, |i, labels| {
                crate::telemetry::keep_prediction(&mut kept, i, labels)
            })?;
            let (miou, pixel_accuracy) = (result.mean_iou(), result.pixel_accuracy());
            last_validation = Some((miou, pixel_accuracy));
            // dist: every rank evaluates the whole split (same result); rank 0 reports.
            if rank == 0 {
                on_event(&Event::Validation {
                    miou,
                    pixel_accuracy,
                });
            }
            ValScore::from_eval(&result, model, val, &kept)
        };
        let validate: Option<&mut dyn FnMut(&DaNet) -> Result<ValScore>> =
            val_set.is_some().then_some(&mut validate as _);
        let state = run::run(&mut trainer, train_set, validate, &opts, state)?;

        let amp = trainer.amp.as_ref().map(|amp| AmpSummary {
            precision: amp.precision(),
            skipped_steps: amp.skipped_steps,
            loss_scale: amp.scaler().map(|s| s.scale()),
        });
        let best_checkpoint = state.best_iteration.map(|_| opts.best_path());
        Ok(RunSummary {
            rank,
            world_size: world,
            total_iterations: total,
            last_checkpoint: opts.last_path(),
            best_checkpoint,
            last_validation,
            final_loss: trainer.losses.last().map(|l| l.1),
            amp,
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

    /// libtorch's intra-op thread count: the option, else on resume the checkpoint's,
    /// else libtorch's default. Says so (on rank 0, `report`) when resuming.
    fn set_threads(&mut self, report: bool, notes: &mut Vec<String>) -> run::ThreadChoice {
        let recorded = self.resume.as_ref().and_then(|r| r.threads);
        let choice = choose_threads(self.threads, recorded, tch::get_num_threads());
        if choice.source != ThreadSource::Default && choice.threads != tch::get_num_threads() {
            tch::set_num_threads(choice.threads);
        }
        let path = self.resume.as_ref().map(|r| r.path.clone());
        if let (Some(path), true) = (path, report) {
            if let Some(text) = thread_note(&choice, &path) {
                self.note(notes, text);
            }
        }
        choice
    }

    /// dist: join the process group; rank 0's weights everywhere, SyncBN, DDP.
    fn join(&self, env: &DistEnv, cfg: &RunConfig, trainer: &mut Trainer) -> Result<()> {
        if self.backend == Backend::Gloo && self.device != Device::Cpu {
            bail!("the gloo backend trains on the CPU: use --device cpu (or --dist-backend nccl)");
        }
        let group = Arc::new(
            ProcessGroup::new(&env.group_options(self.backend, self.timeout))
                .with_context(|| format!("rank {} joining the process group", env.rank))?,
        );
        if cfg.optim.sync_bn {
            trainer.enable_sync_bn(group.clone());
        }
        trainer.enable_ddp(Ddp::new(group, self.bucket_mb))
    }
}
