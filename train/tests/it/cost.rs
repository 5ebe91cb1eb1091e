//! The analytic cost model (`segtool model info`) agrees with the real model: parameter
//! and buffer counts per top-level module equal the VarStore's, the head's input size
//! equals what the backbone produces, and the attention-byte figures are the documented
//! ones.

use crate::common;

use std::collections::BTreeMap;

use common::*;
use segtool_model_spec::BackboneSpec;
use segtool_train::model::{
    attention_matrix_bytes, feature_size, module_costs, pam_cam_attention_bytes, AttentionImpl,
    ResNet,
};
use segtool_train::DaNet;
use tch::nn::{self, ModuleT};
use tch::{Kind, Tensor};

fn check_counts(backbone: BackboneSpec) {
    let spec = spec(backbone, 7);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &spec);
    // (params, buffers) per `pretrained.X` / `head.X`.
    let mut actual: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    for (name, t) in vs.variables() {
        let module = name.split('.').take(2).collect::<Vec<_>>().join(".");
        let entry = actual.entry(module).or_default();
        if name.contains("running_") {
            entry.1 += t.numel() as u64;
        } else {
            entry.0 += t.numel() as u64;
        }
    }
    let costs = module_costs(&spec, 64, 80, AttentionImpl::Explicit);
    let predicted: BTreeMap<String, (u64, u64)> = costs
        .iter()
        .map(|c| (c.name.clone(), (c.params, c.buffers)))
        .collect();
    assert_eq!(predicted, actual, "{:?}", spec.backbone);
}

#[test]
fn parameter_counts_match_the_varstore() {
    let mut r50 = BackboneSpec::resnet(50, 8).unwrap();
    check_counts(r50.clone());
    r50.deep_stem = true;
    r50.multi_grid = Some(vec![4, 8, 16]);
    check_counts(r50);
    check_counts(BackboneSpec {
        deep_stem: true,
        stem_widths: None,
        contract_dilation: true,
        ..BackboneSpec::resnet(18, 16).unwrap()
    });
    check_counts(BackboneSpec::tiny());
}

#[test]
fn resnet50_total_is_the_published_size() {
    // DANet-R50: ResNet-50 without fc (23.5M) + head; 47.4M for 19 classes.
    let spec = spec(BackboneSpec::resnet(50, 8).unwrap(), 19);
    let costs = module_costs(&spec, 512, 512, AttentionImpl::Explicit);
    let backbone: u64 = costs
        .iter()
        .filter(|c| c.name.starts_with("pretrained."))
        .map(|c| c.params)
        .sum();
    assert_eq!(backbone, 23_508_032);
}

#[test]
fn feature_size_matches_the_backbone_output() {
    for (backbone, h, w) in [
        (BackboneSpec::tiny(), 67, 45),
        (
            BackboneSpec {
                deep_stem: true,
                stem_widths: None,
                contract_dilation: true,
                ..BackboneSpec::tiny()
            },
            61,
            50,
        ),
        (
            BackboneSpec {
                output_stride: 16,
                ..small_bottleneck(16, None)
            },
            97,
            33,
        ),
    ] {
        let vs = nn::VarStore::new(tch::Device::Cpu);
        let net = ResNet::new(&vs.root(), &backbone);
        let out = tch::no_grad(|| {
            net.forward_t(
                &Tensor::zeros([1, 3, h, w], (Kind::Float, tch::Device::Cpu)),
                false,
            )
        });
        let (_, _, fh, fw) = out.size4().unwrap();
        assert_eq!(
            feature_size(&backbone, h, w),
            (fh, fw),
            "{backbone:?} at {h}x{w}"
        );
    }
}

#[test]
fn attention_bytes() {
    let spec = spec(BackboneSpec::resnet(50, 8).unwrap(), 19);
    // 512x512, OS8: N = 64*64 = 4096 positions, C = 512 channels.
    let explicit = pam_cam_attention_bytes(&spec, 512, 512, AttentionImpl::Explicit);
    assert_eq!(
        (explicit.pam, explicit.cam),
        (4096 * 4096 * 4, 512 * 512 * 4)
    );
    assert_eq!(
        attention_matrix_bytes(&spec, 512, 512, AttentionImpl::Explicit),
        explicit.pam + explicit.cam
    );
    // A 768 crop: 85M floats (DESIGN.md's 340 MB).
    assert_eq!(
        pam_cam_attention_bytes(&spec, 768, 768, AttentionImpl::Explicit).pam,
        96u64.pow(4) * 4
    );
    // SDPA: tiles per thread plus one logsumexp per row and head, far below N^2.
    let sdpa = pam_cam_attention_bytes(&spec, 512, 512, AttentionImpl::Sdpa);
    let threads = tch::get_num_threads() as u64;
    // 256-query x 512-key tiles (N >= 768); backward's two score tiles + row sums are the
    // larger pass; 8 heads x 4096 rows of logsumexp.
    assert_eq!(sdpa.pam, 4 * (threads * (2 * 256 * 512 + 256) + 8 * 4096));
    // Linear in N: 4x the positions adds only logsumexp rows.
    let bigger = pam_cam_attention_bytes(&spec, 1024, 1024, AttentionImpl::Sdpa);
    assert_eq!(bigger.pam - sdpa.pam, 4 * 8 * (16384 - 4096));
}
