//! The card fields of an mmdeploy SDK folder (`tools/deploy.py ... --dump-info` for
//! mmsegmentation): `deploy.json` names the network file, `pipeline.json` holds the
//! preprocessing the SDK runs and its `ResizeMask` post-processing.
//!
//! Accepts, in the `Transform` task: `LoadImageFromFile`; `Resize` with `keep_ratio`
//! (`size` / `scale` as `[w, h]`, bilinear), which becomes [`InputFields::keep_ratio`]
//! or a fixed size; `Normalize` (mean and std in 0-255, `to_rgb`: the SDK reads BGR, so
//! `to_rgb` means the network takes RGB); `Pad` with `size_divisor`; and the formatting
//! steps (`ImageToTensor`, `DefaultFormatBundle`, `Collect`). The `Net` task's
//! `input_map` names the input. `ResizeMask`'s `num_classes`, `with_argmax` (a class map
//! in the graph, else scores) and `align_corners`. Refuses any other transform, naming it:
//! a card that silently skipped a step would give other masks than the SDK.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::json::{floats, read_json};
use super::{CardFields, ChannelOrder, Fit, OutputKind};
use crate::error::{Result, RuntimeError};

/// The SDK's model list.
pub const DEPLOY: &str = "deploy.json";
/// The SDK's pipeline.
pub const PIPELINE: &str = "pipeline.json";

/// The network file of the SDK folder `folder` (`deploy.json`'s first model's `net`),
/// `None` when `folder` has no `deploy.json`.
pub fn model_file(folder: &Path) -> Result<Option<PathBuf>> {
    let path = folder.join(DEPLOY);
    if !path.is_file() {
        return Ok(None);
    }
    let deploy = read_json(&path)?;
    let net = deploy
        .pointer("/models/0/net")
        .and_then(Value::as_str)
        .ok_or_else(|| card_err(&path, "no models[0].net (the network file)".into()))?;
    Ok(Some(folder.join(net)))
}

/// The fields `folder` gives, `None` when it has no `pipeline.json`.
pub fn read_folder(folder: &Path) -> Result<Option<CardFields>> {
    let path = folder.join(PIPELINE);
    if !path.is_file() {
        return Ok(None);
    }
    let pipeline = read_json(&path)?;
    let err = |message: String| card_err(&path, message);
    let tasks = pipeline
        .pointer("/pipeline/tasks")
        .and_then(Value::as_array)
        .ok_or_else(|| err("no pipeline.tasks".into()))?;
    let module = |name: &str| tasks.iter().find(|t| t["module"] == name);
    let mut f = CardFields::default();
    let transforms = module("Transform")
        .and_then(|t| t["transforms"].as_array())
        .ok_or_else(|| err("no Transform task with transforms".into()))?;
    for t in transforms {
        transform(t, &mut f).map_err(err)?;
    }
    if let Some(input) = module("Net").and_then(|t| t.pointer("/input_map/img")) {
        f.input.name = input.as_str().map(str::to_string);
    }
    let post = tasks
        .iter()
        .find(|t| t["component"] == "ResizeMask")
        .ok_or_else(|| err("no ResizeMask post-processing (not a segmentation SDK)".into()))?;
    let params = &post["params"];
    f.num_classes = params["num_classes"].as_u64().map(|n| n as usize);
    let argmax = params["with_argmax"].as_bool().unwrap_or(true);
    f.output.kind = Some(if argmax {
        OutputKind::ClassMap
    } else {
        OutputKind::Logits
    });
    f.output.align_corners = Some(params["align_corners"].as_bool().unwrap_or(false));
    Ok(Some(f))
}

/// One transform's fields into `f`.
fn transform(t: &Value, f: &mut CardFields) -> std::result::Result<(), String> {
    let kind = t["type"].as_str().unwrap_or_default();
    match kind {
        "LoadImageFromFile" | "ImageToTensor" | "DefaultFormatBundle" | "Collect" => {}
        "Resize" => {
            let size = t
                .get("size")
                .or_else(|| t.get("scale"))
                .and_then(Value::as_array)
                .and_then(|s| {
                    let v: Vec<usize> = s
                        .iter()
                        .filter_map(|x| x.as_u64())
                        .map(|x| x as usize)
                        .collect();
                    (v.len() == 2 && v.iter().all(|&x| x > 0)).then(|| [v[0], v[1]])
                })
                .ok_or_else(|| format!("Resize without a size [w, h]: {t}"))?;
            let interpolation = t["interpolation"].as_str().unwrap_or("bilinear");
            if interpolation != "bilinear" {
                return Err(format!(
                    "Resize interpolation {interpolation:?}: only bilinear is understood"
                ));
            }
            if t["keep_ratio"].as_bool().unwrap_or(false) {
                f.input.keep_ratio = Some(size);
            } else {
                f.input.size = Some([size[1], size[0]]);
            }
        }
        "Normalize" => {
            f.input.mean = Some(floats(t, "mean")?);
            f.input.std = Some(floats(t, "std")?);
            f.input.scale = Some(1.0);
            f.input.channels = Some(if t["to_rgb"].as_bool().unwrap_or(false) {
                ChannelOrder::Rgb
            } else {
                ChannelOrder::Bgr
            });
        }
        "Pad" => {
            let d = t["size_divisor"]
                .as_u64()
                .filter(|d| *d > 0)
                .ok_or_else(|| format!("Pad without a size_divisor: {t}"))?;
            f.input.size_divisor = Some(d as usize);
            f.input.fit = Some(Fit::Pad);
        }
        other => {
            return Err(format!(
                "transform {other:?} is not understood (LoadImageFromFile, Resize, Normalize, \
                 Pad, ImageToTensor, DefaultFormatBundle, Collect are)"
            ))
        }
    }
    Ok(())
}

fn card_err(path: &Path, message: String) -> RuntimeError {
    RuntimeError::Card {
        path: path.to_path_buf(),
        message,
    }
}
