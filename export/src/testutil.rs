//! Test fixtures: random checkpoints in DANet v0.5.0's naming, built from an
//! enumeration written independently of the exporter (so a misspelt key in the exporter
//! fails the tests instead of being mirrored by them).

use prost::Message;
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use segtool_model_spec::{BackboneSpec, BlockKind, ModelSpec, SPEC_METADATA_KEY};

use crate::proto::{GraphProto, ModelProto};
use crate::{export_onnx_bytes, ExportOptions, ExportReport};

/// segtool-testkit's skip helper (`missing_reference`, `skipped`), by path: this crate's
/// tests do not depend on testkit.
#[path = "../../testkit/src/skip.rs"]
#[allow(dead_code)]
pub mod skip;

pub fn spec_with(backbone: BackboneSpec, classes: usize) -> ModelSpec {
    ModelSpec::new(
        "test",
        backbone,
        (0..classes).map(|i| format!("class{i}")).collect(),
    )
}

/// Every float parameter a DANet checkpoint holds, with its PyTorch shape (conv6/conv7
/// included: a real checkpoint has them).
pub fn param_shapes(spec: &ModelSpec) -> Vec<(String, Vec<usize>)> {
    let b = &spec.backbone;
    let mut out = Vec::new();
    let conv = |out: &mut Vec<(String, Vec<usize>)>, k: &str, o: i64, i: i64, s: i64| {
        out.push((
            format!("{k}.weight"),
            vec![o as usize, i as usize, s as usize, s as usize],
        ));
    };
    let bn = |out: &mut Vec<(String, Vec<usize>)>, k: &str, c: i64| {
        for p in ["weight", "bias", "running_mean", "running_var"] {
            out.push((format!("{k}.{p}"), vec![c as usize]));
        }
    };
    if b.deep_stem {
        // PyTorch-Encoding deep_base: Sequential(conv, BN, ReLU, conv, BN, ReLU, conv).
        conv(&mut out, "pretrained.conv1.0", b.width, 3, 3);
        bn(&mut out, "pretrained.conv1.1", b.width);
        conv(&mut out, "pretrained.conv1.3", b.width, b.width, 3);
        bn(&mut out, "pretrained.conv1.4", b.width);
        conv(&mut out, "pretrained.conv1.6", 2 * b.width, b.width, 3);
    } else {
        conv(&mut out, "pretrained.conv1", b.width, 3, 7);
    }
    let mut inplanes = if b.deep_stem { 2 * b.width } else { b.width };
    bn(&mut out, "pretrained.bn1", inplanes);
    for k in 1..=4usize {
        let planes = b.width * (1 << (k - 1));
        let outp = planes * b.block.expansion();
        for i in 0..b.layers[k - 1] {
            let p = format!("pretrained.layer{k}.{i}");
            let convs: Vec<(i64, i64, i64)> = match b.block {
                BlockKind::Basic => vec![(planes, inplanes, 3), (planes, planes, 3)],
                BlockKind::Bottleneck => vec![
                    (planes, inplanes, 1),
                    (planes, planes, 3),
                    (outp, planes, 1),
                ],
            };
            for (j, (o, i_, s)) in convs.into_iter().enumerate() {
                conv(&mut out, &format!("{p}.conv{}", j + 1), o, i_, s);
                bn(&mut out, &format!("{p}.bn{}", j + 1), o);
            }
            if i == 0 && (inplanes != outp || b.stage(k).0 != 1) {
                conv(&mut out, &format!("{p}.downsample.0"), outp, inplanes, 1);
                bn(&mut out, &format!("{p}.downsample.1"), outp);
            }
            inplanes = outp;
        }
    }
    let (inc, inter, qk) = (b.out_channels(), spec.inter_channels(), spec.qk_channels());
    for (name, i) in [
        ("conv5a", inc),
        ("conv5c", inc),
        ("conv51", inter),
        ("conv52", inter),
    ] {
        conv(&mut out, &format!("head.{name}.0"), inter, i, 3);
        bn(&mut out, &format!("head.{name}.1"), inter);
    }
    for (name, o) in [("query_conv", qk), ("key_conv", qk), ("value_conv", inter)] {
        conv(&mut out, &format!("head.sa.{name}"), o, inter, 1);
        out.push((format!("head.sa.{name}.bias"), vec![o as usize]));
    }
    out.push(("head.sa.gamma".into(), vec![1]));
    out.push(("head.sc.gamma".into(), vec![1]));
    let nclass = spec.num_classes() as i64;
    for name in ["conv6", "conv7", "conv8"] {
        conv(&mut out, &format!("head.{name}.1"), nclass, inter, 1);
        out.push((format!("head.{name}.1.bias"), vec![nclass as usize]));
    }
    out
}

/// An editable checkpoint: (key, dtype, shape, little-endian bytes).
pub type Entries = Vec<(String, Dtype, Vec<usize>, Vec<u8>)>;

/// Random parameters (deterministic per seed; BN variances positive, gammas nonzero so
/// attention matters), plus the i64 `num_batches_tracked` scalars real checkpoints carry.
pub fn random_entries(spec: &ModelSpec, seed: u64) -> Entries {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = Entries::new();
    for (key, shape) in param_shapes(spec) {
        let n: usize = shape.iter().product();
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                let u = next();
                if key.ends_with("running_var") || key.ends_with("gamma") {
                    (0.5 + u) as f32
                } else {
                    (u - 0.5) as f32 * 0.5
                }
            })
            .collect();
        if key.ends_with("running_var") {
            let nbt = key.replace("running_var", "num_batches_tracked");
            out.push((nbt, Dtype::I64, vec![], 100i64.to_le_bytes().to_vec()));
        }
        out.push((
            key,
            Dtype::F32,
            shape,
            vals.iter().flat_map(|v| v.to_le_bytes()).collect(),
        ));
    }
    out
}

/// safetensors bytes with the spec in the header metadata (when given).
pub fn serialize(entries: &Entries, spec: Option<&ModelSpec>) -> Vec<u8> {
    let views = entries.iter().map(|(k, dt, shape, data)| {
        (
            k.clone(),
            TensorView::new(*dt, shape.clone(), data).expect("view"),
        )
    });
    let meta = spec.map(|s| {
        [(SPEC_METADATA_KEY.to_string(), s.to_json())]
            .into_iter()
            .collect()
    });
    safetensors::serialize(views, meta).expect("serialize")
}

pub fn export_decoded_with(spec: &ModelSpec, opts: &ExportOptions) -> (ModelProto, ExportReport) {
    let bytes = serialize(&random_entries(spec, 7), Some(spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).expect("deserialize");
    let (onnx, report) = export_onnx_bytes(&st, spec, opts).expect("export");
    assert_eq!(report.bytes, onnx.len() as u64);
    (
        ModelProto::decode(onnx.as_slice()).expect("decodes"),
        report,
    )
}

pub fn export_decoded(spec: &ModelSpec) -> (ModelProto, ExportReport) {
    export_decoded_with(spec, &ExportOptions::default())
}

/// The int-list attribute `attr` of the node named `node`.
pub fn conv_attr(g: &GraphProto, node: &str, attr: &str) -> Vec<i64> {
    let n = g
        .node
        .iter()
        .find(|n| n.name == node)
        .unwrap_or_else(|| panic!("no node {node}"));
    n.attribute
        .iter()
        .find(|a| a.name == attr)
        .unwrap_or_else(|| panic!("{node} has no {attr}"))
        .ints
        .clone()
}
