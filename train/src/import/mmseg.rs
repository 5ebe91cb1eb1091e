//! mmsegmentation's DANet checkpoints: an `EncoderDecoder` with a `ResNetV1c` backbone
//! (`backbone.*`), a `DAHead` (`decode_head.*`) and usually an auxiliary `FCNHead` on
//! layer3 (`auxiliary_head.*`), saved as `{meta: {CLASSES, PALETTE, config}, state_dict}`.
//!
//! Accepts: those files (mmseg 0.x and 1.x meta), with a deep (`stem.*`) or 7x7 stem, any
//! bottleneck ResNet depth, with or without the auxiliary head. Refuses, naming what is
//! missing or different: basic-block ResNets (mmseg's BasicBlock dilates differently),
//! other mmseg models (a PSPNet's `decode_head.psp_modules.*`), an FCN head with more than
//! one conv or `concat_input`, and any `backbone.*`/`decode_head.*`/`auxiliary_head.*`
//! tensor it has no place for. Every tensor is renamed into segtool's names (the authors'
//! DANet state dict, see `model`), so the usual [`super::import_into`] then checks shapes
//! and completeness.
//!
//! What the weights cannot tell (dilations, `contract_dilation`, `align_corners`, the test
//! pipeline) comes from the config text mmseg stores in the file's meta when it is there,
//! else from the zoo's file naming (`..._769x769_...`: align_corners and slide 769/513;
//! `-d16`: output stride 16), else from mmseg's DANet defaults; [`MmsegImport::notes`]
//! says which for each.

use std::collections::BTreeMap;

use anyhow::{bail, Result};
use segtool_model_spec::spec::AuxHeadSpec;
use segtool_model_spec::{BackboneSpec, BlockKind, ModelSpec};

use super::{strip_module, StateDict};

mod meta;

use meta::{Meta, Settings};

/// An mmseg file translated: the model spec and the tensors under segtool's names.
pub struct MmsegImport {
    pub spec: ModelSpec,
    pub state: StateDict,
    /// One line per setting the weights do not record: its value and where it came from.
    pub notes: Vec<String>,
}

/// Settings a user can force where the file cannot tell.
#[derive(Clone, Debug, Default)]
pub struct MmsegOverrides {
    pub align_corners: Option<bool>,
    pub output_stride: Option<i64>,
}

/// Whether `state` is an mmsegmentation segmentor (`backbone.*` and `decode_head.*`).
pub fn is_mmseg(state: &StateDict) -> bool {
    let names = || state.tensors.iter().map(|(n, _)| strip_module(n));
    names().any(|n| n.starts_with("backbone.")) && names().any(|n| n.starts_with("decode_head."))
}

const DAHEAD_KEYS: [&str; 7] = [
    "pam_in_conv.conv.weight",
    "pam.query_project.weight",
    "pam.gamma.scale",
    "cam_in_conv.conv.weight",
    "cam.gamma.scale",
    "pam_conv_seg.weight",
    "conv_seg.weight",
];

