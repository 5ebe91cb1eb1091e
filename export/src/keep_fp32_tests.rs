//! `--fp16 --keep-fp32 NAMES`: the named layers' convs are float32 in the graph, with
//! Casts around them, and the model still passes the pip onnx checker (strict shape
//! inference) and runs in ONNX Runtime next to the fp32 export.

use std::path::PathBuf;
use std::process::Command;

use segtool_model_spec::{BackboneSpec, ModelSpec};

use crate::proto::{type_proto, DataType, GraphProto, NodeProto};
use crate::testutil::{export_decoded_with, random_entries, serialize, spec_with};
use crate::{ExportError, ExportOptions, ExportTarget};

fn tiny() -> ModelSpec {
    spec_with(BackboneSpec::tiny(), 5)
}

fn producer<'g>(g: &'g GraphProto, t: &str) -> &'g NodeProto {
    g.node
        .iter()
        .find(|n| n.output.iter().any(|o| o == t))
        .unwrap_or_else(|| panic!("no producer of {t}"))
}

fn init_type(g: &GraphProto, name: &str) -> i32 {
    g.initializer
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("no initialiser {name}"))
        .data_type
}

fn cast_to(n: &NodeProto) -> Option<i64> {
    (n.op_type == "Cast").then(|| n.attribute[0].i.unwrap())
}

/// The conv `conv` computes in float32: float32 weights and bias, its input a Cast to
/// float32 and its only consumer a Cast to FLOAT16.
fn assert_fp32_island(g: &GraphProto, conv: &str) {
    let n = g
        .node
        .iter()
        .find(|n| n.name == conv && n.op_type == "Conv")
        .unwrap_or_else(|| panic!("no conv {conv}"));
    assert_eq!(init_type(g, &n.input[1]), DataType::Float as i32, "{conv}");
    assert_eq!(init_type(g, &n.input[2]), DataType::Float as i32, "{conv}");
    let src = producer(g, &n.input[0]);
    // The input is a Cast to float32, or (two kept convs in a row) the previous island's
    // float32 conv output itself.
    assert!(
        cast_to(src) == Some(DataType::Float as i64) || src.op_type == "Conv",
        "{conv}: input from {} {}",
        src.op_type,
        src.name
    );
    let users: Vec<&NodeProto> = g
        .node
        .iter()
        .filter(|u| u.input.contains(&n.output[0]))
        .collect();
    assert!(
        users
            .iter()
            .all(|u| cast_to(u) == Some(DataType::Float16 as i64)
                || ["Conv", "Shape", "Resize"].contains(&u.op_type.as_str())),
        "{conv}: consumers {:?}",
        users.iter().map(|u| &u.name).collect::<Vec<_>>()
    );
}

#[test]
fn kept_layers_are_fp32_and_the_others_fp16() {
    let spec = tiny();
    for target in [ExportTarget::Ort, ExportTarget::Legacy, ExportTarget::Tract] {
        let opts = ExportOptions::for_target(target)
            .with_fp16(true)
            .with_keep_fp32(["head.conv5c", "pretrained.layer1.0", "head.conv8"]);
        let (m, _) = export_decoded_with(&spec, &opts);
        let g = m.graph.as_ref().unwrap();
        let kept = [
            "head.conv5c.0",
            "pretrained.layer1.0.conv1",
            "pretrained.layer1.0.conv2",
            "head.conv8.1",
        ];
        for conv in kept {
            assert_fp32_island(g, conv);
        }
        for n in g.node.iter().filter(|n| n.op_type == "Conv") {
            let fp32 = init_type(g, &n.input[1]) == DataType::Float as i32;
            assert_eq!(
                fp32,
                kept.contains(&n.name.as_str()) || n.name.starts_with("pretrained.layer1.0."),
                "{target}: {}",
                n.name
            );
        }
        // conv8 kept: the resize reads its float32 output, with no fp16 round trip, and
        // the unused Cast back to fp16 is not written.
        let resize = g.node.iter().find(|n| n.op_type == "Resize").unwrap();
        assert_eq!(resize.input[0], "head.conv8.1", "{target}");
        assert!(!g.node.iter().any(|n| n.output[0] == "head.conv8.1_fp16"));
        // value_info (ORT profile) gives the island's output its float32 type.
        if let Some(vi) = g.value_info.iter().find(|v| v.name == "head.conv5c.0") {
            match &vi.r#type.as_ref().unwrap().value {
                Some(type_proto::Value::TensorType(t)) => {
                    assert_eq!(t.elem_type, DataType::Float as i32)
                }
                _ => panic!("not a tensor"),
            }
        } else {
            assert_ne!(target, ExportTarget::Ort, "ORT profile writes value_info");
        }
        let meta = m
            .metadata_props
            .iter()
            .find(|p| p.key == crate::EXPORT_METADATA_KEY)
            .unwrap();
        let v: serde_json::Value = serde_json::from_str(&meta.value).unwrap();
        assert_eq!(v["keep_fp32"][0], "head.conv5c");
    }
}

