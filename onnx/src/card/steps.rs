//! The card's steps beyond a plain resize, as transformers' image processors and their
//! `post_process_semantic_segmentation` take them: the resampling kernel, a resize by the
//! shortest (and longest) edge, DPT's aspect-keeping resize to a multiple, a centre crop,
//! padding to a fixed size, and how the output comes back to the image ([`Restore`]);
//! and the mask-classification head of MaskFormer, Mask2Former and OneFormer. The fields
//! themselves are [`InputCard`]'s and [`super::OutputCard`]'s; this module holds their
//! types and their consistency check.

use serde::{Deserialize, Serialize};

use super::{Fit, InputCard, ModelCard, OutputKind, ResizeFilter, MAX_INPUT_SIDE};

/// The interpolation kernel of every resize of the input (`resample` in an image
/// processor: 0 nearest, 2 bilinear, 3 bicubic, 1 lanczos).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Resample {
    /// Nearest neighbour (torch's `nearest`, or Pillow's).
    Nearest,
    /// Bilinear (antialiased with the torchvision and Pillow filters).
    #[default]
    Bilinear,
    /// Bicubic, antialiased, `a = -0.5` (torchvision and Pillow filters only).
    Bicubic,
    /// Lanczos-3, antialiased (torchvision and Pillow filters only).
    Lanczos,
}

impl Resample {
    /// The serialised name.
    pub fn name(self) -> &'static str {
        match self {
            Resample::Nearest => "nearest",
            Resample::Bilinear => "bilinear",
            Resample::Bicubic => "bicubic",
            Resample::Lanczos => "lanczos",
        }
    }
}

/// How the model's scores come back to the image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Restore {
    /// Undo the input's geometry: padding is cropped off, the rest resized to the image.
    #[default]
    Undo,
    /// The whole output is resized to the image, padding and crop included, as
    /// transformers' `post_process_semantic_segmentation` does (it knows nothing of the
    /// preprocessing).
    Stretch,
    /// As `stretch`, with torchvision's antialiased bilinear resize (OneFormer's
    /// post-processing resizes with `F.resize`, antialiased when it shrinks).
    #[serde(rename = "stretch_antialias")]
    StretchAntialias,
}

pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

/// The steps' own consistency, for [`ModelCard::check_self`].
pub(super) fn check(card: &ModelCard) -> Result<(), String> {
    let i: &InputCard = &card.input;
    let s = i;
    let positive = [
        ("input.shortest_edge", s.shortest_edge),
        ("input.longest_edge", s.longest_edge),
        ("input.ensure_multiple_of", s.ensure_multiple_of),
    ];
    for (key, v) in positive {
        match v {
            Some(0) => return Err(format!("{key} must be at least 1")),
            Some(v) if v > MAX_INPUT_SIDE => {
                return Err(format!(
                    "{key} asks for a side of {v} pixels, over the {MAX_INPUT_SIDE} accepted"
                ))
            }
            _ => {}
        }
    }
    for (key, pair) in [
        ("input.center_crop", s.center_crop),
        ("input.pad_size", s.pad_size),
        ("output.mask_size", card.output.mask_size),
    ] {
        match pair {
            Some([h, w]) if h == 0 || w == 0 => {
                return Err(format!(
                    "{key} must be two positive numbers [height, width]"
                ))
            }
            Some([h, w]) if h.max(w) > MAX_INPUT_SIDE => {
                return Err(format!(
                    "{key} asks for a side of {} pixels, over the {MAX_INPUT_SIDE} accepted",
                    h.max(w)
                ))
            }
            _ => {}
        }
    }
    if s.longest_edge.is_some() && s.shortest_edge.is_none() {
        return Err("input.longest_edge bounds input.shortest_edge's resize: give both".into());
    }
    if (s.keep_aspect_ratio || s.ensure_multiple_of.is_some()) && i.size.is_none() {
        return Err(
            "input.keep_aspect_ratio and input.ensure_multiple_of shape input.size's resize \
             (DPT): give input.size"
                .into(),
        );
    }
    if i.resize_filter == ResizeFilter::Opencv && s.resample != Resample::Bilinear {
        return Err(format!(
            "input.resample {} needs input.resize_filter torchvision or pillow (the opencv \
             filter is bilinear only)",
            s.resample.name()
        ));
    }
    let undo = card.output.restore == Restore::Undo;
    if s.center_crop.is_some() && undo {
        return Err(
            "input.center_crop leaves the image's border unseen, so the output cannot be \
             mapped back onto it: only output.restore = \"stretch\" (transformers' \
             post-processing) is defined"
                .into(),
        );
    }
    if matches!(i.fit, Fit::ResizeUp | Fit::PadCentre) && i.size_divisor.is_none() {
        return Err(format!(
            "input.fit {} rounds to input.size_divisor: give it",
            i.fit.name()
        ));
    }
    let mask = card.output.kind == OutputKind::MaskClassification;
    match (mask, &card.output.class_output) {
        (true, None) => Err(
            "output.kind mask_classification needs output.class_output (the class logits \
             [N, Q, K + 1]; output.name is the mask logits [N, Q, h, w])"
                .into(),
        ),
        (false, Some(_)) => Err("output.class_output applies to kind mask_classification".into()),
        (false, None) if card.output.mask_size.is_some() => {
            Err("output.mask_size applies to kind mask_classification".into())
        }
        _ => Ok(()),
    }
}
