//! How calibration images become a model's input, and its output a decision per pixel.
//!
//! A segtool export says both in its spec (`segtool.spec`): RGB normalised as it was
//! trained, logits out. A model from elsewhere says them in its card (see
//! `segtool_runtime::card`): the card's resize, channel order, scale, mean, std and
//! padding ([`segtool_runtime::card::pipeline::prepare`], the same code `infer` runs), and
//! the card's output: argmax of scores, or a binary map above its threshold.
//!
//! Accepts cards with a float32 NCHW input and a float output (logits, probabilities or a
//! binary probability map). Refuses uint8 inputs (the graph normalises them itself: there
//! is no float input to calibrate against) and class-map outputs (an in-graph argmax
//! leaves nothing to measure agreement on), each with the reason.

use image::RgbImage;
use ndarray::{Array4, ArrayD};
use segtool_model_spec::ModelSpec;
use segtool_onnx::proto::ModelProto;
use segtool_runtime::card::{pipeline, Dtype, Layout, ModelCard, OutputKind};
use segtool_runtime::expert::EngineTensor;

use crate::{model_spec, CalibrationError};

/// A model's input preparation and output decision.
#[derive(Clone, Debug)]
pub enum Feed {
    /// A segtool export's spec.
    Spec(ModelSpec),
    /// The card of a model from elsewhere.
    Card(ModelCard),
}

impl Feed {
    /// `model`'s own spec, or `card` when given (a model from elsewhere).
    pub fn of_model(
        model: &ModelProto,
        card: Option<&ModelCard>,
    ) -> Result<Self, CalibrationError> {
        match card {
            None => model_spec(model).map(Feed::Spec).map_err(|e| {
                CalibrationError::Model(format!(
                    "{e}; a model from elsewhere needs its card (a sidecar MODEL.segtool.toml, \
                     --card FILE or the card flags: see `segtool card --help`)"
                ))
            }),
            Some(card) => Self::card(card.clone()),
        }
    }

    /// The feed of a card, refusing what calibration cannot measure (module docs).
    pub fn card(card: ModelCard) -> Result<Self, CalibrationError> {
        let i = &card.input;
        if (i.dtype, i.layout) != (Dtype::Float32, Layout::Nchw) {
            return Err(CalibrationError::Model(format!(
                "the card's input {:?} is {:?} {:?}: calibration needs a float32 NCHW input \
                 (a uint8 input is normalised inside the graph)",
                i.name, i.dtype, i.layout
            )));
        }
        if card.output.kind == OutputKind::MaskClassification {
            return Err(CalibrationError::Model(format!(
                "the card's output {:?} is a mask-classification head: calibration measures \
                 agreement on per-class scores; calibrate the copy with the head appended \
                 (segtool_runtime::card::mask_head::bake, as `segtool calibrate` does)",
                card.output.name
            )));
        }
        if card.output.kind == OutputKind::ClassMap {
            return Err(CalibrationError::Model(format!(
                "the card's output {:?} is a class map: calibration measures agreement on \
                 float scores; point output.name at the scores before the graph's ArgMax",
                card.output.name
            )));
        }
        Ok(Feed::Card(card))
    }

    /// Number of classes a decision can take.
    pub fn classes(&self) -> usize {
        match self {
            Feed::Spec(spec) => spec.classes.len(),
            Feed::Card(card) => card.num_classes(),
        }
    }

    /// The card's `(input, output)` names (`None`: the graph's first of each).
    pub fn io_names(&self) -> Option<(&str, &str)> {
        match self {
            Feed::Spec(_) => None,
            Feed::Card(card) => Some((&card.input.name, &card.output.name)),
        }
    }

    /// The graph output the decision is read from (`None`: the graph's first).
    pub fn output(&self) -> Option<&str> {
        match self {
            Feed::Spec(_) => None,
            Feed::Card(card) => Some(&card.output.name),
        }
    }

    /// The input tensor `[1, C, H, W]` of one image.
    pub fn tensor(&self, img: &RgbImage) -> Result<Array4<f32>, CalibrationError> {
        match self {
            Feed::Spec(spec) => Ok(segtool_runtime::expert::normalise(img, spec)),
            Feed::Card(card) => {
                let (t, _) = pipeline::prepare(std::slice::from_ref(img), card)
                    .map_err(|e| CalibrationError::Input(e.to_string()))?;
                match t {
                    EngineTensor::NchwF32(x) => Ok(x),
                    other => Err(CalibrationError::Input(format!(
                        "the card prepared {other:?}, not a float32 NCHW tensor"
                    ))),
                }
            }
        }
    }

    /// One decision per output pixel, image-major: the argmax over channels, or for a
    /// binary card 1 where the probability is above its threshold. At the output's own
    /// resolution (agreement of two models needs no upsampling).
    pub fn decisions(&self, out: &ArrayD<f32>) -> Vec<u8> {
        match self {
            Feed::Card(card) if card.output.kind == OutputKind::Binary => {
                let t = card.output.threshold.unwrap_or(0.5);
                out.iter().map(|&p| u8::from(p > t)).collect()
            }
            _ => argmax_classes(out),
        }
    }
}

/// `[N, C, H, W]` scores -> N*H*W class indices, image-major.
fn argmax_classes(logits: &ArrayD<f32>) -> Vec<u8> {
    let s = logits.shape();
    let (n, c, hw) = (s[0], s[1], s[2..].iter().product::<usize>());
    let v = logits.as_slice().expect("standard layout");
    let mut out = Vec::with_capacity(n * hw);
    for i in 0..n {
        for p in 0..hw {
            let mut best = (f32::NEG_INFINITY, 0u8);
            for k in 0..c {
                let x = v[(i * c + k) * hw + p];
                if x > best.0 {
                    best = (x, k as u8);
                }
            }
            out.push(best.1);
        }
    }
    out
}
