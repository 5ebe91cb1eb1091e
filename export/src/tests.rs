//! Whole-export tests: the decoded model's interface and well-formedness, and the errors
//! users see for bad checkpoints.

use std::collections::HashSet;
use std::path::PathBuf;

use prost::Message;
use safetensors::{Dtype, SafeTensors};
use segtool_model_spec::{BackboneSpec, ModelSpec, SPEC_METADATA_KEY};

use crate::proto::tensor_shape_proto::dimension::Value as DimValue;
use crate::proto::{type_proto, DataType, GraphProto, ModelProto, ValueInfoProto};
use crate::testutil::{export_decoded, random_entries, serialize, spec_with, Entries};
use crate::{export_onnx, export_onnx_bytes, ExportError, ExportOptions};

fn dims(vi: &ValueInfoProto) -> (i32, Vec<String>) {
    let Some(type_proto::Value::TensorType(t)) = vi.r#type.as_ref().and_then(|t| t.value.clone())
    else {
        panic!("{} is not a tensor", vi.name)
    };
    let shape = t.shape.expect("shape");
    let dims = shape
        .dim
        .iter()
        .map(|d| match &d.value {
            Some(DimValue::DimValue(v)) => v.to_string(),
            Some(DimValue::DimParam(p)) => p.clone(),
            None => "?".into(),
        })
        .collect();
    (t.elem_type, dims)
}

#[test]
fn tiny_model_interface_and_well_formedness() {
    let spec = spec_with(BackboneSpec::tiny(), 4);
    let (model, report) = export_decoded(&spec);
    assert_eq!(model.ir_version, 8);
    assert_eq!(model.opset_import.len(), 1);
    assert_eq!(
        (
            model.opset_import[0].domain.as_str(),
            model.opset_import[0].version
        ),
        ("", 17)
    );
    assert_eq!(model.producer_name, "segtool");
    assert_eq!(model.producer_version, env!("CARGO_PKG_VERSION"));
    assert!(model.doc_string.contains("DANet"));
    let meta: Vec<_> = model
        .metadata_props
        .iter()
        .filter(|p| p.key == SPEC_METADATA_KEY)
        .collect();
    assert_eq!(meta.len(), 1);
    assert_eq!(
        ModelSpec::from_json(&meta[0].value).expect("spec json"),
        spec
    );

    let g = model.graph.expect("graph");
    assert_eq!(g.input.len(), 1);
    assert_eq!(g.input[0].name, "image");
    assert_eq!(
        dims(&g.input[0]),
        (
            DataType::Float as i32,
            vec!["batch".into(), "3".into(), "height".into(), "width".into()]
        )
    );
    assert_eq!(g.output.len(), 1);
    assert_eq!(g.output[0].name, "logits");
    assert_eq!(
        dims(&g.output[0]),
        (
            DataType::Float as i32,
            vec!["batch".into(), "4".into(), "height".into(), "width".into()]
        )
    );
    assert_eq!(report.nodes, g.node.len());
    assert_eq!(report.initializers, g.initializer.len());
    assert_eq!(report.spec, spec);

    assert_defined_once_in_order(&g);
    assert_only_needed_ops_and_no_static_sizes(&g);
}

/// Topological order: every input is the graph input, an initializer, an earlier node's
/// output, or "" (an omitted optional input). Every value is defined once.
fn assert_defined_once_in_order(g: &GraphProto) {
    let mut defined: HashSet<String> = HashSet::from(["image".to_string()]);
    for t in &g.initializer {
        assert!(
            defined.insert(t.name.clone()),
            "initializer {} defined twice",
            t.name
        );
        let n: i64 = t.dims.iter().product();
        let width = match t.data_type {
            x if x == DataType::Float as i32 => 4,
            x if x == DataType::Int64 as i32 => 8,
            other => panic!("{}: unexpected dtype {other}", t.name),
        };
        assert_eq!(t.raw_data.len() as i64, n * width, "{}", t.name);
    }
    let mut node_names = HashSet::new();
    for n in &g.node {
        assert!(
            node_names.insert(n.name.clone()),
            "node name {} repeated",
            n.name
        );
        for i in &n.input {
            assert!(
                i.is_empty() || defined.contains(i),
                "{} ({}) reads undefined {i}",
                n.name,
                n.op_type
            );
        }
        for o in &n.output {
            assert!(defined.insert(o.clone()), "{o} defined twice");
        }
    }
    assert!(defined.contains("logits"));
}

