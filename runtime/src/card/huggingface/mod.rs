//! The card of a Hugging Face folder (`transformers` / Optimum exports): the image
//! processor's `preprocessor_config.json` read as transformers 5 reads it, and
//! `config.json`'s `id2label`.
//!
//! The processor class comes from `image_processor_type` (or transformers 4's
//! `feature_extractor_type`, or else `config.json`'s `model_type`); a key the folder
//! leaves out takes that class's default ([`keys::Processor::defaults`]). Every key the
//! folder holds is applied, listed as having no effect on inference, or refused by name
//! ([`keys::rule`]). transformers 5.25's `AutoImageProcessor.from_pretrained` runs the
//! torchvision backend whatever the folder says (a `...Pil` class name included; the
//! Pillow backend takes `backend="pil"` in code), so the resize is torchvision's with the
//! processor's `resample` kernel; a deployment behind the Pillow backend says so with
//! `input.resize_filter = "pillow"` in a sidecar or card file, which wins over the
//! folder. Outputs come back as `post_process_semantic_segmentation` brings them: the
//! whole output resized to the image (`output.restore = "stretch"`, whatever the crop or
//! padding before the model), `align_corners=False`; MaskFormer, Mask2Former, OneFormer
//! and DETR answer a mask-classification head.

pub mod keys;
#[cfg(test)]
mod tests;

use std::path::Path;

use serde_json::Value;

use self::keys::{rule, KeyRule, Processor, NOT_READ};
use super::json::{floats, read_json};
use super::{
    CardFields, ChannelOrder, Fit, InputFields, OutputKind, Resample, ResizeFilter, Restore,
};
use crate::error::{Result, RuntimeError};

/// The image processor's file.
pub const PREPROCESSOR_CONFIG: &str = "preprocessor_config.json";
/// The model's configuration (class names).
pub const CONFIG: &str = "config.json";

/// Mask2Former's post-processing resizes the mask logits to this first.
const MASK2FORMER_MASK_SIZE: [usize; 2] = [384, 384];

/// A folder's processor and what each key of its `preprocessor_config.json` does.
///
/// # Example
///
/// ```
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::card::huggingface::keys::{KeyRule, Processor};
/// use segtool_runtime::card::huggingface::{key_report, PREPROCESSOR_CONFIG};
/// let folder = tempfile::tempdir()?; // a Hugging Face export's folder
/// std::fs::write(
///     folder.path().join(PREPROCESSOR_CONFIG),
///     r#"{"image_processor_type": "SegformerImageProcessor", "do_reduce_labels": true}"#,
/// )?;
/// let report = key_report(folder.path())?.ok_or("no preprocessor_config.json")?;
/// assert_eq!(report.processor, Processor::Segformer);
/// for (key, rule) in &report.keys {
///     if let KeyRule::NoEffect(why) = rule {
///         println!("{key}: no effect ({why})"); // do_reduce_labels: maps training labels only
///     }
/// }
/// let (_, rule) = report.keys.iter().find(|(key, _)| key == "do_reduce_labels").ok_or("absent")?;
/// assert!(matches!(rule, KeyRule::NoEffect(_)));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct KeyReport {
    /// The processor class (torchvision name) and whether its Pillow backend runs.
    pub processor: Processor,
    /// The folder names the Pillow backend's class (`...Pil`); transformers' loader still
    /// runs the torchvision one, and so does segtool.
    pub pillow: bool,
    /// Each key of the file, in the file's order, with its rule.
    pub keys: Vec<(String, KeyRule)>,
}

/// The fields `folder` gives, `None` when it has no `preprocessor_config.json`.
pub fn read_folder(folder: &Path) -> Result<Option<CardFields>> {
    Ok(read(folder)?.map(|(fields, _)| fields))
}

/// The processor and the rule of every key of `folder`'s `preprocessor_config.json`
/// (`None` without one); an error for a key it refuses.
pub fn key_report(folder: &Path) -> Result<Option<KeyReport>> {
    Ok(read(folder)?.map(|(_, report)| report))
}

