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
        // QAT: its names and the export target, checked before any data is read.
        if let Some(q) = &cfg.quant {
            super::convert::qat_options(q)?;
        }
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
        let qat = cfg
            .quant
            .as_ref()
            .map(super::convert::qat_options)
            .transpose()?;
        let state = match &self.resume {
            Some(point) => {
                let checkpoint = Checkpoint::read(&point.path)?;
                resume_qat(&mut trainer, &checkpoint, qat, &point.path)?;
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
                    let path = std::path::Path::new(init);
                    let (report, mode) =
                        crate::import::load_init(&mut trainer.vs, path, &mut |line| {
                            on_event(&Event::Import(line))
                        })?;
                    if qat.is_some() {
                        crate::qat::check_bn_statistics(
                            &report.missing,
                            &path.display().to_string(),
                        )?;
                    }
                    report.check(mode, false)?;
                }
                if let Some(options) = qat {
                    let note = start_qat(&mut trainer, options, cfg, data)?;
                    if opts.rank == 0 {
                        self.emit(Event::Note(note));
                    }
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

/// QAT from the float weights in `trainer`: fake quantisation planned for the model,
/// initial ranges calibrated on the first `options.init_samples` training images (as the
/// loader gives them, augmented; the same on every rank), thresholds joined to the
/// optimiser when learned. Returns the line that says what was set up.
fn start_qat(
    trainer: &mut Trainer,
    options: crate::qat::QatOptions,
    cfg: &RunConfig,
    data: &Data,
) -> Result<String> {
    use tch::nn::ModuleT;
    let fq = Arc::new(crate::qat::FakeQuant::new(
        &trainer.vs,
        &trainer.model.spec,
        options,
    )?);
    trainer.model.set_qat(Some(fq.clone()));
    let wanted = fq.options.init_samples;
    let loader_config = crate::loader::LoaderConfig {
        batch_size: cfg.optim.batch_size.min(wanted).max(1),
        workers: 0,
        prefetch: 1,
        seed: cfg.seed,
        rank: 0,
        world_size: 1,
    };
    let mut loader = crate::loader::Loader::new(
        data.train.clone(),
        trainer.config.augment.clone(),
        loader_config,
        Default::default(),
    )?;
    let mut batches = Vec::new();
    let mut seen = 0;
    while seen < wanted {
        let batch = loader.next_batch()?;
        let take = (wanted - seen).min(batch.samples.len());
        let (images, _) = trainer.batch_tensors(&batch.samples[..take]);
        seen += take;
        batches.push(images);
    }
    let model = &trainer.model;
    fq.calibrate(&batches, |x| {
        let _ = model.forward_t(x, false);
    })
    .context("calibrating the initial QAT ranges")?;
    trainer.enable_qat(fq.clone());
    let t = crate::qat::ThresholdSummary::of(&fq.threshold_values());
    let o = &fq.options;
    Ok(format!(
        "QAT: layout {}, weights per channel ({}), {} activation ranges ({}) from {} \
         calibration of {seen} training images (thresholds min {:.3} median {:.3} max {:.3}){}",
        o.layout.name(),
        o.weight_range.name(),
        fq.sources.len(),
        o.ranges.name(),
        o.method.name(),
        t.min,
        t.median,
        t.max,
        o.freeze_bn_at.map_or(String::new(), |i| format!(
            ", BatchNorm frozen from iteration {i}"
        ))
    ))
}

/// QAT on resume: the checkpoint's QAT and the configuration's must be the same (layout,
/// weight granularity and range, range learning, quantised tensors; refused by name
/// otherwise); fake quantisation is then set up so that loading the checkpoint restores
/// its thresholds (and their optimiser state).
fn resume_qat(
    trainer: &mut Trainer,
    checkpoint: &Checkpoint,
    qat: Option<crate::qat::QatOptions>,
    path: &std::path::Path,
) -> Result<()> {
    use segtool_model_spec::qat::{QatSpec, QAT_METADATA_KEY};
    let recorded = checkpoint
        .info
        .get(QAT_METADATA_KEY)
        .map(|json| QatSpec::from_json(json).map_err(anyhow::Error::msg))
        .transpose()
        .with_context(|| path.display().to_string())?;
    match (recorded, qat) {
        (None, None) => Ok(()),
        (None, Some(_)) => bail!(
            "{} is a float training run: QAT is not resumed from one, it starts from a \
             trained checkpoint (a new run with model.init = that file and a [quant] section)",
            path.display()
        ),
        (Some(spec), None) => bail!(
            "{} was trained with QAT (layout {:?}); resuming it without a [quant] section is \
             refused",
            path.display(),
            spec.layout
        ),
        (Some(spec), Some(mut options)) => {
            options.init_samples = spec.init_samples;
            let fq = crate::qat::FakeQuant::new(&trainer.vs, &trainer.model.spec, options)?;
            fq.check_resume(&spec)
                .with_context(|| format!("resuming {}", path.display()))?;
            trainer.enable_qat(Arc::new(fq));
            Ok(())
        }
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
