//! Export profiles: attention forms per target, opset / ir_version / domain imports,
//! determinism, and (when the venv python is available through `SEGTOOL_PYTHON`) the pip
//! `onnx` checker, strict shape inference and ONNX Runtime agreement between profiles.

use std::path::PathBuf;
use std::process::Command;

use segtool_model_spec::BackboneSpec;

use crate::proto::{GraphProto, ModelProto};
use crate::testutil::{export_decoded_with, random_entries, serialize, spec_with};
use crate::{
    export_onnx_bytes, AttentionForm, ExportError, ExportOptions, ExportTarget,
    EXPORT_METADATA_KEY, MS_DOMAIN,
};

fn opsets(m: &ModelProto) -> Vec<(String, i64)> {
    m.opset_import
        .iter()
        .map(|o| (o.domain.clone(), o.version))
        .collect()
}

fn ops(g: &GraphProto, prefix: &str) -> Vec<String> {
    g.node
        .iter()
        .filter(|n| n.name.starts_with(prefix))
        .map(|n| {
            if n.domain.is_empty() {
                n.op_type.clone()
            } else {
                format!("{}::{}", n.domain, n.op_type)
            }
        })
        .collect()
}

fn tiny() -> segtool_model_spec::ModelSpec {
    spec_with(BackboneSpec::tiny(), 3)
}

#[test]
fn default_is_the_legacy_profile() {
    let d = ExportOptions::default();
    assert_eq!(d, ExportOptions::for_target(ExportTarget::Legacy));
    assert_eq!(d.opset, 17);
    assert_eq!(
        (d.pam, d.cam),
        (AttentionForm::Decomposed, AttentionForm::Decomposed)
    );
    assert_eq!(ExportOptions::default().with_opset(18).opset, 18);
    let (m, _) = export_decoded_with(&tiny(), &d);
    assert_eq!(opsets(&m), [(String::new(), 17)]);
    assert_eq!(m.ir_version, 8);
    let g = m.graph.unwrap();
    assert!(g.node.iter().all(|n| n.domain.is_empty()));
    assert!(!g.node.iter().any(|n| n.op_type.contains("Attention")));
}

