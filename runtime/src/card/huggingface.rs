//! The card fields of a Hugging Face folder (`transformers` / Optimum exports):
//! `preprocessor_config.json` (an image processor's `do_resize` + `size`, `do_rescale` +
//! `rescale_factor`, `do_normalize` + `image_mean` / `image_std`) and `config.json`
//! (`id2label`). Models take RGB; logits may come out at a fraction of the input
//! (SegFormer: 1/4) and are upsampled with `align_corners=false`, as
//! `post_process_semantic_segmentation` does.

use std::path::Path;

use serde_json::Value;

use super::json::{floats, read_json};
use super::{CardFields, Fit, OutputKind, ResizeFilter};
use crate::error::{Result, RuntimeError};

/// The image processor's file.
pub const PREPROCESSOR_CONFIG: &str = "preprocessor_config.json";
/// The model's configuration (class names).
pub const CONFIG: &str = "config.json";

/// The fields `folder` gives, `None` when it has no `preprocessor_config.json`.
pub fn read_folder(folder: &Path) -> Result<Option<CardFields>> {
    let pre_path = folder.join(PREPROCESSOR_CONFIG);
    if !pre_path.is_file() {
        return Ok(None);
    }
    let pre = read_json(&pre_path)?;
    let err = |message: String| RuntimeError::Card {
        path: pre_path.clone(),
        message,
    };
    let mut f = CardFields::default();
    let flag = |key: &str, default: bool| pre.get(key).and_then(Value::as_bool).unwrap_or(default);
    if flag("do_resize", true) {
        let size = pre
            .get("size")
            .ok_or_else(|| err("do_resize without size".into()))?;
        let (h, w) = match (size.get("height"), size.get("width")) {
            (Some(h), Some(w)) => (as_usize(h), as_usize(w)),
            _ => {
                return Err(err(format!(
                    "size {size} is not {{\"height\", \"width\"}}: only fixed-size processors \
                     (SegFormer's, DPT's) are understood; give input.size in a card"
                )))
            }
        };
        let (Some(h), Some(w)) = (h, w) else {
            return Err(err(format!(
                "size {size}: height and width must be positive integers"
            )));
        };
        f.input.size = Some([h, w]);
        f.input.fit = Some(Fit::Resize);
        // transformers 5 resizes with torchvision (antialiased, on uint8) whatever the
        // saved processor type, unless the folder asks for its Pillow backend.
        let pil = pre
            .get("image_processor_type")
            .and_then(Value::as_str)
            .is_some_and(|t| t.ends_with("Pil"));
        f.input.resize_filter = Some(if pil {
            ResizeFilter::Pillow
        } else {
            ResizeFilter::Torchvision
        });
    }
    f.input.scale = Some(if flag("do_rescale", true) {
        pre.get("rescale_factor")
            .and_then(Value::as_f64)
            .unwrap_or(1.0 / 255.0) as f32
    } else {
        1.0
    });
    if flag("do_normalize", true) {
        f.input.mean = Some(floats(&pre, "image_mean").map_err(err)?);
        f.input.std = Some(floats(&pre, "image_std").map_err(err)?);
    } else {
        f.input.mean = Some(vec![0.0; 3]);
        f.input.std = Some(vec![1.0; 3]);
    }
    f.input.channels = Some(super::ChannelOrder::Rgb);
    f.output.kind = Some(OutputKind::Logits);
    f.output.align_corners = Some(false);
    let config_path = folder.join(CONFIG);
    if config_path.is_file() {
        let config = read_json(&config_path)?;
        if let Some(map) = config.get("id2label").and_then(Value::as_object) {
            let mut pairs: Vec<(usize, String)> = Vec::new();
            for (k, v) in map {
                let id = k.parse::<usize>().map_err(|_| RuntimeError::Card {
                    path: config_path.clone(),
                    message: format!("id2label key {k:?} is not a class id"),
                })?;
                pairs.push((id, v.as_str().unwrap_or_default().to_string()));
            }
            pairs.sort();
            if pairs.iter().enumerate().any(|(i, (id, _))| i != *id) {
                return Err(RuntimeError::Card {
                    path: config_path,
                    message: "id2label's ids are not 0, 1, 2, ... without gaps".into(),
                });
            }
            f.classes = Some(pairs.into_iter().map(|(_, name)| name).collect());
        }
    }
    Ok(Some(f))
}

fn as_usize(v: &Value) -> Option<usize> {
    v.as_u64().filter(|n| *n > 0).map(|n| n as usize)
}
