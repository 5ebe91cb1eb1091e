//! Mask-classification heads (MaskFormer, Mask2Former, OneFormer) served as per-class
//! scores, so that every engine and front end drives them like any score map.
//!
//! Such a graph answers class logits `[N, Q, K + 1]` (the last class "no object") and mask
//! logits `[N, Q, h, w]`. transformers' `post_process_semantic_segmentation` makes the
//! semantic scores `einsum("bqc,bqhw->bchw", softmax(class)[..., :-1], sigmoid(masks))`,
//! Mask2Former's after resizing the mask logits to 384 x 384 (bilinear,
//! `align_corners=False`), then resizes them to the image and takes the argmax. Here the
//! same operators are appended to a copy of the graph (`Shape`/`Slice`/`Concat`/`Resize`
//! for the mask size, `Sigmoid`, `Softmax`, `Slice`, `Einsum`), whose extra output
//! [`SCORES_OUTPUT`] the engine reads: one file, whichever engine runs it, with the
//! original outputs untouched.
//!
//! Accepts graphs that import the default opset 12 or later (`Einsum`); refuses older ones
//! by name. The copy is cached in the system's temporary folder, keyed by the model's path,
//! size, modification time and the card's head fields, and written atomically.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use segtool_onnx::builders::{attr_int, attr_string, float_output, tensor_f32, tensor_i64};
use segtool_onnx::proto::{GraphProto, NodeProto};

use super::{ModelCard, OutputKind};
use crate::error::{Result, RuntimeError};

/// The appended output: semantic scores `[N, K, h, w]`.
pub const SCORES_OUTPUT: &str = "segtool_mask_head/semantic_scores";

/// The opset `Einsum` appeared in.
const MIN_OPSET: i64 = 12;

fn node(
    op: &str,
    inputs: &[&str],
    output: &str,
    attrs: Vec<segtool_onnx::proto::AttributeProto>,
) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.to_string()],
        name: output.to_string(),
        op_type: op.into(),
        attribute: attrs,
        ..Default::default()
    }
}

/// The nodes, constants and output that turn `card`'s head into [`SCORES_OUTPUT`], for a
/// graph of default opset `opset` (before 13, `Resize` takes its `roi` and `scales` as
/// empty tensors; from 13 on they are left out).
pub fn head_graph(card: &ModelCard, opset: i64) -> GraphProto {
    let o = &card.output;
    let class_logits = o.class_output.as_deref().unwrap_or_default();
    let n = |s: &str| format!("segtool_mask_head/{s}");
    let mut g = GraphProto::default();
    let mut masks = o.name.clone();
    if let Some([h, w]) = o.mask_size {
        g.initializer.extend([
            tensor_i64(n("zero"), &[1], &[0]),
            tensor_i64(n("two"), &[1], &[2]),
            tensor_i64(n("mask_hw"), &[2], &[h as i64, w as i64]),
        ]);
        let empty = if opset < 13 {
            g.initializer.push(tensor_f32(n("empty"), &[0], &[]));
            n("empty")
        } else {
            String::new()
        };
        g.node.extend([
            node("Shape", &[&masks], &n("shape"), vec![]),
            node(
                "Slice",
                &[&n("shape"), &n("zero"), &n("two")],
                &n("nq"),
                vec![],
            ),
            node(
                "Concat",
                &[&n("nq"), &n("mask_hw")],
                &n("sizes"),
                vec![attr_int("axis", 0)],
            ),
            node(
                "Resize",
                &[&masks, &empty, &empty, &n("sizes")],
                &n("masks_resized"),
                vec![
                    attr_string("mode", "linear"),
                    attr_string("coordinate_transformation_mode", "half_pixel"),
                ],
            ),
        ]);
        masks = n("masks_resized");
    }
    g.initializer.extend([
        tensor_i64(n("start"), &[1], &[0]),
        tensor_i64(n("end"), &[1], &[-1]),
        tensor_i64(n("axis"), &[1], &[2]),
    ]);
    g.node.extend([
        node("Sigmoid", &[&masks], &n("mask_probs"), vec![]),
        node(
            "Softmax",
            &[class_logits],
            &n("class_probs"),
            vec![attr_int("axis", -1)],
        ),
        node(
            "Slice",
            &[&n("class_probs"), &n("start"), &n("end"), &n("axis")],
            &n("class_kept"),
            vec![],
        ),
        node(
            "Einsum",
            &[&n("class_kept"), &n("mask_probs")],
            SCORES_OUTPUT,
            vec![attr_string("equation", "bqc,bqhw->bchw")],
        ),
    ]);
    g.output.push(float_output(SCORES_OUTPUT));
    g
}

/// The file an engine runs for `model` under `card`: `model` itself, or for a
/// mask-classification head the cached copy with [`SCORES_OUTPUT`] (module docs).
pub fn served_model(model: &Path, card: &ModelCard) -> Result<PathBuf> {
    if card.output.kind != OutputKind::MaskClassification {
        return Ok(model.to_path_buf());
    }
    let refuse = |message: String| RuntimeError::Card {
        path: model.to_path_buf(),
        message,
    };
    let opset = match segtool_onnx::default_opset(model)? {
        Some(v) if v >= MIN_OPSET => v,
        v => {
            return Err(refuse(format!(
                "a mask-classification head is combined with Einsum (opset {MIN_OPSET}); the \
                 model imports opset {}: export it with opset {MIN_OPSET} or later",
                v.map_or("none".to_string(), |v| v.to_string())
            )))
        }
    };
    let meta = std::fs::metadata(model).map_err(|e| refuse(format!("cannot read it: {e}")))?;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    std::fs::canonicalize(model)
        .unwrap_or_else(|_| model.to_path_buf())
        .hash(&mut hasher);
    meta.len().hash(&mut hasher);
    meta.modified().ok().hash(&mut hasher);
    (
        &card.output.name,
        &card.output.class_output,
        card.output.mask_size,
    )
        .hash(&mut hasher);
    let dir = std::env::temp_dir().join("segtool-mask-heads");
    std::fs::create_dir_all(&dir).map_err(|e| {
        refuse(format!(
            "cannot create the cache folder {}: {e}",
            dir.display()
        ))
    })?;
    let stem = model
        .file_stem()
        .map_or("model".into(), |s| s.to_string_lossy());
    let served = dir.join(format!("{stem}-{:016x}.onnx", hasher.finish()));
    if !served.is_file() {
        segtool_onnx::copy_with_graph_additions(model, &served, &head_graph(card, opset))?;
    }
    Ok(served)
}

/// A mask-classification head made an ordinary score map: [`served_model`]'s copy and the
/// card that reads [`SCORES_OUTPUT`] as per-class scores (`probabilities`, the same
/// argmax and restore). Calibration and `compare` work on this pair, so an INT8 file holds
/// the head in its graph and a card any engine serves without appending it again. Any
/// other card comes back as it is, with `model`.
pub fn bake(model: &Path, card: &ModelCard) -> Result<(PathBuf, ModelCard)> {
    if card.output.kind != OutputKind::MaskClassification {
        return Ok((model.to_path_buf(), card.clone()));
    }
    let served = served_model(model, card)?;
    let mut baked = card.clone();
    baked.output.name = SCORES_OUTPUT.to_string();
    baked.output.kind = OutputKind::Probabilities;
    baked.output.class_output = None;
    baked.output.mask_size = None;
    Ok((served, baked))
}
