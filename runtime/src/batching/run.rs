//! Running one same-size batch: inputs -> normalised tensor -> engine -> masks.
//!
//! The same steps as [`Segmenter::segment_batch`](crate::Segmenter::segment_batch) takes
//! for each size group (normalise, run, check the class count, argmax, resize to the
//! input size), so a batched mask is bit-identical to a `Segmenter` one.

use image::RgbImage;
use ndarray::{s, Array4, ArrayView4, Axis};
use segtool_core::ModelSpec;

use super::Input;
use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::postprocess::{argmax, resize_nearest};
use crate::preprocess::{normalise, normalise_batch};
use crate::Segmentation;

/// Runs an already-normalised `[N, 3, H, W]` batch and decodes it: one [`Segmentation`]
/// per image, its mask resized (nearest) to `sizes[i]` = `(height, width)`.
///
/// Fails with [`RuntimeError::OutputShape`] when the engine answers with another batch
/// size or a class count other than the spec's (or more than 256).
pub fn run_normalised(
    engine: &mut dyn Engine,
    spec: &ModelSpec,
    input: ArrayView4<f32>,
    sizes: &[(usize, usize)],
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    if input.shape()[0] != sizes.len() {
        return Err(RuntimeError::InputShape {
            expected: format!("one output size per image ({} sizes)", sizes.len()),
            got: format!("a batch {:?}", input.shape()),
        });
    }
    let logits = engine.run(input)?;
    let classes = logits.shape()[1];
    if logits.shape()[0] != sizes.len() || classes != spec.num_classes() || classes > 256 {
        return Err(RuntimeError::OutputShape {
            expected: format!(
                "logits [{}, {} classes (from the model's spec, at most 256), H, W]",
                sizes.len(),
                spec.num_classes()
            ),
            got: format!("logits {:?}", logits.shape()),
        });
    }
    Ok(argmax(logits.view())
        .into_iter()
        .zip(sizes)
        .enumerate()
        .map(|(i, (mask, &(h, w)))| Segmentation {
            mask: resize_nearest(mask.view(), h, w),
            logits: keep_logits.then(|| logits.index_axis(Axis(0), i).to_owned()),
        })
        .collect())
}

/// The inputs of one batch, all of one size. All-image batches (the common case) keep
/// the images contiguous so that [`normalise_batch`] fills the tensor in one pass.
pub(crate) enum Inputs {
    Images(Vec<RgbImage>),
    Mixed(Vec<Input>),
}

impl Inputs {
    pub(crate) fn new(inputs: Vec<Input>) -> Self {
        if inputs.iter().all(|i| matches!(i, Input::Image(_))) {
            Inputs::Images(
                inputs
                    .into_iter()
                    .map(|i| match i {
                        Input::Image(img) => img,
                        Input::Tensor(_) => unreachable!("checked above"),
                    })
                    .collect(),
            )
        } else {
            Inputs::Mixed(inputs)
        }
    }

    pub(crate) fn len(&self) -> usize {
        match self {
            Inputs::Images(v) => v.len(),
            Inputs::Mixed(v) => v.len(),
        }
    }

    fn size(&self, i: usize) -> (usize, usize) {
        match self {
            Inputs::Images(v) => (v[i].height() as usize, v[i].width() as usize),
            Inputs::Mixed(v) => v[i].size(),
        }
    }

    /// The normalised tensor of all inputs (`only = None`) or of input `only` alone.
    fn tensor(&self, only: Option<usize>, spec: &ModelSpec) -> Result<Array4<f32>> {
        match (self, only) {
            (Inputs::Images(imgs), None) => normalise_batch(imgs, spec),
            (Inputs::Images(imgs), Some(i)) => Ok(normalise(&imgs[i], spec)),
            (Inputs::Mixed(inputs), _) => {
                let picked: Vec<&Input> = match only {
                    None => inputs.iter().collect(),
                    Some(i) => vec![&inputs[i]],
                };
                let (h, w) = picked[0].size();
                let mut out = Array4::zeros((picked.len(), 3, h, w));
                for (input, mut slot) in picked.into_iter().zip(out.outer_iter_mut()) {
                    if input.size() != (h, w) {
                        return Err(RuntimeError::InputShape {
                            expected: format!("every input of a batch {w}x{h}"),
                            got: format!("{}x{}", input.size().1, input.size().0),
                        });
                    }
                    match input {
                        Input::Image(img) => {
                            slot.assign(&normalise(img, spec).slice(s![0, .., .., ..]))
                        }
                        Input::Tensor(t) => slot.assign(t),
                    }
                }
                Ok(out)
            }
        }
    }

    /// Runs all inputs as one batch (`only = None`) or input `only` alone.
    pub(crate) fn run(
        &self,
        only: Option<usize>,
        engine: &mut dyn Engine,
        spec: &ModelSpec,
        keep_logits: bool,
    ) -> Result<Vec<Segmentation>> {
        let tensor = self.tensor(only, spec)?;
        let sizes: Vec<(usize, usize)> = match only {
            None => (0..self.len()).map(|i| self.size(i)).collect(),
            Some(i) => vec![self.size(i)],
        };
        run_normalised(engine, spec, tensor.view(), &sizes, keep_logits)
    }
}
