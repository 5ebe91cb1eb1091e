//! Card presets: the preprocessing of a well-known pipeline in one word.
//!
//! - `torchvision[:SIZE]`: torchvision's segmentation weights' own transforms,
//!   `SemanticSegmentation(resize_size=520)` (DeepLabV3, FCN, LR-ASPP): the short side
//!   resized to SIZE (default 520, aspect kept, the long side truncated) with torchvision's
//!   antialiased bilinear resize, pixels scaled to 0-1, ImageNet mean and std, RGB; the
//!   output (`"out"`, at the input's size) resized back to the image bilinearly with
//!   `align_corners=False`.

use super::{CardFields, ChannelOrder, OutputKind, Resample, ResizeFilter};

/// The presets [`preset`] knows.
pub const PRESETS: [&str; 1] = ["torchvision[:SIZE]"];

/// The fields of preset `name` (see the module docs); the error lists the presets.
pub fn preset(name: &str) -> Result<CardFields, String> {
    let (base, arg) = match name.split_once(':') {
        Some((b, a)) => (b, Some(a)),
        None => (name, None),
    };
    match base {
        "torchvision" => {
            let size = match arg {
                None => 520,
                Some(a) => a
                    .parse::<usize>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("preset {name:?}: {a:?} is not a positive size"))?,
            };
            let mut f = CardFields::default();
            f.input.shortest_edge = Some(size);
            f.input.resize_filter = Some(ResizeFilter::Torchvision);
            f.input.resample = Some(Resample::Bilinear);
            f.input.scale = Some(1.0 / 255.0);
            f.input.mean = Some(vec![0.485, 0.456, 0.406]);
            f.input.std = Some(vec![0.229, 0.224, 0.225]);
            f.input.channels = Some(ChannelOrder::Rgb);
            f.output.kind = Some(OutputKind::Logits);
            f.output.align_corners = Some(false);
            Ok(f)
        }
        _ => Err(format!(
            "unknown preset {name:?} (presets: {})",
            PRESETS.join(", ")
        )),
    }
}

/// `fields` with each field it leaves open taken from `fallback`.
pub fn fill(fields: CardFields, fallback: CardFields) -> CardFields {
    // Serialised through JSON so that a field added to the card is never forgotten here.
    let mut top = serde_json::to_value(fields).expect("plain struct");
    let bottom = serde_json::to_value(fallback).expect("plain struct");
    merge_json(&mut top, bottom);
    serde_json::from_value(top).expect("the same struct")
}

fn merge_json(top: &mut serde_json::Value, bottom: serde_json::Value) {
    if let (serde_json::Value::Object(t), serde_json::Value::Object(b)) = (top, bottom) {
        for (k, v) in b {
            match t.get_mut(&k) {
                Some(existing) if !existing.is_null() => merge_json(existing, v),
                _ => {
                    t.insert(k, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchvision_preset_and_fill() {
        let f = preset("torchvision").unwrap();
        assert_eq!(f.input.shortest_edge, Some(520));
        assert_eq!(
            preset("torchvision:480").unwrap().input.shortest_edge,
            Some(480)
        );
        assert!(preset("torchvision:0").is_err());
        assert!(preset("mmseg").unwrap_err().contains("torchvision"));
        let mut mine = CardFields::default();
        mine.input.mean = Some(vec![0.5; 3]);
        let both = fill(mine, f);
        assert_eq!(both.input.mean, Some(vec![0.5; 3]));
        assert_eq!(both.input.shortest_edge, Some(520));
    }
}
