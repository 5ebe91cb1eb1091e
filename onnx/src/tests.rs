//! Round trips through a real file: a model written with the prost messages and read back
//! by the streaming reader.

use std::path::Path;

use prost::Message;
use segtool_model_spec::{BackboneSpec, ModelSpec};

use crate::builders::tensor_f32;
use crate::proto::{
    tensor_value_info, DataType, Dim, GraphProto, ModelProto, StringStringEntryProto,
};
use crate::*;

fn spec() -> ModelSpec {
    ModelSpec::new(
        "tiny",
        BackboneSpec::tiny(),
        vec!["a".into(), "b".into(), "c".into()],
    )
}

fn hint() -> TrtProfileHint {
    TrtProfileHint {
        input: "image".into(),
        layout: "NHWC".into(),
        min: vec![1, 128, 128, 3],
        opt: vec![1, 256, 512, 3],
        max: vec![8, 512, 1024, 3],
        trtexec: "--minShapes=image:1x128x128x3".into(),
    }
}

fn full_metadata() -> Metadata {
    let mut m = Metadata::new(spec());
    m.export_options = Some(serde_json::json!({"opset": 17, "preprocess": true}));
    m.contract = Some(IoContract {
        input: InputLayout::NhwcU8,
        output: OutputKind::Mask,
    });
    m.output_stride = Some(8);
    m.checkpoint_sha256 = Some("ab".repeat(32));
    m.trt_profile = Some(hint());
    m.calibration = Some(serde_json::json!({"method": "entropy"}));
    m.other = vec![("vendor.note".into(), "kept".into())];
    m
}

fn write_model(
    path: &Path,
    props: &[(String, String)],
    input: DataType,
    output: (DataType, usize),
) {
    let dims = [
        Dim::Named("batch"),
        Dim::Named("height"),
        Dim::Named("width"),
        Dim::Fixed(3),
    ];
    let out_dims = &[
        Dim::Named("batch"),
        Dim::Fixed(3),
        Dim::Named("height"),
        Dim::Named("width"),
    ][..output.1];
    let graph = GraphProto {
        name: "g".into(),
        initializer: vec![tensor_f32("w", &[2], &[1.0, 2.0])],
        // An initializer listed as an input (old exporters do this) is not a graph input.
        input: vec![
            tensor_value_info("image", input, &dims),
            tensor_value_info("w", DataType::Float, &[Dim::Fixed(2)]),
        ],
        output: vec![tensor_value_info("out", output.0, out_dims)],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: 8,
        graph: Some(graph),
        metadata_props: props
            .iter()
            .map(|(k, v)| StringStringEntryProto {
                key: k.clone(),
                value: v.clone(),
            })
            .collect(),
        ..Default::default()
    };
    std::fs::write(path, model.encode_to_vec()).unwrap();
}

#[test]
fn every_metadata_field_roundtrips_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    let meta = full_metadata();
    write_model(
        &path,
        &meta.to_props(),
        DataType::Uint8,
        (DataType::Uint8, 3),
    );
    let model = ModelFile::read(&path).unwrap();
    assert_eq!(model.metadata, meta);
    assert_eq!(model.io.inputs.len(), 1, "the initializer is not an input");
    assert_eq!(model.io.inputs[0].dim_names[1].as_deref(), Some("height"));
    assert_eq!(model.io.inputs[0].dims, [None, None, None, Some(3)]);
    assert_eq!(
        model.contract(),
        IoContract {
            input: InputLayout::NhwcU8,
            output: OutputKind::Mask
        }
    );
    assert_eq!(read_props(&path).unwrap(), meta.to_props());
    let (min, _, max) = hint().ort_shapes();
    assert_eq!(
        (min.as_str(), max.as_str()),
        ("image:1x128x128x3", "image:8x512x1024x3")
    );
}

#[test]
fn the_graph_wins_over_recorded_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    // Metadata claims --preprocess --argmax, the graph is plain (a re-exported model).
    write_model(
        &path,
        &full_metadata().to_props(),
        DataType::Float,
        (DataType::Float, 4),
    );
    assert!(ModelFile::read(&path).unwrap().contract().is_plain());
}

#[test]
fn malformed_segtool_values_are_errors_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    let base = Metadata::new(spec()).to_props();
    let cases = [
        (
            metadata::TRT_PROFILE_KEY,
            r#"{"input":"image","minimum":[1,3,8,8]}"#,
        ),
        (metadata::TRT_PROFILE_KEY, "not json"),
        (
            metadata::TRT_PROFILE_KEY,
            &hint().to_json().replace("[1,128,128,3]", "[1,128,3]"),
        ),
        (metadata::INPUT_LAYOUT_KEY, "NCDHW"),
        (metadata::OUTPUT_KIND_KEY, "probs"),
        (metadata::OUTPUT_STRIDE_KEY, "eight"),
        (metadata::CHECKPOINT_SHA256_KEY, "xyz"),
        (metadata::EXPORT_METADATA_KEY, "{"),
    ];
    for (key, value) in cases {
        let mut props = base.clone();
        props.push((key.into(), value.into()));
        write_model(&path, &props, DataType::Float, (DataType::Float, 4));
        let err = ModelFile::read(&path).unwrap_err();
        assert!(
            matches!(&err, ModelFileError::Metadata { key: k, .. } if *k == key),
            "{key}: {err}"
        );
        let msg = err.to_string();
        assert!(msg.contains(key) && msg.contains("m.onnx"), "{msg}");
    }
    // Raw props do not judge values.
    assert_eq!(read_props(&path).unwrap().len(), base.len() + 1);
}

#[test]
fn missing_spec_truncation_and_garbage_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    write_model(&path, &[], DataType::Float, (DataType::Float, 4));
    assert!(matches!(
        ModelFile::read(&path),
        Err(ModelFileError::MissingSpec { .. })
    ));
    assert_eq!(read_io(&path).unwrap().outputs[0].name, "out");

    write_model(
        &path,
        &full_metadata().to_props(),
        DataType::Float,
        (DataType::Float, 4),
    );
    let full = std::fs::read(&path).unwrap();
    for cut in [1, full.len() / 3, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..cut]).unwrap();
        let err = ModelFile::read(&path).unwrap_err();
        assert!(
            matches!(err, ModelFileError::Invalid { .. }),
            "cut at {cut}: {err}"
        );
        assert!(err.to_string().contains("m.onnx"), "{err}");
    }
    std::fs::write(&path, b"this is not a model\xff\xff").unwrap();
    assert!(matches!(
        read_props(&path),
        Err(ModelFileError::Invalid { .. })
    ));
    let missing = dir.path().join("nope.onnx");
    assert!(matches!(
        ModelFile::read(&missing),
        Err(ModelFileError::NotFound { .. })
    ));
}