#[test]
fn unknown_or_misplaced_names_are_errors() {
    let spec = tiny();
    let bytes = serialize(&random_entries(&spec, 7), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let opts = ExportOptions::default()
        .with_fp16(true)
        .with_keep_fp32(["head.conv5"]);
    match crate::export_onnx_bytes(&st, &spec, &opts) {
        Err(ExportError::UnknownLayer { name, close }) => {
            assert_eq!(name, "head.conv5");
            assert!(close.contains(&"head.conv5a".to_string()), "{close:?}");
            assert!(close.contains(&"head.conv5c".to_string()), "{close:?}");
            let msg = ExportError::UnknownLayer { name, close }.to_string();
            assert!(msg.contains("close: head.conv5"), "{msg}");
        }
        other => panic!("expected UnknownLayer, got {:?}", other.map(|_| ())),
    }
    // Without --fp16 there is nothing to keep.
    let opts = ExportOptions::default().with_keep_fp32(["head.conv5c"]);
    let err = crate::export_onnx_bytes(&st, &spec, &opts).unwrap_err();
    assert!(matches!(err, ExportError::BadOption(_)), "{err}");
    // "head.conv5" must not select head.conv51 by prefix alone.
    assert!(!crate::conv::selects("head.conv5", "head.conv51.0"));
    assert!(crate::conv::selects("head.conv51", "head.conv51.0"));
}

fn python() -> Option<Command> {
    match std::env::var("SEGTOOL_PYTHON") {
        Ok(py) => Some(Command::new(py)),
        Err(_) => {
            crate::testutil::skip::missing_reference(
                "the project venv's python (SEGTOOL_PYTHON), with onnx",
                "source \"$(bash scripts/setup.sh)\"",
            );
            None
        }
    }
}

#[test]
fn keep_fp32_models_pass_the_checker_and_run() {
    let Some(mut py) = python() else { return };
    let spec = tiny();
    let bytes = serialize(&random_entries(&spec, 3), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let dir = std::env::temp_dir().join(format!("segtool-keep-fp32-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keep = ["head.conv5c", "head.sa", "pretrained.layer1", "head.conv8"];
    let mut paths: Vec<PathBuf> = Vec::new();
    for (name, o) in [
        ("fp32", ExportOptions::for_target(ExportTarget::Ort)),
        (
            "ort",
            ExportOptions::for_target(ExportTarget::Ort)
                .with_fp16(true)
                .with_keep_fp32(keep),
        ),
        (
            "legacy",
            ExportOptions::default()
                .with_fp16(true)
                .with_keep_fp32(keep),
        ),
    ] {
        let (b, _) = crate::export_onnx_bytes(&st, &spec, &o).unwrap();
        let p = dir.join(format!("{name}.onnx"));
        std::fs::write(&p, b).unwrap();
        paths.push(p);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/check_onnx.py");
    let out = py
        .arg(script)
        .args(&paths)
        .args(["--run", "40x56", "--batch", "1"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "onnx checker / ORT run failed");
    assert_eq!(stdout.matches("\"checker\": \"ok\"").count(), paths.len());
    for line in stdout.lines().skip(1) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let d = v["max_diff"]["40x56"].as_f64().unwrap();
        assert!(d.is_finite() && d < 0.5, "fp16 vs fp32 logits: {line}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
