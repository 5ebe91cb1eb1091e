//! The exported model's self-description: the ONNX IR version that goes with the opset,
//! and the `doc_string` that states the interface in words.

use segtool_model_spec::{ModelSpec, SPEC_METADATA_KEY};

use crate::{ExportOptions, AUX_OUTPUT_NAME, INPUT_NAME, MASK_OUTPUT_NAME, OUTPUT_NAME};

/// The IR version released together with `opset` (ONNX's versioning table), so that
/// checkers and runtimes accept the pair.
pub(crate) fn ir_version_for(opset: i64) -> i64 {
    match opset {
        ..=14 => 7,
        15..=18 => 8,
        19..=20 => 9,
        21..=22 => 10,
        _ => 11,
    }
}

/// The model's `doc_string`: its interface in words, with each deployment variant.
pub(crate) fn doc_string(spec: &ModelSpec, opts: &ExportOptions) -> String {
    let mut s = legacy_doc_string(spec);
    if opts.preprocess {
        s.push_str(
            " With --preprocess the input is instead uint8 [batch, height, width, 3] RGB \
             (normalisation inside the graph).",
        );
    }
    if opts.argmax {
        s.push_str(&format!(
            " With --argmax the output is instead `{MASK_OUTPUT_NAME}` [batch, height, width], \
             the class index per pixel."
        ));
    }
    if opts.aux {
        s.push_str(&format!(
            " With --aux a second output `{AUX_OUTPUT_NAME}` [batch, classes, height, width] \
             holds the auxiliary FCN head's class scores."
        ));
    }
    if opts.fp16 {
        s.push_str(" Weights and compute in fp16, attention energies and softmax in fp32.");
        if !opts.keep_fp32.is_empty() {
            s.push_str(&format!(" Kept in fp32: {}.", opts.keep_fp32.join(", ")));
        }
    }
    s
}

fn legacy_doc_string(spec: &ModelSpec) -> String {
    format!(
        "DANet ({}, output stride {}) semantic segmentation, {} classes, exported by segtool. \
         Input `{INPUT_NAME}`: float32 [batch, 3, height, width], RGB in [0, 1] normalised as \
         (x - mean) / std with mean {:?}, std {:?}. Output `{OUTPUT_NAME}`: float32 \
         [batch, classes, height, width] class scores (argmax over axis 1 gives labels). \
         Model spec JSON in metadata_props[\"{SPEC_METADATA_KEY}\"].",
        spec.backbone_name,
        spec.backbone.output_stride,
        spec.num_classes(),
        spec.mean,
        spec.std
    )
}
