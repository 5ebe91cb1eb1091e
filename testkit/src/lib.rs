//! Tiny ONNX segmentation models for tests, examples and `segtool doctor`'s provider probe.
//!
//! One 1x1 `Conv` maps the normalised RGB input to per-class logits, so expected outputs
//! are easy to compute by hand, yet the file follows the exporter's contract exactly:
//! input `image` f32 `[batch, 3, height, width]`, output `logits` f32
//! `[batch, classes, height, width]`, opset 17, spec JSON under `segtool.spec`. Written
//! with `segtool-onnx`'s messages, so no exporter or Python is needed to test the engines.

pub mod skip;
pub use skip::{missing_reference, skipped};

use prost::Message;
use segtool_model_spec::{BackboneSpec, ModelSpec, SPEC_METADATA_KEY};
use segtool_onnx::builders::{attr_int, tensor_f32};
use segtool_onnx::proto::{
    tensor_value_info, DataType, Dim, GraphProto, ModelProto, NodeProto, OperatorSetIdProto,
    StringStringEntryProto,
};

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

/// A file as other tools write them, for model-card tests: no segtool metadata, input
/// `input` f32 `[N, in_ch, H, W]`, a 1x1 `Conv` with fixed weights, then output `out`:
/// f32 `[N, classes, H, W]`, or with `argmax` an int64 class map `[N, H, W]` (ArgMax over
/// the classes).
pub fn foreign_model_bytes(in_ch: i64, classes: i64, argmax: bool) -> Vec<u8> {
    let dims = |c: Option<i64>| {
        let mut d = vec![Dim::Named("N")];
        if let Some(c) = c {
            d.push(Dim::Fixed(c));
        }
        d.extend([Dim::Named("H"), Dim::Named("W")]);
        d
    };
    let w: Vec<f32> = (0..classes * in_ch)
        .map(|i| 0.5 - 0.3 * (i % 5) as f32)
        .collect();
    let mut node = vec![NodeProto {
        input: vec!["input".into(), "W".into()],
        output: vec![if argmax {
            "scores".into()
        } else {
            "out".into()
        }],
        op_type: "Conv".into(),
        ..Default::default()
    }];
    let output = if argmax {
        node.push(NodeProto {
            input: vec!["scores".into()],
            output: vec!["out".into()],
            op_type: "ArgMax".into(),
            attribute: vec![attr_int("axis", 1), attr_int("keepdims", 0)],
            ..Default::default()
        });
        tensor_value_info("out", DataType::Int64, &dims(None))
    } else {
        tensor_value_info("out", DataType::Float, &dims(Some(classes)))
    };
    let graph = GraphProto {
        name: "plain".into(),
        node,
        initializer: vec![tensor_f32("W", &[classes, in_ch, 1, 1], &w)],
        input: vec![tensor_value_info(
            "input",
            DataType::Float,
            &dims(Some(in_ch)),
        )],
        output: vec![output],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        producer_name: "pytorch".into(),
        graph: Some(graph),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        ..Default::default()
    }
    .encode_to_vec()
}

/// `model` (a [`tiny_model_bytes`] file of `classes` classes) with a fixed input
/// `[1, 3, height, width]` and output `[1, classes, height, width]`, as a graph exported
/// for a fixed camera (TensorRT engines, NPUs) has.
pub fn with_fixed_size(model: &[u8], classes: i64, height: i64, width: i64) -> Vec<u8> {
    let mut model = ModelProto::decode(model).expect("a tiny_model_bytes file");
    let graph = model.graph.as_mut().expect("a graph");
    let dims = |c: i64| {
        [
            Dim::Fixed(1),
            Dim::Fixed(c),
            Dim::Fixed(height),
            Dim::Fixed(width),
        ]
    };
    graph.input = vec![tensor_value_info("image", DataType::Float, &dims(3))];
    graph.output = vec![tensor_value_info("logits", DataType::Float, &dims(classes))];
    model.encode_to_vec()
}

