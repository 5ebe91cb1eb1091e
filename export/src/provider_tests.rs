//! The `ort` target per execution provider: CUDA gets PAM as fused
//! `com.microsoft.MultiHeadAttention` and no N x N Softmax, the CPU default is unchanged,
//! GPU serving (Triton GPU instances) picks the CUDA form unless asked otherwise, the
//! choice round-trips through the metadata, and the CUDA form computes what the CPU form
//! does in ONNX Runtime's CPU EP (which implements MultiHeadAttention too).

use crate::deploy_tests::{images, tempdir, tiny, write_checkpoint};
use crate::proto::{GraphProto, ModelProto};
use crate::testutil::export_decoded_with;
use crate::{
    export_onnx, AttentionChoice, AttentionForm, ExportError, ExportOptions, ExportProvider,
    ExportTarget, TargetRequest, EXPORT_METADATA_KEY, MS_DOMAIN, PAM_QUERY_BLOCKS,
};

use AttentionForm::{Decomposed, MsMultiHeadAttention, QueryBlocked};
use ExportProvider::{Cpu, Cuda};

use segtool_runtime::expert::SegmenterExt;

/// Nodes of `module` (name prefix) with op type `op`.
fn count(g: &GraphProto, module: &str, op: &str) -> usize {
    g.node
        .iter()
        .filter(|n| n.name.starts_with(module) && n.op_type == op)
        .count()
}

fn export_options(m: &ModelProto) -> serde_json::Value {
    let meta = m
        .metadata_props
        .iter()
        .find(|p| p.key == EXPORT_METADATA_KEY)
        .expect("export options in metadata");
    serde_json::from_str(&meta.value).unwrap()
}

