//! What a run records about itself beside its metrics: validation details (per-class
//! IoU, overlays: [`ValScore`], [`validate`]) for the run loop, and `environment.json`, the
//! receipt of what trained it (versions, threads, world size, precision, determinism).

use std::path::Path;

use anyhow::{Context, Result};
use segtool_core::dataset::SegDataset;
use serde::{Deserialize, Serialize};

use crate::metrics_log::ClassIou;
use crate::model::DaNet;
use crate::trainer::Trainer;

/// File name of the environment receipt in the run directory.
pub const ENVIRONMENT_FILE: &str = "environment.json";

/// What trained the run: written by the main process when a run (or a resume) starts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Environment {
    pub segtool_version: String,
    pub libtorch_version: String,
    /// libtorch built with CUDA (version), else `None`.
    pub libtorch_cuda: Option<String>,
    pub device: String,
    /// libtorch intra-op threads (CPU kernels split reductions by thread: a resume
    /// repeats a run bit for bit only at the same count).
    pub threads: i32,
    pub world_size: usize,
    /// `fp32`, `bf16` or `fp16` (autocast; fp16 with loss scaling).
    pub precision: String,
    pub seed: u64,
    /// How the run's randomness is fixed.
    pub determinism: String,
    /// Iteration the process started at (0, or where it resumed).
    pub started_at_iteration: usize,
}

/// Writes `environment.json` into `dir` (replacing the previous one; a resumed run
/// records the process that continued it).
pub fn write_environment(
    dir: &Path,
    trainer: &Trainer,
    world_size: usize,
    iteration: usize,
) -> Result<()> {
    let libtorch = crate::env_report::libtorch();
    let env = Environment {
        segtool_version: env!("CARGO_PKG_VERSION").into(),
        libtorch_version: libtorch.version,
        libtorch_cuda: libtorch.cuda_version,
        device: format!("{:?}", trainer.config.device),
        threads: tch::get_num_threads(),
        world_size,
        precision: trainer
            .amp
            .as_ref()
            .map_or("fp32", |a| a.precision().name())
            .to_string(),
        seed: trainer.config.seed,
        determinism: "batches, augmentation and dropout seeded from (seed, sampler position, \
                      iteration): a resume at the same thread count repeats the run exactly"
            .into(),
        started_at_iteration: iteration,
    };
    let path = dir.join(ENVIRONMENT_FILE);
    segtool_model_spec::io::write_atomic(&path, serde_json::to_string_pretty(&env)?.as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// Validation scores; the run keeps the checkpoint with the best `miou` as `best`.
#[derive(Clone, Debug, Default)]
pub struct ValScore {
    pub miou: f64,
    pub pixel_accuracy: f64,
    /// IoU per class (logged to metrics.jsonl and TensorBoard); empty: not reported.
    pub class_iou: Vec<ClassIou>,
    /// A few validation pictures (image | ground truth | prediction) for the run
    /// directory's `val_overlays/` and TensorBoard.
    pub overlays: Vec<image::RgbImage>,
}

impl ValScore {
    pub fn new(miou: f64, pixel_accuracy: f64) -> Self {
        Self {
            miou,
            pixel_accuracy,
            ..Self::default()
        }
    }

    /// The scores of `result`, class names from `model`, and overlays of the first
    /// `overlays` samples of `dataset` from `predictions` ((index, labels) as
    /// [`crate::eval::evaluate_with`] reports them).
    pub fn from_eval(
        result: &crate::eval::EvalResult,
        model: &DaNet,
        dataset: &dyn SegDataset,
        predictions: &[(usize, Vec<u8>)],
    ) -> Result<Self> {
        let class_iou = model
            .spec
            .classes
            .iter()
            .zip(result.iou_per_class())
            .map(|(class, iou)| ClassIou {
                class: class.clone(),
                iou,
            })
            .collect();
        let mut overlays = Vec::new();
        for (index, labels) in predictions {
            let sample = dataset.get(*index)?;
            overlays.push(segtool_core::visual::overlay_panel(
                &sample.image,
                &sample.mask,
                labels,
                &model.spec.palette,
            ));
        }
        Ok(Self {
            miou: result.mean_iou(),
            pixel_accuracy: result.pixel_accuracy(),
            class_iou,
            overlays,
        })
    }
}

/// Validation overlays kept per validation.
pub const VAL_OVERLAYS: usize = 4;

/// For `evaluate_with`'s `on_prediction`: keeps the labels of the first
/// [`VAL_OVERLAYS`] samples, for [`ValScore::from_eval`]'s overlays.
pub fn keep_prediction(
    kept: &mut Vec<(usize, Vec<u8>)>,
    index: usize,
    labels: &tch::Tensor,
) -> Result<()> {
    if kept.len() < VAL_OVERLAYS {
        let labels = labels.to_kind(tch::Kind::Uint8).contiguous().view(-1);
        kept.push((index, Vec::<u8>::try_from(&labels)?));
    }
    Ok(())
}

/// Evaluates `model` on `dataset` under `opts`: the scores, per-class IoU and
/// [`VAL_OVERLAYS`] overlays, for [`run`]'s `validate`.
pub fn validate(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &crate::eval::EvalOptions,
    device: tch::Device,
) -> Result<ValScore> {
    let mut predictions = Vec::new();
    let silent = &crate::progress::Silent;
    let result =
        crate::eval::evaluate_with(model, dataset, opts, device, None, silent, |i, labels| {
            keep_prediction(&mut predictions, i, labels)
        })?;
    ValScore::from_eval(&result, model, dataset, &predictions)
}

/// Next to an evaluation's metrics file `metrics` (`m.json`): `m.iou.png`, a per-class
/// IoU bar chart, and `m.confusion.png`, the confusion matrix normalised per
/// ground-truth class, both with class names; `title` names what was evaluated.
/// Returns the two paths.
pub fn write_eval_charts(
    metrics: &Path,
    confusion: &segtool_core::ConfusionMatrix,
    classes: &[String],
    title: &str,
) -> Result<[std::path::PathBuf; 2]> {
    use segtool_core::plot;
    let bars: Vec<(String, Option<f64>)> = classes
        .iter()
        .cloned()
        .zip(confusion.iou_per_class())
        .collect();
    let iou = plot::bar_chart(
        &format!(
            "{title}: IoU per class (mIoU {:.1} %)",
            confusion.mean_iou() * 100.0
        ),
        "IoU (%)",
        &bars,
        720,
        420,
    )
    .map_err(|e| anyhow::anyhow!("drawing the IoU chart: {e}"))?;
    let heat = plot::confusion_heatmap(
        &format!("{title}: confusion (% of each true class)"),
        classes,
        &confusion.rows(),
        560,
    )
    .map_err(|e| anyhow::anyhow!("drawing the confusion matrix: {e}"))?;
    let paths = [
        metrics.with_extension("iou.png"),
        metrics.with_extension("confusion.png"),
    ];
    for (path, img) in paths.iter().zip([iou, heat]) {
        let png = segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(img));
        segtool_model_spec::io::write_atomic(path, &png)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(paths)
}

/// `runs/x/best.safetensors` -> `x/best`: names a checkpoint in chart titles.
pub fn title_of(path: &Path) -> String {
    let stem = path
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy());
    match path.parent().and_then(|p| p.file_name()) {
        Some(dir) => format!("{}/{stem}", dir.to_string_lossy()),
        None => stem.into_owned(),
    }
}