/// Reads the architecture of an mmseg DANet file and renames its tensors. `file_name`
/// (the file's name, no folder) stands in for the config when the meta has none.
pub fn from_mmseg(
    state: StateDict,
    file_name: &str,
    overrides: &MmsegOverrides,
) -> Result<MmsegImport> {
    let shapes: BTreeMap<String, Vec<i64>> = state
        .tensors
        .iter()
        .map(|(n, t)| (strip_module(n).to_string(), t.size()))
        .collect();
    check_dahead(&shapes)?;
    let meta = Meta::read(&state.values);
    let mut notes = Vec::new();
    let settings = Settings::decide(meta.config.as_deref(), file_name, overrides, &mut notes);
    let backbone = backbone(&shapes, &settings)?;
    let head = |k: &str| shape(&shapes, &format!("decode_head.{k}"));
    let inter = head("pam_in_conv.conv.weight")?[0];
    let in_ch = head("pam_in_conv.conv.weight")?[1];
    if in_ch != backbone.out_channels() {
        bail!(
            "`decode_head.pam_in_conv.conv.weight` reads {in_ch} channels, but the backbone \
             ends with {} (`in_index` other than the last stage is not supported)",
            backbone.out_channels()
        );
    }
    let qk = head("pam.query_project.weight")?[0];
    let classes = head("conv_seg.weight")?[0] as usize;
    let aux_head = aux_head(&shapes, &backbone, settings.aux_loss_weight)?;
    let names = meta
        .classes
        .filter(|c| c.len() == classes)
        .unwrap_or_else(|| (0..classes).map(|c| format!("class{c}")).collect());
    let depth = backbone.layers.iter().sum::<usize>() * 3 + 2;
    let mut spec = ModelSpec::new(&format!("mmseg-resnet{depth}v1c"), backbone, names);
    if let Some(p) = meta.palette.filter(|p| p.len() == classes) {
        spec.palette = p;
    }
    spec.align_corners = settings.align_corners;
    spec.head_channels = Some([inter, qk]);
    spec.aux_head = aux_head;
    spec.mmseg_test = Some(settings.test);
    spec.validate()?;
    let state = rename(state)?;
    Ok(MmsegImport { spec, state, notes })
}

fn shape<'a>(shapes: &'a BTreeMap<String, Vec<i64>>, name: &str) -> Result<&'a Vec<i64>> {
    match shapes.get(name) {
        Some(s) => Ok(s),
        None => bail!("the file has no `{name}`"),
    }
}

/// A DAHead, or an error naming the first missing tensor and the head modules present.
fn check_dahead(shapes: &BTreeMap<String, Vec<i64>>) -> Result<()> {
    let missing: Vec<&str> = DAHEAD_KEYS
        .iter()
        .copied()
        .filter(|k| !shapes.contains_key(&format!("decode_head.{k}")))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let mut modules: Vec<&str> = shapes
        .keys()
        .filter_map(|n| n.strip_prefix("decode_head."))
        .filter_map(|r| r.split('.').next())
        .collect();
    modules.dedup();
    bail!(
        "an mmsegmentation checkpoint, but its decode_head is not a DAHead (DANet): it lacks \
         `decode_head.{}`{}; its decode_head has modules {}",
        missing[0],
        if missing.len() > 1 {
            format!(" and {} more DAHead tensors", missing.len() - 1)
        } else {
            String::new()
        },
        modules.join(", ")
    )
}

fn backbone(shapes: &BTreeMap<String, Vec<i64>>, settings: &Settings) -> Result<BackboneSpec> {
    let get = |k: &str| shape(shapes, &format!("backbone.{k}"));
    let (deep_stem, stem_widths, stem_out) = if shapes.contains_key("backbone.stem.0.weight") {
        let w = [
            get("stem.0.weight")?[0],
            get("stem.3.weight")?[0],
            get("stem.6.weight")?[0],
        ];
        (true, Some(w), w[2])
    } else {
        (false, None, get("conv1.weight")?[0])
    };
    let mut layers = [0usize; 4];
    for (k, n) in layers.iter_mut().enumerate() {
        *n = (0..)
            .take_while(|i| {
                shapes.contains_key(&format!("backbone.layer{}.{i}.conv1.weight", k + 1))
            })
            .count();
        if *n == 0 {
            bail!("the file has no `backbone.layer{}.0.conv1.weight`", k + 1);
        }
    }
    if !shapes.contains_key("backbone.layer1.0.conv3.weight") {
        // mmseg's BasicBlock keeps its second conv undilated where DANet's dilates it:
        // another network, which this import does not build (the zoo's DANets are R-50/101).
        bail!(
            "the backbone has basic blocks (no `backbone.layer1.0.conv3.weight`: ResNet-18/34);              mmseg's BasicBlock differs from DANet's in its dilations: only bottleneck              ResNets (R-50, R-101) import"
        );
    }
    let block = BlockKind::Bottleneck;
    let width = get("layer1.0.conv1.weight")?[0];
    let spec = BackboneSpec {
        block,
        layers,
        width,
        output_stride: settings.output_stride,
        multi_grid: None,
        deep_stem,
        // PyTorch-Encoding's (w, w, 2w) is the default: record only other widths.
        stem_widths: stem_widths.filter(|s| *s != [width, width, 2 * width]),
        contract_dilation: settings.contract_dilation,
    };
    if spec.stem_channels() != stem_out {
        bail!(
            "the stem ends with {stem_out} channels, expected {}",
            spec.stem_channels()
        );
    }
    spec.validate()?;
    Ok(spec)
}

