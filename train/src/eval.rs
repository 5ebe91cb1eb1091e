//! Evaluation: mIoU over a dataset with the fused output, accumulated over all images.

use std::time::Instant;

use anyhow::Result;
use segtool_core::dataset::SegDataset;
use segtool_core::{ConfusionMatrix, IGNORE_LABEL};
use tch::{Device, Kind, Tensor};

use crate::data::images_to_tensor;
use crate::model::DaNet;

pub struct EvalResult {
    pub confusion: ConfusionMatrix,
    pub seconds: f64,
    pub images: usize,
}

/// Fused logits (N, K, H, W) for same-size images, eval mode, no grad.
pub fn predict_logits(model: &DaNet, images: &Tensor) -> Tensor {
    tch::no_grad(|| model.forward_all(images, false).fused)
}

/// Evaluates `model` on every sample of `dataset`, `batch_size` images at a time
/// (consecutive samples must share a size within a batch). `on_logits` sees each
/// sample's logits (K, H, W) on the CPU, e.g. to compare against another engine.
pub fn evaluate(
    model: &DaNet,
    dataset: &dyn SegDataset,
    batch_size: usize,
    device: Device,
    mut on_logits: impl FnMut(usize, &Tensor),
) -> Result<EvalResult> {
    let mut confusion = ConfusionMatrix::new(model.spec.num_classes());
    let mut seconds = 0.0;
    let bar = crate::trainer::progress_bar(dataset.len() as u64, true);
    bar.set_prefix("eval tch ");
    for start in (0..dataset.len()).step_by(batch_size.max(1)) {
        let end = (start + batch_size).min(dataset.len());
        let samples = (start..end)
            .map(|i| dataset.get(i))
            .collect::<Result<Vec<_>, _>>()?;
        let images = images_to_tensor(
            &samples.iter().map(|s| &s.image).collect::<Vec<_>>(),
            &model.spec,
            device,
        );
        let t0 = Instant::now();
        let logits = predict_logits(model, &images).to_device(Device::Cpu);
        let prediction = logits.argmax(1, false).to_kind(Kind::Uint8);
        seconds += t0.elapsed().as_secs_f64();
        for (k, sample) in samples.iter().enumerate() {
            let pred = Vec::<u8>::try_from(&prediction.get(k as i64).contiguous().view(-1))?;
            confusion.update(sample.mask.as_raw(), &pred, IGNORE_LABEL);
            on_logits(start + k, &logits.get(k as i64));
        }
        bar.inc((end - start) as u64);
    }
    bar.finish_and_clear();
    Ok(EvalResult {
        confusion,
        seconds,
        images: dataset.len(),
    })
}
