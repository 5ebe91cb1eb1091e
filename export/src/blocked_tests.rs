//! The `tract` target's rewrites compute what the plain graph computes: PAM in query
//! blocks (`AttentionForm::QueryBlocked`) and convs split along their input channels
//! (`ExportOptions::conv_split_depth`), through tract (1 and 2 threads) and ONNX Runtime
//! (skipped when its library is not found), at sizes whose position count N is a
//! multiple of the block count, is not, and is below it (trailing empty blocks).

use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_runtime::expert::run_logits;
use segtool_runtime::{expert::TractEngine, TractOptions};

use crate::testutil::{export_decoded_with, random_entries, serialize, spec_with};
use crate::{export_onnx, AttentionForm, ExportOptions, ExportTarget, PAM_QUERY_BLOCKS};

fn spec() -> ModelSpec {
    spec_with(BackboneSpec::tiny(), 3)
}

fn max_diff(a: &ndarray::Array4<f32>, b: &ndarray::Array4<f32>) -> f32 {
    assert_eq!(a.shape(), b.shape());
    a.iter()
        .zip(b)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f32::max)
}

#[test]
fn blocked_pam_graph_has_one_energy_per_block() {
    let opts = ExportOptions::for_target(ExportTarget::Tract);
    assert_eq!(
        (opts.pam, opts.cam),
        (AttentionForm::QueryBlocked, AttentionForm::Decomposed)
    );
    let (m, _) = export_decoded_with(&spec(), &opts);
    let g = m.graph.unwrap();
    let count = |op: &str| {
        g.node
            .iter()
            .filter(|n| n.name.starts_with("head.sa") && n.op_type == op)
            .count() as i64
    };
    assert_eq!(count("Softmax"), PAM_QUERY_BLOCKS);
    assert_eq!(count("MatMul"), 2 * PAM_QUERY_BLOCKS);
    assert_eq!(count("Slice"), PAM_QUERY_BLOCKS);
    assert_eq!(count("Attention"), 0);
}

#[test]
fn split_convs_sum_slices_of_the_input_channels() {
    let opts = ExportOptions::for_target(ExportTarget::Tract).with_conv_split_depth(Some(64));
    let (m, _) = export_decoded_with(&spec(), &opts);
    let g = m.graph.unwrap();
    // head.conv5a: 128 -> 32, 3x3 (depth 1152) in 32 slices of 4 channels (depth 36).
    let parts = g
        .node
        .iter()
        .filter(|n| n.op_type == "Conv" && n.name.starts_with("head.conv5a.0.part"))
        .count();
    assert_eq!(parts, 32);
    let sum = g.node.iter().find(|n| n.name == "head.conv5a.0").unwrap();
    assert_eq!((sum.op_type.as_str(), sum.input.len()), ("Sum", 32));
    // Only the first part carries the bias; the stem (3 channels) stays whole.
    let part = |i: usize| {
        g.node
            .iter()
            .find(|n| n.name == format!("head.conv5a.0.part{i}"))
            .unwrap()
    };
    assert_eq!((part(0).input.len(), part(1).input.len()), (3, 2));
    let stem = g
        .node
        .iter()
        .find(|n| n.name == "pretrained.conv1")
        .unwrap();
    assert_eq!(stem.op_type, "Conv");
    assert!(ExportOptions::default()
        .with_conv_split_depth(Some(0))
        .validate()
        .is_err());
}

#[test]
fn blocked_pam_matches_unblocked_in_tract_and_ort() {
    let spec = spec();
    let dir = std::env::temp_dir().join(format!("segtool-export-blocked-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let ckpt = dir.join("ckpt.safetensors");
    std::fs::write(&ckpt, serialize(&random_entries(&spec, 5), Some(&spec))).unwrap();
    let path = |name: &str| dir.join(format!("{name}.onnx"));
    let tract_target = ExportOptions::for_target(ExportTarget::Tract);
    let legacy = ExportOptions::default();
    let blocked_legacy = ExportOptions::default().with_attention(AttentionForm::QueryBlocked);
    // The tiny model's convs are all within the target's depth: split them harder (the
    // stem's 3 channels cannot be halved and stay whole).
    let split = tract_target.clone().with_conv_split_depth(Some(64));
    export_onnx(&ckpt, &path("tract"), &tract_target).unwrap();
    export_onnx(&ckpt, &path("split"), &split).unwrap();
    export_onnx(&ckpt, &path("legacy"), &legacy).unwrap();
    export_onnx(&ckpt, &path("blocked"), &blocked_legacy).unwrap();
    let mut reference =
        TractEngine::open_with(&path("legacy"), &TractOptions::new().with_threads(1)).unwrap();
    let mut one =
        TractEngine::open_with(&path("tract"), &TractOptions::new().with_threads(1)).unwrap();
    let mut two =
        TractEngine::open_with(&path("tract"), &TractOptions::new().with_threads(2)).unwrap();
    let mut blocked = TractEngine::open(&path("blocked")).unwrap();
    let mut split = TractEngine::open(&path("split")).unwrap();
    // Stride 8: 64x64 gives N = 64 (4 per block), 40x72 N = 45 (blocks of 3, the last
    // short), 16x40 N = 10 (< 16: blocks of 1, six empty).
    for (h, w) in [(64, 64), (40, 72), (16, 40)] {
        let x = ndarray::Array4::from_shape_fn((1, 3, h, w), |(_, c, y, x)| {
            ((c * 7 + y * 3 + x * 5) % 23) as f32 / 11.0 - 1.0
        });
        let r = run_logits(&mut reference, x.view()).unwrap();
        for (name, e) in [
            ("tract 1", &mut one),
            ("tract 2", &mut two),
            ("blocked", &mut blocked),
            ("split", &mut split),
        ] {
            let d = max_diff(&r, &run_logits(e, x.view()).unwrap());
            assert!(d < 1e-4, "{name} {h}x{w}: {d}");
        }
        let opts = segtool_runtime::OrtOptions::new().with_intra_threads(1);
        for name in ["tract", "split"] {
            match segtool_runtime::expert::OrtEngine::open(path(name), &opts) {
                Err(segtool_runtime::RuntimeError::OrtLibraryNotFound { tried }) => {
                    crate::testutil::skip::missing_reference(
                        format_args!("the ONNX Runtime library (tried {tried:?})"),
                        "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
                    );
                }
                other => {
                    let d = max_diff(&r, &run_logits(&mut other.unwrap(), x.view()).unwrap());
                    assert!(d < 1e-4, "onnxruntime {name} {h}x{w}: {d}");
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
