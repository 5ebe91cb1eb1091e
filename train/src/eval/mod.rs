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
use tch::{Device, Kind, Tensor};

use crate::data::images_to_tensor;
use crate::model::DaNet;

pub use segtool_core::protocol::{Protocol, MULTI_SCALES};
use segtool_core::protocol::{ProtocolOptions, Tiling};

/// How each (scaled) image goes through the network.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The whole image in one forward pass.
    Whole,
    /// `crop` x `crop` windows, `stride` pixels apart (see [`sliding::windows`]).
    Sliding { crop: i64, stride: i64 },
}

/// The evaluation protocol. Built with chained setters from [`EvalOptions::new`] (whole
/// image, one scale, no flip) or from the paper's presets.
#[derive(Clone, Debug, PartialEq)]
pub struct EvalOptions {
    /// DANet's `MultiEvalModule` or mmsegmentation's inference (see
    /// `segtool_core::protocol`).
    pub protocol: Protocol,
    pub mode: Mode,
    /// Also run the mirrored image (combined as the protocol says).
    pub flip: bool,
    /// Image scales whose (resized back) scores are summed.
    pub scales: Vec<f64>,
    /// DANet protocol: the long side at scale 1.0 (`None`: each image's own).
    pub base_size: Option<usize>,
    /// Whole mode: images (of one size) per forward pass. Sliding mode: windows of one
    /// image per forward pass. Flip doubles either.
    pub batch_size: usize,
    /// Show a progress bar with rate and ETA on stderr.
    pub progress: bool,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            protocol: Protocol::Mmseg,
            mode: Mode::Whole,
            flip: false,
            scales: vec![1.0],
            base_size: None,
            batch_size: 1,
            progress: true,
        }
    }
}

impl EvalOptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// The published single-scale protocol (Cityscapes: DANet's test.py with
    /// `--base-size 2048 --crop-size 768`): DANet's `MultiEvalModule`, crop 768, stride
    /// 512, flip.
    pub fn paper_single_scale() -> Self {
        Self::new()
            .protocol(Protocol::Danet)
            .base_size(Some(2048))
            .sliding(768, 512)
            .flip(true)
    }

    /// The published multi-scale protocol: [`Self::paper_single_scale`] at the paper's
    /// [`MULTI_SCALES`].
    pub fn paper_multi_scale() -> Self {
        Self::paper_single_scale().scales(MULTI_SCALES.to_vec())
    }

    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    pub fn base_size(mut self, base_size: Option<usize>) -> Self {
        self.base_size = base_size;
        self
    }

    pub fn mode(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }

    pub fn whole(self) -> Self {
        self.mode(Mode::Whole)
    }

    pub fn sliding(self, crop: i64, stride: i64) -> Self {
        self.mode(Mode::Sliding { crop, stride })
    }

    pub fn flip(mut self, flip: bool) -> Self {
        self.flip = flip;
        self
    }

    pub fn scales(mut self, scales: Vec<f64>) -> Self {
        self.scales = scales;
        self
    }

    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    pub fn progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    /// The protocol in `segtool_core::protocol`'s terms (shared with the runtime).
    pub fn protocol_options(&self) -> ProtocolOptions {
        ProtocolOptions {
            protocol: self.protocol,
            tiling: match self.mode {
                Mode::Whole => Tiling::Whole,
                Mode::Sliding { crop, stride } => Tiling::Sliding {
                    crop: crop.max(0) as usize,
                    stride: stride.max(0) as usize,
                },
            },
            flip: self.flip,
            scales: self.scales.clone(),
            base_size: self.base_size,
            batch_size: self.batch_size,
        }
    }

    /// Rejects options that would leave pixels unpredicted or divide by zero: a stride
    /// above the crop leaves gaps between windows.
    pub fn validate(&self) -> Result<()> {
        if let Mode::Sliding { crop, stride } = self.mode {
            if crop < 1 || stride < 1 {
                bail!("sliding window needs 1 <= stride <= crop, got crop {crop} stride {stride}");
            }
        }
        self.protocol_options()
            .validate()
            .map_err(anyhow::Error::msg)
    }
}

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
/// another engine.
pub fn evaluate(
    model: &DaNet,
    dataset: &dyn SegDataset,
    batch_size: usize,
    device: Device,
    mut on_logits: impl FnMut(usize, &Tensor),
) -> Result<EvalResult> {
    let opts = EvalOptions::new().batch_size(batch_size.max(1));
    run(model, dataset, &opts, device, None, |i, logits, _| {
        on_logits(i, &logits.to_device(Device::Cpu));
        Ok(())
    })
}

/// Evaluates `model` under `opts` on the samples `indices` of `dataset` (all when
/// `None`). A shard's confusion matrix is exactly its share of the whole: matrices of
/// disjoint shards [merged](ConfusionMatrix::merge) equal one run over the union.
/// `on_prediction` sees each sample's index and predicted labels, (H, W) u8 on the CPU.
pub fn evaluate_with(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &EvalOptions,
    device: Device,
    indices: Option<&[usize]>,
    mut on_prediction: impl FnMut(usize, &Tensor) -> Result<()>,
) -> Result<EvalResult> {
    run(model, dataset, opts, device, indices, |i, _, labels| {
        on_prediction(i, labels)
    })
}

/// The dataset loop behind both entry points: `visit(index, logits (K,H,W) on the
/// device, labels (H,W) u8 on the CPU)`.
fn run(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &EvalOptions,
    device: Device,
    indices: Option<&[usize]>,
    visit: impl FnMut(usize, &Tensor, &Tensor) -> Result<()>,
) -> Result<EvalResult> {
    opts.validate()?;
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
    let bar = crate::trainer::progress_bar(order.len() as u64, opts.progress);
    bar.set_prefix("eval ");
    // Whole mode batches images; sliding mode batches the windows of one image.
    let per_forward = match opts.mode {
        Mode::Whole => opts.batch_size,
        Mode::Sliding { .. } => 1,
    };
    let mut group: Vec<(usize, Sample)> = Vec::with_capacity(per_forward);
    for &i in &order {
        let sample = dataset.get(i)?;
        let same_size = group
            .first()
            .is_none_or(|(_, s)| s.image.dimensions() == sample.image.dimensions());
        if group.len() == per_forward || !same_size {
            acc.group(&group)?;
            bar.inc(group.len() as u64);
            group.clear();
        }
        group.push((i, sample));
    }
    acc.group(&group)?;
    bar.finish_and_clear();
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
        let images = images_to_tensor(&images, &self.model.spec, self.device);
        let t0 = Instant::now();
        let logits = sliding::predict(self.model, &images, self.opts);
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