fn read(folder: &Path) -> Result<Option<(CardFields, KeyReport)>> {
    let pre_path = folder.join(PREPROCESSOR_CONFIG);
    if !pre_path.is_file() {
        return Ok(None);
    }
    let pre = read_json(&pre_path)?;
    let err = |message: String| RuntimeError::Card {
        path: pre_path.clone(),
        message,
    };
    let Some(own) = pre.as_object() else {
        return Err(err("not a JSON object".into()));
    };
    let config_path = folder.join(CONFIG);
    let config = match config_path.is_file() {
        true => Some(read_json(&config_path)?),
        false => None,
    };
    let (processor, pillow) = processor_of(&pre, config.as_ref()).map_err(err)?;
    let mut report = KeyReport {
        processor,
        pillow,
        keys: Vec::new(),
    };
    for (key, value) in own {
        let r = rule(processor, key);
        // Whatever the value: what `false` or `null` means to a key segtool does not
        // follow is not known here.
        if let KeyRule::Refused(instead) = r {
            return Err(err(format!(
                "key {key:?} ({value}) changes preprocessing in a way segtool does not \
                 follow for {}: give {instead}",
                processor.class()
            )));
        }
        report.keys.push((key.clone(), r));
    }
    let mut merged = processor.defaults();
    if let Some(m) = merged.as_object_mut() {
        m.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    let mut f = fields_of(&merged, processor, pillow).map_err(err)?;
    if let Some(config) = &config {
        f.classes = classes(config).map_err(|message| RuntimeError::Card {
            path: config_path.clone(),
            message,
        })?;
    }
    Ok(Some((f, report)))
}

/// The `preprocessor_config.json` key a card field comes from, for refusals that name it.
pub(super) fn key_of(field: &str) -> Option<&'static str> {
    Some(match field {
        "input.size" | "input.shortest_edge" | "input.longest_edge" => "size",
        "input.center_crop" => "crop_size",
        "input.pad_size" => "pad_size",
        "input.size_divisor" => "size_divisor",
        "input.keep_aspect_ratio" => "keep_aspect_ratio",
        "input.ensure_multiple_of" => "ensure_multiple_of",
        _ => return None,
    })
}

/// The processor class a folder names, and whether its Pillow backend runs.
fn processor_of(
    pre: &Value,
    config: Option<&Value>,
) -> std::result::Result<(Processor, bool), String> {
    let named = ["image_processor_type", "feature_extractor_type"]
        .iter()
        .find_map(|k| pre.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v)));
    if let Some((key, value)) = named {
        let name = value
            .as_str()
            .ok_or_else(|| format!("{key} {value} is not a class name"))?;
        if let Some(found) = Processor::from_class(name) {
            return Ok(found);
        }
        let base = name.trim_end_matches("Pil").trim_end_matches("Fast");
        return Err(match NOT_READ.iter().find(|(class, _)| *class == base) {
            Some((_, why)) => format!("image processor {name} is not read by segtool ({why}): give a card file (--card)"),
            None => format!(
                "image processor {name} is unknown to segtool (it reads {}): give a card file (--card)",
                keys::PROCESSORS.map(Processor::class).join(", ")
            ),
        });
    }
    let model_type = config
        .and_then(|c| c.get("model_type"))
        .and_then(Value::as_str);
    model_type
        .and_then(Processor::from_model_type)
        .map(|p| (p, false))
        .ok_or_else(|| {
            format!(
                "names no image_processor_type, and config.json's model_type {} names none \
                 segtool reads: give a card file (--card)",
                model_type.unwrap_or("(absent)")
            )
        })
}

/// A boolean key: absent or `null` is `None` (unset). Anything but a JSON boolean is
/// refused: transformers tests the value's truth, and Python reads the string `"false"`
/// as true.
fn opt_flag(m: &Value, key: &str) -> std::result::Result<Option<bool>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Bool(b)) => Ok(Some(*b)),
        Some(other) => Err(format!(
            "{key} {other} is not a JSON boolean (true or false)"
        )),
    }
}

/// A boolean key, unset read as false (as the processors test it).
fn flag(m: &Value, key: &str) -> std::result::Result<bool, String> {
    Ok(opt_flag(m, key)?.unwrap_or(false))
}

fn positive(v: &Value) -> Option<usize> {
    v.as_u64().filter(|n| *n > 0).map(|n| n as usize)
}

/// A positive integer key: absent or `null` is `None`; anything else is refused by name.
fn opt_positive(m: &Value, key: &str) -> std::result::Result<Option<usize>, String> {
    match m.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => positive(v)
            .map(Some)
            .ok_or_else(|| format!("{key} {v} is not a positive integer")),
    }
}

/// `{"height", "width"}` or a plain number (a square).
fn height_width(v: &Value, key: &str) -> std::result::Result<[usize; 2], String> {
    if let Some(s) = positive(v) {
        return Ok([s, s]);
    }
    match (
        v.get("height").and_then(positive),
        v.get("width").and_then(positive),
    ) {
        (Some(h), Some(w)) => Ok([h, w]),
        _ => Err(format!(
            "{key} {v} is not {{\"height\", \"width\"}} in positive integers"
        )),
    }
}

