//! The stages of [`Run::execute`], in the order it runs them: thread count, the settled
//! configuration, the datasets, the trainer (initial weights or resume, process group,
//! mixed precision), and validation.

use std::sync::Arc;

use anyhow::{bail, Context, Result};
use segtool_core::config::{Precision, RunConfig};
use segtool_core::dataset::SegDataset;
use tch::Device;

use super::{thread_note, Event, Run};
use crate::amp::Amp;
use crate::checkpoint::Checkpoint;
use crate::datasets::{dataset_classes, open_dataset, ShapesOptions};
use crate::distributed::{Backend, Ddp, DistEnv, ProcessGroup};
use crate::eval::{evaluate_with, EvalOptions};
use crate::model::DaNet;
use crate::progress::Silent;
use crate::run::{self, choose_threads, RunOptions, RunState, ThreadSource, ValScore};
use crate::trainer::{TrainConfig, Trainer};

/// The run's datasets and the schedule length they give.
pub(super) struct Data {
    pub train: Arc<dyn SegDataset>,
    pub val: Option<Box<dyn SegDataset>>,
    pub classes: Vec<String>,
    pub palette: Option<Vec<[u8; 3]>>,
    /// Optimiser steps of the whole schedule.
    pub total: usize,
}

impl Run<'_> {
    /// libtorch's intra-op thread count: the option, else on resume the checkpoint's,
    /// else libtorch's default. Says so (on rank 0, `report`) when resuming.
    pub(super) fn set_threads(
        &mut self,
        report: bool,
        notes: &mut Vec<String>,
    ) -> run::ThreadChoice {
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
            ProcessGroup::new(
                &env.group_options(self.backend, self.timeout)
                    .on_device(self.device),
            )
            .with_context(|| format!("rank {} joining the process group", env.rank))?,
        );
        if cfg.optim.sync_bn {
            trainer.enable_sync_bn(group.clone());
        }
        trainer.enable_ddp(Ddp::new(group, self.bucket_mb))
    }

    /// The configuration as this run executes it: the world size the environment gives
    /// (said in a note when the configuration assumed another), validated.
    pub(super) fn settle_config(
        &mut self,
        world: usize,
        rank: usize,
        notes: &mut Vec<String>,
    ) -> Result<RunConfig> {
        let mut cfg = self.config.clone();
        // dist: the world is what the environment says; say so rather than silently
        // training with a different global batch than configured.
        if cfg.optim.world_size != world {
            if rank == 0 {
                self.note(
                    notes,
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
        Ok(cfg)
    }

    /// Opens the training and validation splits; rank 0 reports the plan.
    pub(super) fn open_data(&mut self, cfg: &RunConfig, rank: usize) -> Result<Data> {
        let shapes = ShapesOptions::from_run_config(cfg);
        let (classes, palette) = dataset_classes(&cfg.data.dataset)?;
        let train: Arc<dyn SegDataset> =
            open_dataset(&cfg.data.dataset, &cfg.data.train_split, &shapes)?.into();
        let total = cfg.total_iterations(train.len()) as usize;
        if total == 0 {
            bail!(
                "no iterations to run: {} training images, global batch {}",
                train.len(),
                cfg.global_batch()
            );
        }
        if rank == 0 {
            self.emit(Event::Plan(cfg.summary(Some(train.len()))));
        }
        let val = match cfg.data.val_split.as_str() {
            "" => None,
            split => Some(
                open_dataset(&cfg.data.dataset, split, &shapes).with_context(|| {
                    format!(
                        "validation split {split:?} (set data.val_split=\"\" to train without one)"
                    )
                })?,
            ),
        };
        Ok(Data {
            train,
            val,
            classes,
            palette,
            total,
        })
    }

    /// The trainer at its starting point: initial weights (or the resumed checkpoint's
    /// state), joined to the process group when distributed, with mixed precision.
    pub(super) fn start_trainer(
        &mut self,
        cfg: &RunConfig,
        data: &Data,
        opts: &RunOptions,
        dist: Option<&DistEnv>,
    ) -> Result<(Trainer, RunState)> {
        let spec = crate::presets::model_spec(cfg, data.classes.clone(), data.palette.clone())?;
        let mut train_cfg = TrainConfig::from_run_config(cfg, data.total, self.device);
        train_cfg.progress = opts.rank == 0;
        // amp: fp16 is refused off CUDA here, before any data is read.
        let amp = match cfg.optim.effective_precision() {
            Precision::Fp32 => None,
            p => Some(Amp::new(p, self.device)?),
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
        if let Some(env) = dist {
            self.join(env, cfg, &mut trainer)?;
        }
        if let Some(mut amp) = amp {
            // Skipped steps (fp16 loss scaling) go to metrics.jsonl as "amp_skip" records.
            if opts.rank == 0 {
                amp.log = Some(opts.out_dir.join("metrics.jsonl"));
            }
            trainer.enable_amp(amp);
            // The checkpoint's loss scale and skip count (read above, before AMP existed).
            run::restore_amp(&mut trainer, &state);
        }
        Ok((trainer, state))
    }
}

/// One validation pass: (mIoU, pixel accuracy, the score the run keeps).
pub(super) fn validate(
    model: &DaNet,
    val: &dyn SegDataset,
    opts: &EvalOptions,
    device: Device,
) -> Result<(f64, f64, ValScore)> {
    let mut kept = Vec::new();
    // The training bar stays; validation reports through events, not a bar.
    let result = evaluate_with(model, val, opts, device, None, &Silent, |i, labels| {
        crate::telemetry::keep_prediction(&mut kept, i, labels)
    })?;
    let score = ValScore::from_eval(&result, model, val, &kept)?;
    Ok((result.mean_iou(), result.pixel_accuracy(), score))
}
