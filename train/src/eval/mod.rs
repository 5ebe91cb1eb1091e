//! Evaluation: mIoU over a dataset with the fused output, the confusion matrix
//! accumulated over all images (not averaged per image), under the paper's protocol
//! (DESIGN.md): full-resolution images, sliding windows, flip, multiple scales.
//!
//! [`sliding`] holds the per-image protocol; this module walks the dataset, batches
//! images, and accumulates the confusion matrix.

pub mod sliding;

use std::time::Instant;

use anyhow::{bail, Result};
use segtool_core::dataset::{Sample, SegDataset};
use segtool_core::{ConfusionMatrix, IGNORE_LABEL};
use segtool_model_spec::progress::Progress;
use tch::{Device, Kind, Tensor};

use crate::model::DaNet;

pub use segtool_model_spec::protocol::{Protocol, ProtocolOptions, Tiling, MULTI_SCALES};

/// The evaluation protocol: `segtool_core`'s [`ProtocolOptions`] builder, the one the
/// runtime's accuracy mode takes too.
pub type EvalOptions = ProtocolOptions;

pub struct EvalResult {
    pub confusion: ConfusionMatrix,
    /// Time in the network and the protocol (not in reading images).
    pub seconds: f64,
    pub images: usize,
}

impl EvalResult {
    pub fn pixel_accuracy(&self) -> f64 {
        self.confusion.pixel_accuracy()
    }

    pub fn mean_iou(&self) -> f64 {
        self.confusion.mean_iou()
    }

    pub fn iou_per_class(&self) -> Vec<Option<f64>> {
        self.confusion.iou_per_class()
    }

    /// The per-class table (see [`ConfusionMatrix::class_table`]).
    pub fn table(&self, classes: &[String]) -> String {
        self.confusion.class_table(classes)
    }

    pub fn images_per_second(&self) -> f64 {
        self.images as f64 / self.seconds.max(1e-9)
    }
}

/// Fused logits (N, K, H, W) for same-size images, eval mode, no grad.
pub fn predict_logits(model: &DaNet, images: &Tensor) -> Tensor {
    tch::no_grad(|| model.forward_all(images, false).fused)
}

/// Evaluates `model` on every sample of `dataset`, whole images at one scale,
/// `batch_size` images at a time (consecutive samples of one size share a batch).
/// `on_logits` sees each sample's logits (K, H, W) on the CPU, e.g. to compare against
/// another engine; `progress` sees one step per image.
pub fn evaluate(
    model: &DaNet,
    dataset: &dyn SegDataset,
    batch_size: usize,
    device: Device,
    progress: &dyn Progress,
    mut on_logits: impl FnMut(usize, &Tensor),
) -> Result<EvalResult> {
    let opts = EvalOptions::new().batch_size(batch_size.max(1));
    run(
        model,
        dataset,
        &opts,
        device,
        None,
        progress,
        |i, logits, _| {
            on_logits(i, &logits.to_device(Device::Cpu));
            Ok(())
        },
    )
}

/// Evaluates `model` under `opts` on the samples `indices` of `dataset` (all when
/// `None`). A shard's confusion matrix is exactly its share of the whole: matrices of
/// disjoint shards [merged](ConfusionMatrix::merge) equal one run over the union.
/// `on_prediction` sees each sample's index and predicted labels, (H, W) u8 on the CPU;
/// `progress` sees one step per image.
pub fn evaluate_with(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &EvalOptions,
    device: Device,
    indices: Option<&[usize]>,
    progress: &dyn Progress,
    mut on_prediction: impl FnMut(usize, &Tensor) -> Result<()>,
) -> Result<EvalResult> {
    run(
        model,
        dataset,
        opts,
        device,
        indices,
        progress,
        |i, _, labels| on_prediction(i, labels),
    )
}

/// The dataset loop behind both entry points: `visit(index, logits (K,H,W) on the
/// device, labels (H,W) u8 on the CPU)`.
fn run(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &EvalOptions,
    device: Device,
    indices: Option<&[usize]>,
    progress: &dyn Progress,
    visit: impl FnMut(usize, &Tensor, &Tensor) -> Result<()>,
) -> Result<EvalResult> {
    opts.validate().map_err(anyhow::Error::msg)?;
    let order: Vec<usize> = match indices {
        Some(ix) => ix.to_vec(),
        None => (0..dataset.len()).collect(),
    };
    if let Some(&bad) = order.iter().find(|&&i| i >= dataset.len()) {
        bail!(
            "sample index {bad} out of range (dataset has {})",
            dataset.len()
        );
    }
    let mut acc = Accumulator {
        model,
        opts,
        device,
        confusion: ConfusionMatrix::new(model.spec.num_classes()),
        seconds: 0.0,
        visit,
    };
    progress.start("eval", order.len() as u64, 0);
    // Whole mode batches images; sliding mode batches the windows of one image.
    let per_forward = match opts.tiling {
        Tiling::Whole => opts.batch_size,
        Tiling::Sliding { .. } => 1,
    };
    let mut group: Vec<(usize, Sample)> = Vec::with_capacity(per_forward);
    for &i in &order {
        let sample = dataset.get(i)?;
        let same_size = group
            .first()
            .is_none_or(|(_, s)| s.image.dimensions() == sample.image.dimensions());
        if group.len() == per_forward || !same_size {
            acc.group(&group)?;
            progress.advance(group.len() as u64);
            group.clear();
        }
        group.push((i, sample));
    }
    acc.group(&group)?;
    progress.advance(group.len() as u64);
    progress.finish(None);
    Ok(EvalResult {
        confusion: acc.confusion,
        seconds: acc.seconds,
        images: order.len(),
    })
}

/// What the dataset loop carries between batches.
struct Accumulator<'a, F> {
    model: &'a DaNet,
    opts: &'a EvalOptions,
    device: Device,
    confusion: ConfusionMatrix,
    seconds: f64,
    visit: F,
}

impl<F: FnMut(usize, &Tensor, &Tensor) -> Result<()>> Accumulator<'_, F> {
    /// Predicts a batch of same-size samples and adds them to the confusion matrix.
    fn group(&mut self, group: &[(usize, Sample)]) -> Result<()> {
        if group.is_empty() {
            return Ok(());
        }
        let images: Vec<_> = group.iter().map(|(_, s)| &s.image).collect();
        let t0 = Instant::now();
        let logits = sliding::predict_images(self.model, &images, self.opts, self.device);
        let labels = logits
            .argmax(1, false)
            .to_kind(Kind::Uint8)
            .to_device(Device::Cpu);
        self.seconds += t0.elapsed().as_secs_f64();
        for (k, (index, sample)) in group.iter().enumerate() {
            let pred = labels.get(k as i64);
            let flat = Vec::<u8>::try_from(&pred.contiguous().view(-1))?;
            self.confusion
                .update(sample.mask.as_raw(), &flat, IGNORE_LABEL);
            (self.visit)(*index, &logits.get(k as i64), &pred)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