/// The card fields of a processor's merged configuration.
fn fields_of(m: &Value, p: Processor, pillow: bool) -> std::result::Result<CardFields, String> {
    let mut f = CardFields::default();
    if flag(m, "do_resize")? {
        resize_fields(m, p, &mut f)?;
    }
    let _ = pillow; // AutoImageProcessor loads the torchvision class even for a `...Pil` name
    pixel_fields(m, p, &mut f.input)?;
    padding_fields(m, p, &mut f.input)?;
    output_fields(p, &mut f);
    Ok(f)
}

/// Resampling, rescale, normalisation, centre crop and channel order.
fn pixel_fields(m: &Value, p: Processor, i: &mut InputFields) -> std::result::Result<(), String> {
    i.resize_filter = Some(ResizeFilter::Torchvision);
    // Every class has a default: only the folder's own `null` leaves it unset.
    let resample = m.get("resample").unwrap_or(&Value::Null);
    i.resample = Some(match resample.as_u64() {
        Some(0) => Resample::Nearest,
        Some(1) => Resample::Lanczos,
        Some(2) => Resample::Bilinear,
        Some(3) => Resample::Bicubic,
        Some(4 | 5) => {
            return Err(format!(
                "resample {resample} (box or hamming) is not followed: give input.resample \
                 (nearest, bilinear, bicubic, lanczos) in a card file"
            ))
        }
        _ => {
            return Err(format!(
                "resample {resample} is not a PIL filter number (0 nearest, 1 lanczos, 2 \
                 bilinear, 3 bicubic)"
            ))
        }
    });
    i.scale = Some(if flag(m, "do_rescale")? {
        let factor = m.get("rescale_factor").unwrap_or(&Value::Null);
        factor
            .as_f64()
            .filter(|f| f.is_finite() && *f > 0.0)
            .ok_or_else(|| format!("rescale_factor {factor} is not a positive number"))?
            as f32
    } else {
        1.0
    });
    // Frames are RGB before the card sees them (each front end converts its pixel format),
    // where the conversion is the identity: either value feeds an RGB photo the same, and
    // `false` only leaves greyscale, palette or RGBA files, which a 3-channel model cannot
    // take as they are, unconverted. Read so that a malformed value is refused.
    flag(m, "do_convert_rgb")?;
    let normalise = p != Processor::MobileVit && flag(m, "do_normalize")?;
    (i.mean, i.std) = if normalise {
        (
            Some(floats(m, "image_mean")?),
            Some(floats(m, "image_std")?),
        )
    } else {
        (Some(vec![0.0; 3]), Some(vec![1.0; 3]))
    };
    if flag(m, "do_center_crop")? {
        let crop = m
            .get("crop_size")
            .ok_or("do_center_crop without crop_size")?;
        i.center_crop = Some(height_width(crop, "crop_size")?);
    }
    let flip = p == Processor::MobileVit && flag(m, "do_flip_channel_order")?;
    i.channels = Some(if flip {
        ChannelOrder::Bgr
    } else {
        ChannelOrder::Rgb
    });
    Ok(())
}

/// Size divisor and padding, refusing the paddings segtool does not follow.
fn padding_fields(m: &Value, p: Processor, i: &mut InputFields) -> std::result::Result<(), String> {
    let divisor = opt_positive(m, "size_divisor")?;
    let pad = flag(m, "do_pad")?;
    match p {
        Processor::Dpt if pad => {
            i.size_divisor = Some(divisor.ok_or("do_pad without a positive size_divisor")?);
            i.fit = Some(Fit::PadCentre);
        }
        Processor::MaskFormer | Processor::Mask2Former if flag(m, "do_resize")? => {
            i.size_divisor = divisor;
            i.fit = divisor.map(|_| Fit::ResizeUp);
        }
        Processor::Eomt if flag(m, "do_split_image")? || pad => {
            return Err(
                "do_split_image or do_pad true: EoMT's overlapping square crops (merged \
                 after the model) and its padding before normalisation are not followed; \
                 give a card file (--card) for a model served without them"
                    .into(),
            )
        }
        Processor::Sapiens2 if pad => {
            return Err(
                "do_pad true: Sapiens2 pads for its normal, albedo and pointmap heads (an \
                 aspect-keeping resize, then centre padding), which segtool does not follow; \
                 give a card file (--card)"
                    .into(),
            )
        }
        _ => {}
    }
    let pads = p.mask_classification() || (p != Processor::Dpt && pad);
    if let Some(pad) = m.get("pad_size").filter(|v| !v.is_null() && pads) {
        i.pad_size = Some(height_width(pad, "pad_size")?);
    }
    match m.get("data_format") {
        None | Some(Value::Null) => {}
        Some(Value::String(f)) if f == "channels_first" => {}
        Some(other) => return Err(format!("data_format {other}: segtool feeds channels_first")),
    }
    Ok(())
}