#[test]
fn ort_profile_blocks_pam_and_ms_mha_fuses_it() {
    let target = ExportOptions::for_target(ExportTarget::Ort);
    assert_eq!(
        (target.pam, target.cam, target.opset),
        (AttentionForm::QueryBlocked, AttentionForm::Decomposed, 17)
    );
    let (m, _) = export_decoded_with(&tiny(), &target);
    assert_eq!(opsets(&m), [(String::new(), 17)]);
    // The fused form, on request.
    let opts = target.with_pam_attention(AttentionForm::MsMultiHeadAttention);
    assert_eq!(opts.opset, 17);
    let (m, _) = export_decoded_with(&tiny(), &opts);
    assert_eq!(
        opsets(&m),
        [(String::new(), 17), (MS_DOMAIN.to_string(), 1)]
    );
    assert_eq!(m.ir_version, 8);
    let g = m.graph.as_ref().unwrap();
    assert_eq!(
        ops(g, "head.sa"),
        [
            "Conv",
            "Conv",
            "Conv",
            "Reshape",
            "Transpose",
            "Reshape",
            "Transpose",
            "Reshape",
            "Transpose",
            "com.microsoft::MultiHeadAttention",
            "Transpose",
            "Shape",
            "Reshape",
            "Mul",
            "Add"
        ]
    );
    let mha = g
        .node
        .iter()
        .find(|n| n.name == "head.sa.attention")
        .unwrap();
    assert_eq!(
        mha.input,
        ["head.sa.query_t", "head.sa.key_t", "head.sa.value_t"]
    );
    let attr = |name: &str| {
        mha.attribute
            .iter()
            .find(|a| a.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!(attr("num_heads").i, Some(1));
    assert_eq!(attr("scale").f, Some(1.0));
    assert!(ops(g, "head.sc").contains(&"Softmax".to_string()));
    let meta = m
        .metadata_props
        .iter()
        .find(|p| p.key == EXPORT_METADATA_KEY)
        .expect("export options in metadata");
    let v: serde_json::Value = serde_json::from_str(&meta.value).unwrap();
    assert_eq!(v["target"], "ort");
    assert_eq!(v["pam_attention"], "ms-mha");
    assert_eq!(v["cam_attention"], "decomposed");
}

#[test]
fn tensorrt_profile_uses_onnx_attention_23() {
    {
        let target = ExportTarget::TensorRt;
        let opts = ExportOptions::for_target(target);
        assert_eq!(opts.opset, 23);
        let (m, _) = export_decoded_with(&tiny(), &opts);
        assert_eq!(opsets(&m), [(String::new(), 23)], "{target}");
        assert_eq!(m.ir_version, 11);
        let g = m.graph.as_ref().unwrap();
        assert_eq!(
            ops(g, "head.sc"),
            [
                "Reshape",
                "Neg",
                "Attention",
                "Shape",
                "Reshape",
                "Mul",
                "Add"
            ]
        );
        let cam = g
            .node
            .iter()
            .find(|n| n.name == "head.sc.attention")
            .unwrap();
        assert_eq!(cam.input, ["head.sc.query", "head.sc.flat", "head.sc.flat"]);
        for n in g.node.iter().filter(|n| n.op_type == "Attention") {
            let attr = |name: &str| n.attribute.iter().find(|a| a.name == name).unwrap().clone();
            assert_eq!(attr("q_num_heads").i, Some(1));
            assert_eq!(attr("kv_num_heads").i, Some(1));
            assert_eq!(attr("scale").f, Some(1.0));
        }
        assert_eq!(
            g.node.iter().filter(|n| n.op_type == "Attention").count(),
            2
        );
    }
}

#[test]
fn tract_profile_blocks_pam_and_decomposes_cam_at_opset_17() {
    let opts = ExportOptions::for_target(ExportTarget::Tract);
    assert_eq!(opts.opset, 17);
    assert_eq!(opts.conv_split_depth, Some(crate::TRACT_CONV_SPLIT_DEPTH));
    let (m, _) = export_decoded_with(&tiny(), &opts);
    assert_eq!(opsets(&m), [(String::new(), 17)]);
    let g = m.graph.as_ref().unwrap();
    assert!(g.node.iter().all(|n| n.op_type != "Attention"));
    assert!(ops(g, "head.sc").iter().any(|op| op == "Softmax"));
    let meta = m
        .metadata_props
        .iter()
        .find(|p| p.key == EXPORT_METADATA_KEY)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&meta.value).unwrap();
    assert_eq!(v["cam_attention"], "decomposed");
    assert_eq!(v["conv_split_depth"], crate::TRACT_CONV_SPLIT_DEPTH);
}

#[test]
fn attention_override_raises_opset_and_bad_combinations_are_refused() {
    let o = ExportOptions::for_target(ExportTarget::Legacy)
        .with_attention(AttentionForm::OnnxAttention);
    assert_eq!(o.opset, 23);
    let o = ExportOptions::for_target(ExportTarget::Ort)
        .with_attention(AttentionForm::MsMultiHeadAttention);
    assert_eq!(
        (o.pam, o.cam, o.opset),
        (
            AttentionForm::MsMultiHeadAttention,
            AttentionForm::MsMultiHeadAttention,
            17
        )
    );
    let spec = tiny();
    let bytes = serialize(&random_entries(&spec, 7), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let low = o
        .clone()
        .with_attention(AttentionForm::OnnxAttention)
        .with_opset(17);
    let err = export_onnx_bytes(&st, &spec, &low).unwrap_err();
    assert!(
        matches!(err, ExportError::AttentionOpset { needed: 23, .. }),
        "{err}"
    );
    for target in [ExportTarget::TensorRt, ExportTarget::Tract] {
        let o = ExportOptions::for_target(target)
            .with_pam_attention(AttentionForm::MsMultiHeadAttention);
        let err = export_onnx_bytes(&st, &spec, &o).unwrap_err();
        assert!(matches!(err, ExportError::AttentionTarget { .. }), "{err}");
        assert!(err.to_string().contains(target.name()));
    }
    for t in ExportTarget::ALL {
        assert_eq!(t.name().parse::<ExportTarget>().unwrap(), t);
    }
    for f in AttentionForm::ALL {
        assert_eq!(f.name().parse::<AttentionForm>().unwrap(), f);
    }
    assert!("flash".parse::<AttentionForm>().is_err());
}

/// Every profile the CLI can produce (target defaults, `ort` on CUDA, plus each form for
/// ort).
pub fn all_profiles() -> Vec<(String, ExportOptions)> {
    let mut out = Vec::new();
    for t in ExportTarget::ALL {
        out.push((t.name().to_string(), ExportOptions::for_target(t)));
    }
    // The `ort` target for ONNX Runtime's CUDA EP (PAM as MultiHeadAttention).
    out.push((
        "ort-cuda".into(),
        ExportOptions::for_target_on(ExportTarget::Ort, crate::ExportProvider::Cuda),
    ));
    for f in AttentionForm::ALL {
        out.push((
            format!("ort-{}", f.name()),
            ExportOptions::for_target(ExportTarget::Ort).with_attention(f),
        ));
    }
    out
}

#[test]
fn every_profile_is_deterministic() {
    let spec = tiny();
    for (name, opts) in all_profiles() {
        let a = serialize(&random_entries(&spec, 3), Some(&spec));
        let b = serialize(&random_entries(&spec, 3), Some(&spec));
        let sa = safetensors::SafeTensors::deserialize(&a).unwrap();
        let sb = safetensors::SafeTensors::deserialize(&b).unwrap();
        let (x, _) = export_onnx_bytes(&sa, &spec, &opts).unwrap();
        let (y, _) = export_onnx_bytes(&sb, &spec, &opts).unwrap();
        assert!(x == y, "{name}: two exports differ");
    }
}

/// pip `onnx` checker + strict shape inference on every profile, and ONNX Runtime
/// agreement of every profile with the legacy one at two sizes through one dynamic
/// model. Needs the venv python (`SEGTOOL_PYTHON`, set by scripts/setup.sh): a missing
/// reference otherwise (a failure under `make test`, else a counted skip).
#[test]
fn every_profile_passes_onnx_checker_and_agrees_in_ort() {
    let Ok(py) = std::env::var("SEGTOOL_PYTHON") else {
        return crate::testutil::skip::missing_reference(
            "the project venv's python (SEGTOOL_PYTHON), with onnx and onnxruntime",
            "source \"$(bash scripts/setup.sh)\"",
        );
    };
    let spec = tiny();
    let bytes = serialize(&random_entries(&spec, 5), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let dir = std::env::temp_dir().join(format!("segtool-export-profiles-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut paths: Vec<PathBuf> = Vec::new();
    // legacy first: the others are compared with it.
    let mut profiles = all_profiles();
    profiles.sort_by_key(|(n, _)| n != "legacy");
    for (name, opts) in &profiles {
        let (onnx, _) = export_onnx_bytes(&st, &spec, opts).unwrap();
        let p = dir.join(format!("{name}.onnx"));
        std::fs::write(&p, onnx).unwrap();
        paths.push(p);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/check_onnx.py");
    let out = Command::new(py)
        .arg(&script)
        .args(&paths)
        .args(["--run", "40x56", "67x45", "--batch", "2"])
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::remove_dir_all(&dir);
    assert!(out.status.success(), "onnx checks failed");
    for line in stdout.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["checker"], "ok", "{line}");
        for (size, d) in v["max_diff"].as_object().unwrap() {
            let d = d.as_f64().unwrap();
            assert!(d < 1e-4, "{}: {size}: max diff to legacy {d}", v["path"]);
        }
    }
}
