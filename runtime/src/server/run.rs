//! Running one batch of the batch server: images through the pipeline's stages
//! ([`crate::pipeline`], as a `Segmenter` runs them, so a batched mask is bit-identical to
//! a `Segmenter` one), tensors normalised already straight to the engine.

use image::RgbImage;
use ndarray::{s, Array4, ArrayView4};
use segtool_model_spec::ModelSpec;

use super::Input;
use crate::card::pipeline::{self as card_pipeline, Geometry};
use crate::card::{ChannelOrder, Dtype, Layout, ModelCard};
use crate::engines::contract_adapter::ContractAdapter;
use crate::engines::Engine;
use crate::error::{Result, RuntimeError};
use crate::engines::io_contract::EngineInput;
use crate::segmentation::Segmentation;
use crate::pipeline::Preparer;
use crate::normalise::normalise;

/// Runs an already-normalised `[N, 3, H, W]` batch (normalised with `spec`: RGB pixels
/// as the spec normalises them) on a model `card` takes it for, and decodes it.
fn run_normalised(
    engine: &mut dyn Engine,
    card: &ModelCard,
    spec: &ModelSpec,
    input: ArrayView4<f32>,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    let (n, _, h, w) = input.dim();
    let i = &card.input;
    let geometry = Geometry::of(card, (h, w));
    let as_it_is = geometry.is_identity() && i.channels == ChannelOrder::Rgb && i.mean.len() == 3;
    let out = match (i.dtype, i.layout) {
        (Dtype::Float32, Layout::Nchw) if as_it_is => engine.run(EngineInput::NchwF32(input))?,
        // A tensor handed in as a tensor: back to the pixels it was normalised from.
        (Dtype::Uint8, Layout::Nhwc) if as_it_is => {
            let pixels = ContractAdapter::pixels(input, spec);
            engine.run(EngineInput::NhwcU8(pixels.view()))?
        }
        _ => {
            return Err(RuntimeError::InputShape {
                expected: format!(
                    "images: the model's card prepares a {w}x{h} input itself (its resize, \
                     crop, padding or channels)"
                ),
                got: "a normalised tensor".into(),
            })
        }
    };
    card_pipeline::check_output(&out, n, card)?;
    card_pipeline::decode_checked(out, card, geometry, keep_logits)
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
    /// straight to the engine (where the card takes the image as it is).
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
            Inputs::Mixed(inputs) => {
                let plan = preparer.plan();
                let tensor = Self::mixed_tensor(inputs, only, &plan.spec)?;
                run_normalised(
                    engine,
                    &plan.card,
                    &plan.spec,
                    tensor.view(),
                    plan.keep_logits,
                )
            }
        }
    }
}