/// The output: logits, or a mask-classification head's two outputs.
fn output_fields(p: Processor, f: &mut CardFields) {
    let o = &mut f.output;
    o.align_corners = Some(false);
    // OneFormer resizes its scores with torchvision's F.resize (antialiased), the others
    // with F.interpolate.
    o.restore = Some(match p {
        Processor::OneFormer => Restore::StretchAntialias,
        _ => Restore::Stretch,
    });
    if p.mask_classification() {
        o.kind = Some(OutputKind::MaskClassification);
        let (masks, classes) = match p {
            Processor::Detr => ("pred_masks", "logits"),
            _ => ("masks_queries_logits", "class_queries_logits"),
        };
        o.name = Some(masks.into());
        o.class_output = Some(classes.into());
        o.mask_size = match p {
            Processor::Mask2Former => Some(MASK2FORMER_MASK_SIZE),
            // EoMT resizes the masks to (shortest_edge, longest_edge) of its size.
            Processor::Eomt => f
                .input
                .shortest_edge
                .map(|s| [s, f.input.longest_edge.unwrap_or(s)]),
            _ => None,
        };
    } else {
        o.kind = Some(OutputKind::Logits);
    }
}

/// `size` (and MaskFormer's `max_size`): a fixed size, the shortest edge, or the
/// shortest and longest edge, with DPT's aspect keeping.
fn resize_fields(m: &Value, p: Processor, f: &mut CardFields) -> std::result::Result<(), String> {
    let i = &mut f.input;
    let size = m
        .get("size")
        .filter(|v| !v.is_null())
        .ok_or("do_resize without size")?;
    let max_size = opt_positive(m, "max_size")?;
    let square = opt_flag(m, "default_to_square")?.unwrap_or(p.int_size_is_square());
    if let Some(s) = positive(size) {
        if square {
            i.size = Some([s, s]);
        } else {
            i.shortest_edge = Some(s);
            i.longest_edge = max_size;
        }
    } else if let (Some(h), Some(w)) = (size.get("height"), size.get("width")) {
        i.size = Some(height_width(
            &serde_json::json!({"height": h, "width": w}),
            "size",
        )?);
    } else if let Some(short) = size.get("shortest_edge").and_then(positive) {
        i.shortest_edge = Some(short);
        let longest =
            opt_positive(size, "longest_edge").map_err(|e| format!("size {size}: {e}"))?;
        i.longest_edge = longest.or(max_size);
    } else {
        return Err(format!(
            "size {size} is not {{\"height\", \"width\"}}, {{\"shortest_edge\"}} or \
             {{\"shortest_edge\", \"longest_edge\"}}: give input.size or input.shortest_edge \
             in a card file"
        ));
    }
    if p.mask_classification() && i.shortest_edge.is_some() && i.longest_edge.is_none() {
        return Err(format!(
            "size {size}: {} resizes by the shortest and the longest edge; the longest is missing",
            p.class()
        ));
    }
    if p == Processor::Dpt {
        if i.size.is_none() {
            return Err(format!(
                "size {size}: DPT's processor takes {{\"height\", \"width\"}}"
            ));
        }
        i.keep_aspect_ratio = Some(flag(m, "keep_aspect_ratio")?);
        i.ensure_multiple_of = opt_positive(m, "ensure_multiple_of")?.filter(|&k| k > 1);
    }
    Ok(())
}

/// `id2label`'s names in id order (`None` without it).
fn classes(config: &Value) -> std::result::Result<Option<Vec<String>>, String> {
    let map = match config.get("id2label") {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Object(map)) => map,
        Some(other) => return Err(format!("id2label {other} is not an object of class names")),
    };
    let mut pairs: Vec<(usize, String)> = Vec::new();
    for (k, v) in map {
        let id = k
            .parse::<usize>()
            .map_err(|_| format!("id2label key {k:?} is not a class id"))?;
        let name = v
            .as_str()
            .ok_or_else(|| format!("id2label {k:?} holds {v}, not a class name"))?;
        pairs.push((id, name.to_string()));
    }
    pairs.sort();
    if pairs.iter().enumerate().any(|(i, (id, _))| i != *id) {
        return Err("id2label's ids are not 0, 1, 2, ... without gaps".into());
    }
    Ok(Some(pairs.into_iter().map(|(_, name)| name).collect()))
}
