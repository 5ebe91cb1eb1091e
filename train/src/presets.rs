//! Named architectures: the backbones `--backbone` accepts and the model spec of a run
//! configuration.

use anyhow::{bail, Result};
use segtool_core::config::RunConfig;
use segtool_core::{BackboneSpec, ModelSpec};

/// The backbone called `name` (tiny, resnet18/34/50/101/152) at `output_stride`.
pub fn backbone_spec(name: &str, output_stride: i64) -> Result<BackboneSpec> {
    if name == "tiny" {
        return Ok(BackboneSpec {
            output_stride,
            ..BackboneSpec::tiny()
        });
    }
    let depth = name.strip_prefix("resnet").and_then(|d| d.parse().ok());
    match depth.and_then(|d| BackboneSpec::resnet(d, output_stride)) {
        Some(spec) => Ok(spec),
        None => bail!("unknown backbone {name:?} (tiny, resnet18/34/50/101/152)"),
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
    spec.validate()?;
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backbones() {
        assert_eq!(backbone_spec("tiny", 16).unwrap().output_stride, 16);
        assert!(backbone_spec("resnet101", 8).is_ok());
        let err = backbone_spec("resnet7", 8).unwrap_err().to_string();
        assert!(err.contains("unknown backbone \"resnet7\""), "{err}");
    }
}
