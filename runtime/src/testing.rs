//! A tiny, hand-encoded ONNX segmentation model for tests and demos.
//!
//! One 1x1 `Conv` maps the normalised RGB input to per-class logits, so expected outputs
//! are easy to compute by hand, yet the file follows the exporter's contract exactly:
//! input `image` f32 `[batch, 3, height, width]`, output `logits` f32
//! `[batch, classes, height, width]`, opset 17, spec JSON under `segtool.spec`. It is
//! written with a few lines of protobuf encoding so that no exporter, Python or prost is
//! needed to test the engines.

use segtool_core::{BackboneSpec, ModelSpec, SPEC_METADATA_KEY};

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
    let classes = weights.len() as u64;
    let w: Vec<f32> = weights.iter().flatten().copied().collect();

    let mut graph = Vec::new();
    let mut node = Vec::new();
    for input in ["image", "W", "B"] {
        bytes(&mut node, 1, input.as_bytes());
    }
    bytes(&mut node, 2, b"logits");
    bytes(&mut node, 3, b"classifier");
    bytes(&mut node, 4, b"Conv");
    bytes(&mut graph, 1, &node);
    bytes(&mut graph, 2, b"segtool_tiny");
    bytes(&mut graph, 5, &tensor("W", &[classes, 3, 1, 1], &w));
    bytes(&mut graph, 5, &tensor("B", &[classes], bias));
    let dims = |c: Dim| {
        [
            Dim::Param("batch"),
            c,
            Dim::Param("height"),
            Dim::Param("width"),
        ]
    };
    bytes(&mut graph, 11, &value_info("image", &dims(Dim::Value(3))));
    bytes(
        &mut graph,
        12,
        &value_info("logits", &dims(Dim::Value(classes))),
    );

    let mut model = Vec::new();
    varint_field(&mut model, 1, 8); // ir_version 8 (opset 17 era)
    bytes(&mut model, 2, b"segtool-runtime tests");
    bytes(&mut model, 7, &graph);
    let mut opset = Vec::new();
    bytes(&mut opset, 1, b"");
    varint_field(&mut opset, 2, 17);
    bytes(&mut model, 8, &opset);
    let mut entry = Vec::new();
    bytes(&mut entry, 1, SPEC_METADATA_KEY.as_bytes());
    bytes(&mut entry, 2, spec.to_json().as_bytes());
    bytes(&mut model, 14, &entry);
    model
}

enum Dim {
    Value(u64),
    Param(&'static str),
}

fn tensor(name: &str, dims: &[u64], data: &[f32]) -> Vec<u8> {
    let mut t = Vec::new();
    for &d in dims {
        varint_field(&mut t, 1, d);
    }
    varint_field(&mut t, 2, 1); // FLOAT
    bytes(&mut t, 8, name.as_bytes());
    let raw: Vec<u8> = data.iter().flat_map(|v| v.to_le_bytes()).collect();
    bytes(&mut t, 9, &raw);
    t
}

fn value_info(name: &str, dims: &[Dim]) -> Vec<u8> {
    let mut shape = Vec::new();
    for d in dims {
        let mut dim = Vec::new();
        match d {
            Dim::Value(v) => varint_field(&mut dim, 1, *v),
            Dim::Param(p) => bytes(&mut dim, 2, p.as_bytes()),
        }
        bytes(&mut shape, 1, &dim);
    }
    let mut tensor_type = Vec::new();
    varint_field(&mut tensor_type, 1, 1); // FLOAT
    bytes(&mut tensor_type, 2, &shape);
    let mut ty = Vec::new();
    bytes(&mut ty, 1, &tensor_type);
    let mut vi = Vec::new();
    bytes(&mut vi, 1, name.as_bytes());
    bytes(&mut vi, 2, &ty);
    vi
}

fn varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

fn varint_field(buf: &mut Vec<u8>, field: u64, v: u64) {
    varint(buf, field << 3);
    varint(buf, v);
}

fn bytes(buf: &mut Vec<u8>, field: u64, data: &[u8]) {
    varint(buf, (field << 3) | 2);
    varint(buf, data.len() as u64);
    buf.extend_from_slice(data);
}
