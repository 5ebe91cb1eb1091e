//! Named architectures: the backbones `--backbone` accepts and the model spec of a run
//! configuration.

use anyhow::{bail, Result};
use segtool_core::config::EvalMode;
use segtool_core::config::{named_backbone, RunConfig, BACKBONE_NAMES};
use segtool_model_spec::protocol::Protocol;
use segtool_model_spec::spec::{AuxHeadSpec, MmsegTestCfg};
use segtool_model_spec::{BackboneSpec, ModelSpec};

/// The backbone called `name` (tiny, resnet18/34/50/101/152, resnet50v1c/resnet101v1c:
/// see [`segtool_core::config::named_backbone`]) at `output_stride`.
pub fn backbone_spec(name: &str, output_stride: i64) -> Result<BackboneSpec> {
    match named_backbone(name, output_stride) {
        Some(spec) => Ok(spec),
        None => bail!("unknown backbone {name:?} ({BACKBONE_NAMES})"),
    }
}

/// The model a run configuration trains, with the dataset's classes (and palette).
pub fn model_spec(
    cfg: &RunConfig,
    classes: Vec<String>,
    palette: Option<Vec<[u8; 3]>>,
) -> Result<ModelSpec> {
    let backbone = cfg.backbone_spec()?;
    let mut spec = ModelSpec::new(&cfg.model.backbone, backbone, classes);
    if let Some(p) = palette {
        spec.palette = p;
    }
    spec.align_corners = cfg.model.align_corners;
    spec.aux_head = cfg.model.aux_head.as_ref().map(|a| AuxHeadSpec {
        in_layer: a.in_layer,
        channels: a.channels,
        loss_weight: a.loss_weight,
    });
    // An mmseg recipe's test pipeline goes with the model, so that `segtool eval` and
    // `infer --protocol mmseg` evaluate it as mmseg would.
    let e = &cfg.eval;
    if let (Protocol::Mmseg, Some(scale)) = (e.protocol, e.resize) {
        let slide = match (e.mode, e.crop_size, e.stride) {
            (EvalMode::Sliding, Some(crop), Some(stride)) => Some((crop as usize, stride as usize)),
            _ => None,
        };
        spec.mmseg_test = Some(MmsegTestCfg {
            scale,
            crop: slide.map(|s| s.0),
            stride: slide.map(|s| s.1),
        });
    }
    spec.validate()?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mmseg_presets_record_their_test_pipeline_in_the_spec() {
        let classes = |n: usize| (0..n).map(|c| format!("c{c}")).collect();
        let spec = |name: &str| model_spec(&RunConfig::preset(name).unwrap(), classes(19), None);
        let s = spec("mmseg-danet-r50-d8-cityscapes-769x769-80k").unwrap();
        let want = MmsegTestCfg {
            scale: [2049, 1025],
            crop: Some(769),
            stride: Some(513),
        };
        assert_eq!(s.mmseg_test, Some(want));
        assert!(s.align_corners && s.aux_head.is_some());
        assert_eq!(s.backbone.stem_conv_widths(), [32, 32, 64]);
        let s = spec("mmseg-danet-r101-d8-ade20k-512x512-160k").unwrap();
        let want = MmsegTestCfg {
            scale: [2048, 512],
            crop: None,
            stride: None,
        };
        assert_eq!(s.mmseg_test, Some(want));
        assert_eq!(s.backbone.layers, [3, 4, 23, 3]);
        // The authors' recipes keep DANet's defaults.
        let s = spec("cityscapes-danet-r101").unwrap();
        assert!(s.mmseg_test.is_none() && s.aux_head.is_none() && s.align_corners);
    }

    #[test]
    fn backbones() {
        assert_eq!(backbone_spec("tiny", 16).unwrap().output_stride, 16);
        assert!(backbone_spec("resnet101", 8).is_ok());
        let err = backbone_spec("resnet7", 8).unwrap_err().to_string();
        assert!(err.contains("unknown backbone \"resnet7\""), "{err}");
    }
}