fn aux_head(
    shapes: &BTreeMap<String, Vec<i64>>,
    backbone: &BackboneSpec,
    loss_weight: f64,
) -> Result<Option<AuxHeadSpec>> {
    let Some(conv) = shapes.get("auxiliary_head.convs.0.conv.weight") else {
        if let Some(other) = shapes.keys().find(|n| n.starts_with("auxiliary_head.")) {
            bail!(
                "the auxiliary head is not a one-conv FCNHead: `{other}` but no \
                 `auxiliary_head.convs.0.conv.weight`"
            );
        }
        return Ok(None);
    };
    let in_layer = (1..=4).find(|&k| backbone.layer_channels(k) == conv[1]);
    let Some(in_layer) = in_layer else {
        bail!(
            "`auxiliary_head.convs.0.conv.weight` reads {} channels: no backbone stage has that many",
            conv[1]
        );
    };
    Ok(Some(AuxHeadSpec {
        in_layer,
        channels: conv[0],
        loss_weight,
    }))
}

/// mmseg module names -> segtool's (the authors' DANet state dict; `model/*.rs`).
const RENAMES: [(&str, &str); 20] = [
    ("backbone.stem.0.", "pretrained.conv1.0."),
    ("backbone.stem.1.", "pretrained.conv1.1."),
    ("backbone.stem.3.", "pretrained.conv1.3."),
    ("backbone.stem.4.", "pretrained.conv1.4."),
    ("backbone.stem.6.", "pretrained.conv1.6."),
    ("backbone.stem.7.", "pretrained.bn1."),
    ("decode_head.pam_in_conv.conv.", "head.conv5a.0."),
    ("decode_head.pam_in_conv.bn.", "head.conv5a.1."),
    ("decode_head.pam.query_project.", "head.sa.query_conv."),
    ("decode_head.pam.key_project.", "head.sa.key_conv."),
    ("decode_head.pam.value_project.", "head.sa.value_conv."),
    ("decode_head.pam_out_conv.conv.", "head.conv51.0."),
    ("decode_head.pam_out_conv.bn.", "head.conv51.1."),
    ("decode_head.cam_in_conv.conv.", "head.conv5c.0."),
    ("decode_head.cam_in_conv.bn.", "head.conv5c.1."),
    ("decode_head.cam_out_conv.conv.", "head.conv52.0."),
    ("decode_head.cam_out_conv.bn.", "head.conv52.1."),
    ("decode_head.pam_conv_seg.", "head.conv6.1."),
    ("decode_head.cam_conv_seg.", "head.conv7.1."),
    ("decode_head.conv_seg.", "head.conv8.1."),
];

const AUX_RENAMES: [(&str, &str); 3] = [
    ("auxiliary_head.convs.0.conv.", "auxlayer.conv5.0."),
    ("auxiliary_head.convs.0.bn.", "auxlayer.conv5.1."),
    ("auxiliary_head.conv_seg.", "auxlayer.conv5.4."),
];

fn segtool_name(key: &str) -> Option<String> {
    match key {
        "decode_head.pam.gamma.scale" => return Some("head.sa.gamma".into()),
        "decode_head.cam.gamma.scale" => return Some("head.sc.gamma".into()),
        _ => {}
    }
    for (from, to) in RENAMES.iter().chain(&AUX_RENAMES) {
        if let Some(rest) = key.strip_prefix(from) {
            return Some(format!("{to}{rest}"));
        }
    }
    for (from, to) in [
        ("backbone.layer", "pretrained.layer"),
        ("backbone.conv1.", "pretrained.conv1."),
        ("backbone.bn1.", "pretrained.bn1."),
    ] {
        if let Some(rest) = key.strip_prefix(from) {
            return Some(format!("{to}{rest}"));
        }
    }
    None
}

