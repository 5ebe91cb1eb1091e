//! A run configuration (`segtool_core::config::RunConfig`) into the train crate's own
//! option types, in one place each: a new knob is read here and nowhere else.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use segtool_calibration::qdq::{Layout, WeightRange};
use segtool_calibration::Method;
use segtool_core::config::{EvalConfig, EvalMode, QuantConfig, RunConfig};
use tch::Device;

use crate::checkpoint::Checkpoint;
use crate::data::{Augment, PhotoMetric};
use crate::eval::EvalOptions;
use crate::ohem::Ohem;
use crate::optim::SgdConfig;
use crate::qat::{QatOptions, RangeLearning};
use crate::run::{recorded_threads, RunOptions, CONFIG_KEY};
use crate::trainer::{CeMean, TrainConfig};

impl TrainConfig {
    /// The optimiser, loss, augmentation and model keys of `cfg`, for a run of
    /// `iterations` on `device` (progress on; [`crate::Run`] turns it off off rank 0).
    pub fn from_run_config(cfg: &RunConfig, iterations: usize, device: Device) -> Self {
        let (o, a) = (&cfg.optim, &cfg.augment);
        TrainConfig {
            iterations,
            batch_size: o.batch_size,
            lr: cfg.effective_lr(),
            head_lr_mult: o.head_lr_mult,
            sgd: SgdConfig {
                momentum: o.momentum,
                weight_decay: o.weight_decay,
                nesterov: o.nesterov,
            },
            poly_power: o.poly_power,
            min_lr: o.min_lr,
            poly_form: o.poly_form,
            warmup_iters: o.warmup_iters as usize,
            warmup_ratio: o.warmup_ratio,
            loss_weights: o.loss_weights,
            ce_mean: if o.ce_mean_over_all_pixels {
                CeMean::AllPixels
            } else {
                CeMean::LabelledPixels
            },
            dropout: cfg.model.dropout,
            ohem: o.ohem.then_some(Ohem {
                thresh: o.ohem_thresh,
                min_kept: o.ohem_min_kept as usize,
            }),
            accumulation: o.accumulation,
            grad_clip_norm: o.grad_clip_norm,
            augment: Augment {
                flip: a.flip,
                scale: a.scale_range.map(|[lo, hi]| (lo, hi)),
                base_size: a.base_size,
                crop: a.crop_size,
                color_jitter: a.color_jitter,
                blur_prob: a.blur_prob,
                blur_sigma: (a.blur_sigma[0], a.blur_sigma[1]),
                resize_scale: a.resize_scale.map(|[long, short]| (long, short)),
                crop_hw: a.crop_hw.map(|[h, w]| (h, w)),
                cat_max_ratio: a.cat_max_ratio,
                photometric: a.photometric.as_ref().map(|p| PhotoMetric {
                    brightness_delta: p.brightness_delta,
                    contrast: (p.contrast_range[0], p.contrast_range[1]),
                    saturation: (p.saturation_range[0], p.saturation_range[1]),
                    hue_delta: p.hue_delta,
                }),
                pad_after_normalize: a.pad_after_normalize,
            },
            seed: cfg.seed,
            device,
            progress: true,
            attention: cfg.model.attention,
            freeze_bn: false,
        }
    }
}

/// QAT settings as the `[quant]` section says; a name that is not one, or a layout that
/// `quant.export_target`'s engine cannot run, is refused naming the key (and both).
pub fn qat_options(q: &QuantConfig) -> Result<QatOptions> {
    let layout = Layout::from_name(&q.layout).with_context(|| {
        format!(
            "quant.layout {:?} is not a layout (portable, ort-cpu, openvino)",
            q.layout
        )
    })?;
    let weight_range = match q.weight_range.as_str() {
        "auto" => WeightRange::for_this_cpu(),
        name => WeightRange::from_name(name).with_context(|| {
            format!("quant.weight_range {name:?} is not a range (full, reduced, auto)")
        })?,
    };
    let ranges = RangeLearning::from_name(&q.ranges)
        .with_context(|| format!("quant.ranges {:?} is not ema or lsq", q.ranges))?;
    let method: Method = q
        .method
        .parse()
        .map_err(|e: String| anyhow::anyhow!("quant.method: {e}"))?;
    if let Some(target) = &q.export_target {
        let target: segtool_export::ExportTarget = target
            .parse()
            .map_err(|e: String| anyhow::anyhow!("quant.export_target: {e}"))?;
        segtool_calibration::qat::check_target(layout.name(), target)
            .context("quant.layout and quant.export_target")?;
    }
    Ok(QatOptions {
        layout,
        weight_range,
        ranges,
        method,
        percentile: q.percentile,
        freeze_bn_at: q.freeze_bn_at.map(|i| i as usize),
        ema_momentum: q.ema_momentum,
        init_samples: q.calib_images,
    })
}