/// [`tiny_model_bytes`] of a 3-class model whose class is the dominant normalised channel,
/// written to `dir/tiny.onnx` (for examples and tests that need a model file).
pub fn tiny_model_file(dir: &std::path::Path) -> std::io::Result<std::path::PathBuf> {
    let path = dir.join("tiny.onnx");
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &identity, &[0.0; 3]))?;
    Ok(path)
}

/// Columns of the colour grid of [`many_classes_model_bytes`]: class `c` sits at red
/// level `c % GRID_COLUMNS` and green level `c / GRID_COLUMNS`.
pub const GRID_COLUMNS: usize = 20;

/// The red and green levels of the colour grid for `classes` classes.
fn grid_levels(classes: usize) -> (usize, usize) {
    (GRID_COLUMNS, classes.div_ceil(GRID_COLUMNS).max(2))
}

/// The pixel whose class is `class` in [`many_classes_model_bytes`] of `classes` classes
/// (blue is free: any value gives the same class).
pub fn many_classes_pixel(class: usize, classes: usize) -> [u8; 3] {
    let (columns, rows) = grid_levels(classes);
    let level = |i: usize, n: usize| ((i * 255) as f32 / (n - 1) as f32).round() as u8;
    [
        level(class % columns, columns),
        level(class / columns, rows),
        0,
    ]
}

/// A [`tiny_model_bytes`] model of `classes` classes (more than 256 for 16-bit class maps)
/// whose class is known from the colour: class `c` wins where the pixel is
/// [`many_classes_pixel`]`(c, classes)`, by a wide margin (its logit is minus the squared
/// distance of the normalised red and green to the class's grid point, up to a term
/// every class shares), so every engine agrees on every pixel.
pub fn many_classes_model_bytes(classes: usize) -> Vec<u8> {
    let spec = tiny_spec(classes);
    let (weights, bias): (Vec<[f32; 3]>, Vec<f32>) = (0..classes)
        .map(|c| {
            let px = many_classes_pixel(c, classes);
            let norm = |k: usize| (f32::from(px[k]) / 255.0 - spec.mean[k]) / spec.std[k];
            let (r, g) = (norm(0), norm(1));
            ([2.0 * r, 2.0 * g, 0.0], -(r * r + g * g))
        })
        .unzip();
    tiny_model_bytes(&spec, &weights, &bias)
}

/// A 3-class [`foreign_model_bytes`] file with the card it needs beside it (ImageNet-like
/// mean and std), written as `dir/foreign.onnx` and `dir/card.toml`: a model from
/// elsewhere for the front ends' card options. Returns `(model, card)`.
pub fn foreign_model_with_card(
    dir: &std::path::Path,
) -> std::io::Result<(std::path::PathBuf, std::path::PathBuf)> {
    let model = dir.join("foreign.onnx");
    std::fs::write(&model, foreign_model_bytes(3, 3, false))?;
    let card = dir.join("card.toml");
    std::fs::write(
        &card,
        "num_classes = 3\n[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.25, 0.25, 0.25]\n",
    )?;
    Ok((model, card))
}

/// The Hugging Face folder `case` (`mask2former`, `segformer`, ...) written into `dir` by
/// transformers' own `save_pretrained` through `tests/reference/hf_processors_ref.py`,
/// with its photos in `dir/images` and transformers' masks in `dir/CASE/ref`. `None`
/// when the project venv's python (`SEGTOOL_PYTHON`) is not set: a [`missing_reference`]
/// (the caller returns; under `make test` it fails instead).
///
/// # Panics
/// When the script fails (its output is in the message), or under `make test` when
/// `SEGTOOL_PYTHON` is not set.
#[track_caller]
pub fn hugging_face_folder(case: &str, dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let Ok(python) = std::env::var("SEGTOOL_PYTHON") else {
        missing_reference(
            "the project venv's python (SEGTOOL_PYTHON), with transformers",
            "source \"$(bash scripts/setup.sh)\"",
        );
        return None;
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/reference/hf_processors_ref.py"
    );
    let out = std::process::Command::new(python)
        .arg(script)
        .arg("--out")
        .arg(dir)
        .args(["--cases", case])
        .output()
        .expect("python runs");
    assert!(
        out.status.success(),
        "hf_processors_ref.py --cases {case}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(dir.join(case))
}