/// Only the ops the maths needs (BN is folded and dropout is gone), and no static sizes.
fn assert_only_needed_ops_and_no_static_sizes(g: &GraphProto) {
    let allowed = [
        "Conv",
        "Relu",
        "MaxPool",
        "Add",
        "Mul",
        "Sub",
        "Reshape",
        "Transpose",
        "MatMul",
        "Softmax",
        "ReduceMax",
        "Shape",
        "Slice",
        "Concat",
        "Resize",
    ];
    for n in &g.node {
        assert!(
            allowed.contains(&n.op_type.as_str()),
            "unexpected op {}",
            n.op_type
        );
        assert!(n.domain.is_empty());
    }
    // No static sizes: Reshape targets are [0, 0, -1] constants or computed shapes.
    for n in g.node.iter().filter(|n| n.op_type == "Reshape") {
        if let Some(t) = g.initializer.iter().find(|t| t.name == n.input[1]) {
            let v: Vec<i64> = t
                .raw_data
                .chunks(8)
                .map(|b| i64::from_le_bytes(b.try_into().expect("8")))
                .collect();
            assert_eq!(v, [0, 0, -1]);
        }
    }
}

#[test]
fn folded_weights_follow_the_formula() {
    let spec = spec_with(BackboneSpec::tiny(), 2);
    let entries = random_entries(&spec, 7);
    let (model, _) = export_decoded(&spec); // same seed as random_entries(.., 7)
    let g = model.graph.expect("graph");
    let get = |k: &str| -> Vec<f32> {
        let e = entries.iter().find(|e| e.0 == k).expect(k);
        e.3.chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
            .collect()
    };
    let init = |k: &str| -> Vec<f32> {
        let t = g.initializer.iter().find(|t| t.name == k).expect(k);
        t.raw_data
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().expect("4")))
            .collect()
    };
    let (w, gamma, beta, mean, var) = (
        get("head.conv52.0.weight"),
        get("head.conv52.1.weight"),
        get("head.conv52.1.bias"),
        get("head.conv52.1.running_mean"),
        get("head.conv52.1.running_var"),
    );
    let (wf, bf) = (init("head.conv52.0.weight"), init("head.conv52.0.bias"));
    let per = w.len() / gamma.len();
    for o in 0..gamma.len() {
        let s = gamma[o] as f64 / (var[o] as f64 + 1e-5).sqrt();
        assert_eq!(bf[o], (beta[o] as f64 - mean[o] as f64 * s) as f32);
        for j in 0..per {
            assert_eq!(wf[o * per + j], (w[o * per + j] as f64 * s) as f32);
        }
    }
    assert_eq!(init("head.sa.gamma"), get("head.sa.gamma"));
    assert_eq!(init("head.conv8.1.bias"), get("head.conv8.1.bias"));
}

fn export_entries(
    spec: &ModelSpec,
    entries: &Entries,
) -> Result<(Vec<u8>, crate::ExportReport), ExportError> {
    let bytes = serialize(entries, Some(spec));
    let st = SafeTensors::deserialize(&bytes).expect("deserialize");
    export_onnx_bytes(&st, spec, &ExportOptions::default())
}

#[test]
fn missing_tensor_is_named() {
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let mut entries = random_entries(&spec, 1);
    entries.retain(|e| e.0 != "pretrained.layer3.0.bn2.running_var");
    let err = export_entries(&spec, &entries).unwrap_err();
    assert!(
        matches!(&err, ExportError::MissingTensor { key } if key == "pretrained.layer3.0.bn2.running_var")
    );
    assert!(
        err.to_string()
            .contains("pretrained.layer3.0.bn2.running_var"),
        "{err}"
    );
}

#[test]
fn wrong_shape_names_key_and_both_shapes() {
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let mut entries = random_entries(&spec, 1);
    let e = entries
        .iter_mut()
        .find(|e| e.0 == "head.conv8.1.weight")
        .expect("conv8");
    e.2 = vec![5, 32, 1, 1];
    e.3 = vec![0; 5 * 32 * 4];
    let err = export_entries(&spec, &entries).unwrap_err().to_string();
    assert!(
        err.contains("head.conv8.1.weight")
            && err.contains("[5, 32, 1, 1]")
            && err.contains("[3, 32, 1, 1]"),
        "{err}"
    );
}

#[test]
fn wrong_dtype_is_reported() {
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let mut entries = random_entries(&spec, 1);
    let e = entries
        .iter_mut()
        .find(|e| e.0 == "head.sc.gamma")
        .expect("gamma");
    e.1 = Dtype::F64;
    e.3 = 0.5f64.to_le_bytes().to_vec();
    let err = export_entries(&spec, &entries).unwrap_err();
    assert!(
        matches!(&err, ExportError::WrongDtype { key, .. } if key == "head.sc.gamma"),
        "{err}"
    );
    assert!(err.to_string().contains("F64"), "{err}");
}