#[test]
fn cuda_ort_export_fuses_pam_and_has_no_n_by_n_softmax() {
    let opts = ExportOptions::for_target_on(ExportTarget::Ort, Cuda);
    assert_eq!(
        (opts.pam, opts.cam, opts.opset, opts.provider),
        (MsMultiHeadAttention, Decomposed, 17, Some(Cuda))
    );
    let (m, _) = export_decoded_with(&tiny(3), &opts);
    let domains: Vec<_> = m.opset_import.iter().map(|o| o.domain.as_str()).collect();
    assert_eq!(domains, ["", MS_DOMAIN]);
    let g = m.graph.as_ref().unwrap();
    // PAM: one fused node over the N positions; no MatMul/Softmax (no N x N energy).
    assert_eq!(count(g, "head.sa", "MultiHeadAttention"), 1);
    assert_eq!(count(g, "head.sa", "Softmax"), 0);
    assert_eq!(count(g, "head.sa", "MatMul"), 0);
    // The only Softmax left is CAM's, over its C x C energy.
    assert_eq!(g.node.iter().filter(|n| n.op_type == "Softmax").count(), 1);
    assert_eq!(count(g, "head.sc", "Softmax"), 1);
    assert_eq!(count(g, "head.sc", "MultiHeadAttention"), 0);
    let mha = g
        .node
        .iter()
        .find(|n| n.op_type == "MultiHeadAttention")
        .unwrap();
    assert_eq!(mha.domain, MS_DOMAIN);
    let attr = |name: &str| {
        mha.attribute
            .iter()
            .find(|a| a.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!((attr("num_heads").i, attr("scale").f), (Some(1), Some(1.0)));
    let v = export_options(&m);
    assert_eq!(v["target"], "ort");
    assert_eq!(v["provider"], "cuda");
    assert_eq!(v["pam_attention"], "ms-mha");
    assert_eq!(v["cam_attention"], "decomposed");
}

#[test]
fn cpu_ort_default_is_unchanged() {
    let cpu = ExportOptions::for_target(ExportTarget::Ort);
    assert_eq!(
        (cpu.pam, cpu.cam, cpu.opset, cpu.provider),
        (QueryBlocked, Decomposed, 17, None)
    );
    let (m, _) = export_decoded_with(&tiny(3), &cpu);
    assert_eq!(m.opset_import.len(), 1);
    let g = m.graph.as_ref().unwrap();
    assert_eq!(count(g, "head.sa", "Softmax"), PAM_QUERY_BLOCKS as usize);
    assert_eq!(count(g, "head.sa", "MultiHeadAttention"), 0);
    // No provider asked: none recorded, so the metadata (and the bytes) stay as they were.
    assert!(export_options(&m).get("provider").is_none());
    // Asking for the CPU explicitly gives the same graph, with the provider recorded.
    let explicit = ExportOptions::for_target_on(ExportTarget::Ort, Cpu);
    assert_eq!(
        (explicit.pam, explicit.cam, explicit.opset),
        (cpu.pam, cpu.cam, cpu.opset)
    );
    let (m2, _) = export_decoded_with(&tiny(3), &explicit);
    assert_eq!(m2.graph, m.graph);
    assert_eq!(export_options(&m2)["provider"], "cpu");
    // `--target ort` without GPU serving is the plain CPU profile.
    let req = TargetRequest {
        target: Some(ExportTarget::Ort),
        ..Default::default()
    };
    assert_eq!(req.options(), cpu);
    assert_eq!(TargetRequest::default().options(), ExportOptions::default());
}

#[test]
fn gpu_serving_selects_the_fused_form_unless_asked_otherwise() {
    let req = |target, provider, gpu_serving| TargetRequest {
        target,
        provider,
        gpu_serving,
    };
    use ExportTarget::{Legacy, Ort, TensorRt, Tract};
    // `--triton DIR --triton-gpus 0,1`, with or without `--target ort`.
    for target in [None, Some(Ort)] {
        let r = req(target, None, true);
        assert_eq!(r.resolve(), (Ort, Some(Cuda)), "{target:?}");
        let o = r.options();
        assert_eq!(o, ExportOptions::for_target_on(Ort, Cuda));
        assert_eq!((o.pam, o.cam), (MsMultiHeadAttention, Decomposed));
    }
    // `--provider cuda` alone means ort.
    assert_eq!(req(None, Some(Cuda), false).resolve(), (Ort, Some(Cuda)));
    // What the user chose stays: the CPU provider, or another target.
    assert_eq!(req(Some(Ort), Some(Cpu), true).options().pam, QueryBlocked);
    assert_eq!(req(None, Some(Cpu), true).resolve(), (Ort, Some(Cpu)));
    for t in [Legacy, TensorRt, Tract] {
        let r = req(Some(t), None, true);
        assert_eq!(r.resolve(), (t, None));
        assert_eq!(r.options(), ExportOptions::for_target(t));
    }
    // No GPUs, nothing asked: legacy, as before.
    assert_eq!(req(None, None, false).resolve(), (Legacy, None));
}

#[test]
fn provider_on_another_target_is_refused() {
    let spec = tiny(3);
    let bytes = crate::testutil::serialize(&crate::testutil::random_entries(&spec, 7), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    for t in [
        ExportTarget::TensorRt,
        ExportTarget::Tract,
        ExportTarget::Legacy,
    ] {
        let err = crate::export_onnx_bytes(&st, &spec, &ExportOptions::for_target_on(t, Cuda))
            .unwrap_err();
        assert!(matches!(err, ExportError::BadOption(_)), "{err}");
        assert!(err.to_string().contains("target `ort`"), "{err}");
    }
    for p in ExportProvider::ALL {
        assert_eq!(p.name().parse::<ExportProvider>().unwrap(), p);
    }
    assert!("rocm".parse::<ExportProvider>().is_err());
}

#[test]
fn recorded_choice_round_trips_and_cpu_forms_get_a_cuda_note() {
    let cases = [
        (
            ExportOptions::for_target(ExportTarget::Ort),
            Some("CPU kernels"),
        ),
        (
            ExportOptions::for_target(ExportTarget::Tract),
            Some("tract"),
        ),
        (ExportOptions::default(), Some("whole N x N")),
        (
            ExportOptions::for_target(ExportTarget::TensorRt),
            Some("TensorRT"),
        ),
        (ExportOptions::for_target_on(ExportTarget::Ort, Cuda), None),
        (
            ExportOptions::for_target_on(ExportTarget::Ort, Cuda).with_attention(QueryBlocked),
            Some("chosen explicitly"),
        ),
    ];
    for (opts, note) in cases {
        let (m, _) = export_decoded_with(&tiny(3), &opts);
        let choice = AttentionChoice::from_export_options(&export_options(&m)).unwrap();
        assert_eq!(choice, opts.attention_choice());
        let got = choice.cuda_note();
        match note {
            None => assert_eq!(got, None, "{choice:?}"),
            Some(why) => {
                let got = got.unwrap_or_else(|| panic!("no note for {choice:?}"));
                assert!(got.contains(why), "{got}");
                assert!(got.contains("--target ort --provider cuda"), "{got}");
            }
        }
    }
    // Options from another exporter say nothing.
    let other = serde_json::json!({"opset": 17});
    assert_eq!(AttentionChoice::from_export_options(&other), None);
}

/// The CUDA form (PAM as MultiHeadAttention) against the CPU form (PAM in query blocks)
/// of one checkpoint, both run by ONNX Runtime's CPU EP through the runtime's Segmenter,
/// at two sizes through one dynamic model: max |logit diff| <= 1e-5 * max(1, max |logit|),
/// a tenth of `segtool export --verify`'s fp32 tolerance (seen here: 3e-6 at max |logit|
/// 9, summation order only). Skipped without the ORT library.
#[test]
fn cuda_form_matches_the_cpu_form_in_ort_cpu() {
    let spec = tiny(5);
    let dir = tempdir("provider");
    let ckpt = write_checkpoint(&dir, &spec, 17);
    let (cpu_path, cuda_path) = (dir.join("cpu.onnx"), dir.join("cuda.onnx"));
    export_onnx(
        &ckpt,
        &cpu_path,
        &ExportOptions::for_target(ExportTarget::Ort),
    )
    .unwrap();
    let cuda = ExportOptions::for_target_on(ExportTarget::Ort, Cuda);
    export_onnx(&ckpt, &cuda_path, &cuda).unwrap();
    let open = |p: &std::path::Path| {
        let backend = segtool_runtime::EngineKind::Ort;
        match segtool_runtime::Segmenter::builder(p)
            .engine(backend)
            .open()
        {
            Err(segtool_runtime::RuntimeError::OrtLibraryNotFound { tried }) => {
                crate::testutil::skip::missing_reference(
                    format_args!("the ONNX Runtime library (tried {tried:?})"),
                    "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
                );
                None
            }
            other => Some(other.unwrap().with_logits(true)),
        }
    };
    let Some(mut cpu_seg) = open(&cpu_path) else {
        return;
    };
    let mut cuda_seg = open(&cuda_path).unwrap();
    assert_eq!(cuda_seg.engine().provider(), "cpu");
    for (w, h, seed) in [(90u32, 70u32, 0u32), (61, 83, 7)] {
        let imgs = images(w, h, seed);
        let logits = |seg: &mut segtool_runtime::Segmenter| -> Vec<f32> {
            seg.segment_batch(&imgs)
                .unwrap()
                .into_iter()
                .flat_map(|s| s.logits.unwrap().into_iter())
                .collect()
        };
        let (reference, fused) = (logits(&mut cpu_seg), logits(&mut cuda_seg));
        assert_eq!(reference.len(), fused.len());
        let diff = reference
            .iter()
            .zip(&fused)
            .map(|(a, b)| (a - b).abs())
            .fold(0f32, f32::max);
        let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
        let tol = 1e-5 * scale.max(1.0);
        eprintln!("{w}x{h}: max |cuda form - cpu form| {diff:.3e} (max |logit| {scale:.2}, tolerance {tol:.1e})");
        assert!(diff <= tol, "{w}x{h}: {diff} > {tol}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