/// Validation during training as the `[eval]` section says.
pub fn eval_options(e: &EvalConfig) -> EvalOptions {
    let base = EvalOptions::new()
        .protocol(e.protocol)
        .base_size(e.base_size.map(|b| b as usize))
        .flip(e.flip)
        .scales(e.scales.clone())
        .batch_size(e.batch_size)
        .resize(e.resize);
    match (e.mode, e.crop_size, e.stride) {
        (EvalMode::Sliding, Some(crop), Some(stride)) => {
            base.sliding(crop as usize, stride as usize)
        }
        _ => base.whole(),
    }
}

impl RunOptions {
    /// The run directory, checkpoint, evaluation, log and loader keys of `cfg`, for
    /// process `rank` of `world_size`; the configuration's TOML goes into every checkpoint.
    pub fn from_run_config(cfg: &RunConfig, rank: usize, world_size: usize) -> Self {
        RunOptions {
            rank,
            world_size,
            checkpoint_every: cfg.checkpoint.every as usize,
            keep: cfg.checkpoint.keep,
            eval_every: cfg.eval.every as usize,
            log_every: cfg.log.every as usize,
            plot_every: cfg.log.plot_every as usize,
            tensorboard: cfg.log.tensorboard,
            workers: cfg.data.workers,
            prefetch: cfg.data.prefetch,
            config_text: cfg.to_toml_string(),
            ..RunOptions::new(cfg.run_dir())
        }
    }
}

/// The checkpoint a run resumes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResumePoint {
    pub path: PathBuf,
    /// The libtorch thread count it was trained with, when it records one.
    pub threads: Option<i32>,
}

/// The configuration of a run and, when resuming, the checkpoint it resumes from:
/// `resume` (a checkpoint, or a run directory: its `last.safetensors`) with the
/// configuration stored in it, else the preset or TOML file `config` (default
/// `shapes-tiny`); then `overrides` (`KEY=VALUE`) on top.
pub fn resolve_config(
    config: Option<&str>,
    resume: Option<&Path>,
    overrides: &[String],
) -> Result<(RunConfig, Option<ResumePoint>)> {
    let (mut cfg, resume) = match resume {
        Some(path) => {
            if config.is_some() {
                bail!("--resume uses the configuration stored in the checkpoint; drop --config (use --set to change a key)");
            }
            let path = if path.is_dir() {
                path.join("last.safetensors")
            } else {
                path.to_path_buf()
            };
            let checkpoint = Checkpoint::read(&path)?;
            let text = checkpoint.info.get(CONFIG_KEY).with_context(|| {
                format!(
                    "{} has no stored run configuration: not a resumable checkpoint",
                    path.display()
                )
            })?;
            let mut cfg = RunConfig::from_toml_str(text)
                .with_context(|| format!("configuration stored in {}", path.display()))?;
            let threads =
                recorded_threads(&checkpoint.info).with_context(|| path.display().to_string())?;
            // The run continues where its checkpoint is, wherever the run was started.
            cfg.out_dir = path.parent().map(Path::to_path_buf);
            (cfg, Some(ResumePoint { path, threads }))
        }
        None => (
            RunConfig::preset_or_file(config.unwrap_or("shapes-tiny"))?,
            None,
        ),
    };
    cfg.apply_overrides(overrides)?;
    Ok((cfg, resume))
}

/// What `--print-config` says on stderr about `cfg` for a job of `world` processes: the
/// batch geometry, and a note when `optim.world_size` is not `world`.
pub fn config_notes(cfg: &RunConfig, world: usize) -> Result<Vec<String>> {
    cfg.validate()?;
    let mut notes = vec![cfg.summary(None)];
    let o = &cfg.optim;
    if world != o.world_size {
        notes.push(format!(
            "note: optim.world_size = {} but a run started like this one has {world} \
             process(es) and would train with a global batch of {}",
            o.world_size,
            o.batch_size * world * o.accumulation
        ));
    }
    Ok(notes)
}
