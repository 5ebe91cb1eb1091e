//! After the graph: its answer checked against the card, then one class map per image
//! at the image's size (see the module docs of [`super`]).

use ndarray::{s, Array4, Axis};
use segtool_model_spec::protocol::antialias::resize_antialias_f32;
use segtool_onnx::card::{ModelCard, OutputKind, Restore};

use super::Geometry;
use crate::engines::io_contract::EngineOutput;
use crate::error::{Result, RuntimeError};
use crate::segmentation::class_map::ClassMap;
use crate::segmentation::postprocess::{argmax, resize_bilinear, resize_nearest};
use crate::segmentation::Segmentation;

/// Checks the graph's answer for `n` images against `card`: the batch size, and its
/// classes (as many score channels, one for a binary map; a class map's values below
/// them).
pub fn check_output(output: &EngineOutput, n: usize, card: &ModelCard) -> Result<()> {
    let classes = card.num_classes();
    let wrong = |expected: String| RuntimeError::OutputShape {
        expected,
        got: match output {
            EngineOutput::Logits(l) => format!("float scores {:?}", l.shape()),
            EngineOutput::Mask(m) => format!("a class map {:?}", m.shape()),
        },
    };
    if output.len() != n {
        return Err(wrong(format!("one answer per image ({n})")));
    }
    match (card.output.kind, output) {
        (OutputKind::Binary, EngineOutput::Logits(p)) if p.dim().1 != 1 => Err(wrong(
            "one probability channel [N, 1, h, w] (kind binary)".into(),
        )),
        (OutputKind::Binary, _) => Ok(()),
        (_, EngineOutput::Logits(l)) if l.dim().1 != classes => Err(wrong(format!(
            "{classes} class channels (the card's classes)"
        ))),
        (_, EngineOutput::Mask(m)) if m.iter().any(|&c| usize::from(c) >= classes) => Err(wrong(
            format!("class values below {classes} (the card's classes)"),
        )),
        _ => Ok(()),
    }
}

/// One [`Segmentation`] per image from the graph's `output` under `card`, checked first
/// ([`check_output`]).
pub fn decode(
    output: EngineOutput,
    card: &ModelCard,
    geom: Geometry,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    check_output(&output, output.len(), card)?;
    decode_checked(output, card, geom, keep_logits)
}

/// [`decode`] of an output [`check_output`] has passed.
pub(crate) fn decode_checked(
    output: EngineOutput,
    card: &ModelCard,
    geom: Geometry,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    let (h, w) = geom.image;
    let classes = card.num_classes();
    match (card.output.kind, output) {
        (OutputKind::ClassMap, EngineOutput::Mask(m)) => m
            .outer_iter()
            .map(|plane| {
                let (oy, ox) = geom.offset;
                let plane = match card.output.restore {
                    Restore::Stretch | Restore::StretchAntialias => plane,
                    Restore::Undo => plane.slice_move(s![
                        oy.min(plane.dim().0)..(oy + geom.content.0).min(plane.dim().0),
                        ox.min(plane.dim().1)..(ox + geom.content.1).min(plane.dim().1)
                    ]),
                };
                let mask = ClassMap::with_classes(resize_nearest(plane, h, w), classes)
                    .ok_or_else(|| RuntimeError::OutputShape {
                        expected: format!("class ids below {classes} (the card's classes)"),
                        got: "a larger class id".into(),
                    })?;
                Ok(Segmentation::new(mask, None))
            })
            .collect(),
        // A mask-classification head arrives as its semantic scores (card::mask_head).
        (
            OutputKind::Logits | OutputKind::Probabilities | OutputKind::MaskClassification,
            EngineOutput::Logits(l),
        ) => {
            let scores = to_image(l, card, geom);
            let masks = argmax(scores.view());
            Ok(masks
                .into_iter()
                .zip(scores.outer_iter())
                .map(|(mask, s)| Segmentation::new(mask, keep_logits.then(|| s.to_owned())))
                .collect())
        }
        (OutputKind::Binary, EngineOutput::Logits(p)) => {
            let t = card
                .output
                .threshold
                .expect("checked: binary has a threshold");
            let probs = to_image(p, card, geom);
            Ok(probs
                .outer_iter()
                .map(|plane| {
                    let mask = plane.index_axis(Axis(0), 0).mapv(|v| u8::from(v > t));
                    Segmentation::new(mask, keep_logits.then(|| plane.to_owned()))
                })
                .collect())
        }
        (kind, out) => Err(RuntimeError::OutputShape {
            expected: format!("the card's output kind {kind}"),
            got: match out {
                EngineOutput::Logits(l) => format!("float scores {:?}", l.shape()),
                EngineOutput::Mask(m) => format!("a class map {:?}", m.shape()),
            },
        }),
    }
}

/// Scores `[N, K, h, w]` at the image's size (see the module docs).
fn to_image(scores: Array4<f32>, card: &ModelCard, geom: Geometry) -> Array4<f32> {
    let ac = card.output.align_corners;
    let (h, w) = geom.image;
    let undo_padding = card.output.restore == Restore::Undo && geom.padded();
    if (scores.dim().2, scores.dim().3) == (h, w) && !undo_padding {
        // Already the image's size (the graph's input was the image): no copy.
        return scores;
    }
    match card.output.restore {
        Restore::StretchAntialias => return resize_antialias(scores, (h, w)),
        Restore::Stretch => return resize_bilinear(scores.view(), h, w, ac),
        Restore::Undo if !geom.padded() => return resize_bilinear(scores.view(), h, w, ac),
        Restore::Undo => {}
    }
    let (th, tw) = geom.tensor;
    let (ch, cw) = geom.content;
    let (oy, ox) = geom.offset;
    let full = resize_bilinear(scores.view(), th, tw, ac);
    let cropped = full.slice(s![.., .., oy..oy + ch, ox..ox + cw]);
    resize_bilinear(cropped, h, w, ac)
}

/// `[N, K, h, w]` scores resized to `(h, w)` with torchvision's antialiased bilinear.
fn resize_antialias(scores: Array4<f32>, (h, w): (usize, usize)) -> Array4<f32> {
    let (n, k, sh, sw) = scores.dim();
    if (sh, sw) == (h, w) {
        return scores;
    }
    let flat = scores.as_standard_layout();
    let src = flat.as_slice().expect("standard layout");
    let out = resize_antialias_f32(src, n * k, (sh, sw), (h, w));
    Array4::from_shape_vec((n, k, h, w), out).expect("sized")
}