/// Every tensor under segtool's name; `Scale`'s 0-dim gammas become DANet's `[1]`.
fn rename(state: StateDict) -> Result<StateDict> {
    let mut tensors = Vec::with_capacity(state.tensors.len());
    let mut unplaced = Vec::new();
    for (key, t) in state.tensors {
        let key = strip_module(&key).to_string();
        match segtool_name(&key) {
            Some(name) if name.ends_with(".gamma") => {
                // tch's reshape panics on a size mismatch: a file's gamma of 2x3 is an error.
                if t.numel() != 1 {
                    bail!(
                        "{key}: a Scale's gamma holds one value, the file's has shape {:?}",
                        t.size()
                    );
                }
                tensors.push((name, t.reshape([1])))
            }
            Some(name) => tensors.push((name, t)),
            None if ["backbone.", "decode_head.", "auxiliary_head."]
                .iter()
                .any(|p| key.starts_with(p)) =>
            {
                unplaced.push(key)
            }
            // Not part of the segmentor (e.g. a data preprocessor's buffers): reported as
            // unexpected by the import.
            None => tensors.push((key, t)),
        }
    }
    if let Some(first) = unplaced.first() {
        bail!(
            "{} tensors of the mmseg DANet have no place in segtool's, e.g. `{first}` \
             (an architecture variant this import does not know)",
            unplaced.len()
        );
    }
    Ok(StateDict { tensors, ..state })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// open-mmlab's ImageNet ResNetV1c (`stem.*`, `layerK.*`, `fc.*`: mmseg's recipe
    /// starts from it) initialises a ResNetV1c backbone whole.
    #[test]
    fn imagenet_resnet_v1c_initialises_the_backbone() {
        use super::super::{import_into, ImportMode};
        let named = segtool_core::config::named_backbone("resnet50v1c", 8).unwrap();
        let backbone = BackboneSpec {
            width: 8,
            stem_widths: Some([4, 4, 8]),
            ..named
        };
        let spec = ModelSpec::new("x", backbone, vec!["a".into(), "b".into()]);
        let vs = tch::nn::VarStore::new(tch::Device::Cpu);
        let _m = crate::DaNet::new(&vs.root(), &spec);
        let mmcv_name = |n: &str| {
            let n = n.strip_prefix("pretrained.")?;
            Some(if let Some(r) = n.strip_prefix("bn1.") {
                format!("stem.7.{r}")
            } else if let Some(r) = n.strip_prefix("conv1.") {
                format!("stem.{r}")
            } else {
                n.to_string()
            })
        };
        let mut tensors: Vec<(String, tch::Tensor)> = vs
            .variables()
            .into_iter()
            .filter_map(|(n, t)| Some((mmcv_name(&n)?, t.detach().copy() + 1.0)))
            .collect();
        tensors.push((
            "fc.weight".into(),
            tch::Tensor::zeros([10, 32], tch::kind::FLOAT_CPU),
        ));
        let state = StateDict {
            tensors,
            skipped: 0,
            root: None,
            values: Vec::new(),
        };
        assert_eq!(ImportMode::detect(&state), ImportMode::Backbone);
        let mut target = tch::nn::VarStore::new(tch::Device::Cpu);
        let _m = crate::DaNet::new(&target.root(), &spec);
        let report = import_into(&mut target, state, ImportMode::Backbone).unwrap();
        report.ensure_complete(ImportMode::Backbone).unwrap();
        assert!(report
            .loaded
            .contains(&"pretrained.conv1.6.weight".to_string()));
        assert!(report
            .loaded
            .contains(&"pretrained.bn1.running_mean".to_string()));
        assert_eq!(report.unexpected, ["pretrained.fc.weight"]);
    }
}