#[test]
fn bad_options_and_spec_are_rejected() {
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let bytes = serialize(&random_entries(&spec, 1), Some(&spec));
    let st = SafeTensors::deserialize(&bytes).expect("deserialize");
    let err = export_onnx_bytes(&st, &spec, &ExportOptions::default().with_opset(11)).unwrap_err();
    assert!(matches!(
        err,
        ExportError::UnsupportedOpset { opset: 11, .. }
    ));
    let mut bad = spec.clone();
    bad.palette.clear();
    assert!(matches!(
        export_onnx_bytes(&st, &bad, &ExportOptions::default()),
        Err(ExportError::Spec(_))
    ));
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("segtool-export-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("mkdir");
        Self(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn file_export_writes_model_atomically() {
    let dir = Scratch::new("ok");
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let ckpt = dir.0.join("model.safetensors");
    std::fs::write(&ckpt, serialize(&random_entries(&spec, 3), Some(&spec))).expect("write");
    let out = dir.0.join("model.onnx");
    let report = export_onnx(&ckpt, &out, &ExportOptions::default()).expect("export");
    let bytes = std::fs::read(&out).expect("read back");
    assert_eq!(bytes.len() as u64, report.bytes);
    let model = ModelProto::decode(bytes.as_slice()).expect("decodes");
    assert_eq!(model.graph.expect("graph").node.len(), report.nodes);
    // Nothing but the checkpoint and the model: the temp file was renamed away.
    assert_eq!(std::fs::read_dir(&dir.0).expect("ls").count(), 2);
    // Re-export over an existing file replaces it.
    export_onnx(&ckpt, &out, &ExportOptions::default()).expect("re-export");
    assert_eq!(std::fs::read(&out).expect("read"), bytes);
}

#[test]
fn file_errors_name_the_path() {
    let dir = Scratch::new("errors");
    let spec = spec_with(BackboneSpec::tiny(), 3);
    let out = dir.0.join("out.onnx");
    let opts = ExportOptions::default();

    let missing = dir.0.join("nope.safetensors");
    let err = export_onnx(&missing, &out, &opts).unwrap_err();
    assert!(matches!(err, ExportError::NotFound { .. }));
    assert!(err.to_string().contains("nope.safetensors"), "{err}");

    let full = serialize(&random_entries(&spec, 2), Some(&spec));
    let truncated = dir.0.join("truncated.safetensors");
    std::fs::write(&truncated, &full[..full.len() - 100]).expect("write");
    let err = export_onnx(&truncated, &out, &opts).unwrap_err();
    assert!(matches!(err, ExportError::NotSafetensors { .. }), "{err}");
    assert!(err.to_string().contains("truncated.safetensors"), "{err}");
    for (name, bytes) in [
        ("empty", &b""[..]),
        ("tiny", &b"\x05\x00"[..]),
        ("header", &full[..20]),
    ] {
        let p = dir.0.join(name);
        std::fs::write(&p, bytes).expect("write");
        assert!(
            matches!(
                export_onnx(&p, &out, &opts),
                Err(ExportError::NotSafetensors { .. })
            ),
            "{name}"
        );
    }

    let no_spec = dir.0.join("nospec.safetensors");
    std::fs::write(&no_spec, serialize(&random_entries(&spec, 2), None)).expect("write");
    let err = export_onnx(&no_spec, &out, &opts).unwrap_err();
    assert!(matches!(err, ExportError::MissingSpec { .. }), "{err}");
    assert!(
        err.to_string().contains("nospec.safetensors") && err.to_string().contains("segtool.spec"),
        "{err}"
    );

    let bad_spec = dir.0.join("badspec.safetensors");
    let mut wrong = spec.clone();
    wrong.arch = "pspnet".into();
    std::fs::write(
        &bad_spec,
        serialize(&random_entries(&spec, 2), Some(&wrong)),
    )
    .expect("write");
    let err = export_onnx(&bad_spec, &out, &opts).unwrap_err();
    assert!(matches!(err, ExportError::BadSpec { .. }), "{err}");
    assert!(
        err.to_string().contains("badspec.safetensors") && err.to_string().contains("pspnet"),
        "{err}"
    );

    // Output under a regular file: the write fails cleanly and names the output.
    let ckpt = dir.0.join("ok.safetensors");
    std::fs::write(&ckpt, &full).expect("write");
    let blocked = dir.0.join("ok.safetensors").join("out.onnx");
    let err = export_onnx(&ckpt, &blocked, &opts).unwrap_err();
    assert!(matches!(err, ExportError::Write { .. }), "{err}");
    assert!(!out.exists());
}
