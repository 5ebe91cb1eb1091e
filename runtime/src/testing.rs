//! A tiny ONNX segmentation model for tests and demos.
//!
//! One 1x1 `Conv` maps the normalised RGB input to per-class logits, so expected outputs
//! are easy to compute by hand, yet the file follows the exporter's contract exactly:
//! input `image` f32 `[batch, 3, height, width]`, output `logits` f32
//! `[batch, classes, height, width]`, opset 17, spec JSON under `segtool.spec`. Written
//! with `segtool-onnx`'s messages, so no exporter or Python is needed to test the engines.

use prost::Message;
use segtool_onnx::builders::tensor_f32;
use segtool_onnx::proto::{
    tensor_value_info, DataType, Dim, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto,
};
use segtool_spec::{BackboneSpec, ModelSpec, SPEC_METADATA_KEY};

/// A valid spec with `n` classes named `c0..`, default palette and ImageNet mean/std.
pub fn tiny_spec(n: usize) -> ModelSpec {
    ModelSpec::new(
        "tiny",
        BackboneSpec::tiny(),
        (0..n).map(|i| format!("c{i}")).collect(),
    )
}

/// Encodes the 1x1-conv model: `logits[c] = sum_k weights[c][k] * image[k] + bias[c]`.
/// One class per entry of `weights`; `bias` has the same length.
pub fn tiny_model_bytes(spec: &ModelSpec, weights: &[[f32; 3]], bias: &[f32]) -> Vec<u8> {
    assert_eq!(weights.len(), bias.len(), "one bias per class");
    let classes = weights.len() as i64;
    let w: Vec<f32> = weights.iter().flatten().copied().collect();
    let dims = |c: i64| {
        [
            Dim::Named("batch"),
            Dim::Fixed(c),
            Dim::Named("height"),
            Dim::Named("width"),
        ]
    };
    let graph = GraphProto {
        name: "segtool_tiny".into(),
        node: vec![NodeProto {
            input: vec!["image".into(), "W".into(), "B".into()],
            output: vec!["logits".into()],
            name: "classifier".into(),
            op_type: "Conv".into(),
            ..Default::default()
        }],
        initializer: vec![
            tensor_f32("W", &[classes, 3, 1, 1], &w),
            tensor_f32("B", &[classes], bias),
        ],
        input: vec![tensor_value_info("image", DataType::Float, &dims(3))],
        output: vec![tensor_value_info("logits", DataType::Float, &dims(classes))],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8, // opset 17 era
        producer_name: "segtool-runtime tests".into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        metadata_props: vec![StringStringEntryProto {
            key: SPEC_METADATA_KEY.into(),
            value: spec.to_json(),
        }],
        ..Default::default()
    }
    .encode_to_vec()
}
