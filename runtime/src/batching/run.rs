//! Running one batch of the batch server: images through the pipeline's stages
//! ([`crate::pipeline`], as a `Segmenter` runs them, so a batched mask is bit-identical to
//! a `Segmenter` one), tensors normalised already straight to the engine.

use image::RgbImage;
use ndarray::{s, Array4, ArrayView4};
use segtool_model_spec::ModelSpec;

use super::Input;
use crate::contract_adapter::ContractAdapter;
use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::io_contract::Segmentation;
use crate::io_contract::{EngineInput, InputLayout, IoContract};
use crate::pipeline::{decode, Preparer};
use crate::preprocess::normalise;

/// Runs an already-normalised `[N, 3, H, W]` batch on a model of `contract` and decodes
/// it (see [`Segmenter::run_normalised`](crate::Segmenter::run_normalised)).
pub(crate) fn run_normalised(
    engine: &mut dyn Engine,
    contract: IoContract,
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
    let out = match contract.input {
        InputLayout::NchwF32 => engine.run(EngineInput::NchwF32(input))?,
        // A tensor handed in as a tensor: back to the pixels it was normalised from.
        InputLayout::NhwcU8 => {
            let pixels = ContractAdapter::pixels(input, spec);
            engine.run(EngineInput::NhwcU8(pixels.view()))?
        }
    };
    decode(out, spec, sizes, keep_logits)
}

/// The inputs of one batch, all of one size. All-image batches (the common case) keep
/// the images contiguous, so that [`EngineTensor::from_images`] builds the model's input
/// in one pass, as for a `Segmenter`.
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

    /// The normalised tensor of mixed image and tensor inputs (all of them, or input
    /// `only` alone).
    fn mixed_tensor(
        inputs: &[Input],
        only: Option<usize>,
        spec: &ModelSpec,
    ) -> Result<Array4<f32>> {
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
                Input::Image(img) => slot.assign(&normalise(img, spec).slice(s![0, .., .., ..])),
                Input::Tensor(t) => slot.assign(t),
            }
        }
        Ok(out)
    }

    /// Runs all inputs as one batch (`only = None`) or input `only` alone: images through
    /// the pipeline's stages (as a `Segmenter` runs them), tensors normalised already
    /// straight to the engine (a segtool export only).
    pub(crate) fn run(
        &self,
        only: Option<usize>,
        engine: &mut dyn Engine,
        preparer: &Preparer,
    ) -> Result<Vec<Segmentation>> {
        match self {
            Inputs::Images(imgs) => {
                let imgs = match only {
                    None => &imgs[..],
                    Some(i) => std::slice::from_ref(&imgs[i]),
                };
                preparer.prepare(imgs)?.run(engine)?.decode()
            }
            Inputs::Mixed(_) if preparer.plan().card.is_some() => Err(RuntimeError::InputShape {
                expected: "images: a model driven by its card prepares its own input".into(),
                got: "a normalised tensor".into(),
            }),
            Inputs::Mixed(inputs) => {
                let plan = preparer.plan();
                let sizes: Vec<(usize, usize)> = match only {
                    None => (0..self.len()).map(|i| self.size(i)).collect(),
                    Some(i) => vec![self.size(i)],
                };
                let tensor = Self::mixed_tensor(inputs, only, &plan.spec)?;
                let keep = plan.keep_logits;
                run_normalised(
                    engine,
                    plan.contract,
                    &plan.spec,
                    tensor.view(),
                    &sizes,
                    keep,
                )
            }
        }
    }
}
