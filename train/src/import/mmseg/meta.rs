//! What an mmsegmentation file says about itself beyond its weights: class names,
//! palette and config text from its `meta`, and the settings the weights cannot record
//! (align_corners, dilations, the test pipeline) decided from that config text, else from
//! the zoo's file naming, else from mmseg's DANet defaults.

use std::collections::BTreeMap;

use segtool_model_spec::spec::MmsegTestCfg;

use super::MmsegOverrides;

/// Class names, palette and config text from the file's meta (mmseg 0.x: `CLASSES`,
/// `PALETTE`, `config`; 1.x: `dataset_meta.{classes,palette}`, `cfg`).
#[derive(Default)]
pub(super) struct Meta {
    pub classes: Option<Vec<String>>,
    pub palette: Option<Vec<[u8; 3]>>,
    pub config: Option<String>,
}

impl Meta {
    pub fn read(values: &[(Vec<String>, String)]) -> Self {
        let under = |prefixes: &[&[&str]]| -> Vec<(Vec<String>, String)> {
            for p in prefixes {
                let found: Vec<_> = values
                    .iter()
                    .filter(|(path, _)| path.len() > p.len() && path[..p.len()] == **p)
                    .map(|(path, v)| (path[p.len()..].to_vec(), v.clone()))
                    .collect();
                if !found.is_empty() {
                    return found;
                }
            }
            Vec::new()
        };
        let classes = under(&[&["meta", "CLASSES"], &["meta", "dataset_meta", "classes"]]);
        let classes = (!classes.is_empty()).then(|| {
            let mut c: Vec<(usize, String)> = classes
                .into_iter()
                .filter_map(|(i, v)| Some((i.first()?.parse().ok()?, v)))
                .collect();
            c.sort();
            c.into_iter().map(|(_, v)| v).collect()
        });
        let palette = under(&[&["meta", "PALETTE"], &["meta", "dataset_meta", "palette"]]);
        let mut colours: BTreeMap<usize, [u8; 3]> = BTreeMap::new();
        let mut valid = !palette.is_empty();
        for (idx, v) in palette {
            let (Some(i), Some(j), Ok(x)) = (
                idx.first().and_then(|i| i.parse::<usize>().ok()),
                idx.get(1).and_then(|j| j.parse::<usize>().ok()),
                v.parse::<u8>(),
            ) else {
                valid = false;
                continue;
            };
            if j < 3 {
                colours.entry(i).or_default()[j] = x;
            }
        }
        let palette = valid.then(|| colours.into_values().collect());
        let config = values
            .iter()
            .find(|(p, _)| p.len() == 2 && p[0] == "meta" && (p[1] == "config" || p[1] == "cfg"))
            .map(|(_, v)| v.clone());
        Self {
            classes,
            palette,
            config,
        }
    }
}

/// The settings the weights do not record, decided once.
pub(super) struct Settings {
    pub align_corners: bool,
    pub output_stride: i64,
    pub contract_dilation: bool,
    pub aux_loss_weight: f64,
    pub test: MmsegTestCfg,
}

impl Settings {
    /// Each setting from `overrides`, else the file's `config`, else mmseg's DANet
    /// configs as the `file_name` names them; each decision is noted with its source.
    pub fn decide(
        config: Option<&str>,
        file_name: &str,
        overrides: &MmsegOverrides,
        notes: &mut Vec<String>,
    ) -> Self {
        let name = file_name.to_ascii_lowercase();
        let from_config = |what: &str| config.and_then(|c| config_value(c, what));
        let contract_dilation = from_config("contract_dilation").is_none_or(|v| v == "True");
        let aux_loss_weight = config
            .and_then(|c| c.find("auxiliary_head").map(|i| &c[i..]))
            .and_then(|c| config_value(c, "loss_weight"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.4);
        Self {
            align_corners: align_corners(config, &name, overrides, notes),
            output_stride: output_stride(config, &name, overrides, notes),
            contract_dilation,
            aux_loss_weight,
            test: test_cfg(config, &name, notes),
        }
    }
}

fn note(notes: &mut Vec<String>, what: &str, value: String, source: &str) {
    notes.push(format!("{what} {value} ({source})"));
}

/// `align_corners`: the flag, the config, else true only for the 769x769 crops.
fn align_corners(
    config: Option<&str>,
    name: &str,
    overrides: &MmsegOverrides,
    notes: &mut Vec<String>,
) -> bool {
    let large_crop = name.contains("769x769");
    match (
        overrides.align_corners,
        config.and_then(|c| config_value(c, "align_corners")),
    ) {
        (Some(a), _) => {
            note(notes, "align_corners", a.to_string(), "--align-corners");
            a
        }
        (None, Some(v)) => {
            let a = v == "True";
            note(notes, "align_corners", a.to_string(), "the file's config");
            a
        }
        (None, None) => {
            note(
                notes,
                "align_corners",
                large_crop.to_string(),
                "mmseg's DANet configs: true for 769x769, else false; --align-corners sets it",
            );
            large_crop
        }
    }
}

/// The output stride: the flag, the backbone's dilations in the config, else the file
/// name's `-d8` / `-d16`.
fn output_stride(
    config: Option<&str>,
    name: &str,
    overrides: &MmsegOverrides,
    notes: &mut Vec<String>,
) -> i64 {
    match (
        overrides.output_stride,
        config.and_then(|c| config_value(c, "dilations")),
    ) {
        (Some(os), _) => {
            note(notes, "output stride", os.to_string(), "--output-stride");
            os
        }
        (None, Some(d)) => {
            let os = if d.replace(' ', "").starts_with("(1,1,1,") {
                16
            } else {
                8
            };
            let source = format!("the file's config: dilations={d}");
            note(notes, "output stride", os.to_string(), &source);
            os
        }
        (None, None) => {
            let os = if name.contains("-d16") { 16 } else { 8 };
            note(
                notes,
                "output stride",
                os.to_string(),
                "the file name (-d8 / -d16)",
            );
            os
        }
    }
}

/// The test pipeline: keep-ratio resize scale and whole-image or sliding-window mode,
/// from the config, else the dataset and crop the file name says.
fn test_cfg(config: Option<&str>, name: &str, notes: &mut Vec<String>) -> MmsegTestCfg {
    let large_crop = name.contains("769x769");
    let scale = if name.contains("ade20k") || name.contains("voc") || name.contains("pascal") {
        [2048, 512]
    } else {
        [2048, 1024]
    };
    let scale = config.and_then(|c| scale_of(c)).unwrap_or(scale);
    let slide = match config.and_then(|c| config_value(c, "mode")).as_deref() {
        Some("'slide'") | Some("\"slide\"") => {
            let crop = config
                .and_then(|c| pair_after(c, "crop_size"))
                .map_or(769, |p| p[0]);
            let stride = config
                .and_then(|c| pair_after(c, "stride"))
                .map_or(513, |p| p[0]);
            Some((crop, stride))
        }
        Some(_) => None,
        None => large_crop.then_some((769, 513)),
    };
    let pipeline = match slide {
        Some((c, s)) => format!("keep-ratio resize to {scale:?}, slide crop {c} stride {s}"),
        None => format!("keep-ratio resize to {scale:?}, whole image"),
    };
    let source = match config {
        Some(_) => "the file's config",
        None => "the file name",
    };
    note(notes, "test pipeline", pipeline, source);
    MmsegTestCfg {
        scale,
        crop: slide.map(|s| s.0),
        stride: slide.map(|s| s.1),
    }
}

/// The value after the first `key=` in a config's pretty text, up to `,` or `)` (a
/// parenthesised tuple whole).
fn config_value(config: &str, key: &str) -> Option<String> {
    let pat = format!("{key}=");
    let mut from = 0;
    while let Some(i) = config[from..].find(&pat) {
        let at = from + i;
        // a whole word: `stride=` must not match `strides=`
        let boundary = at == 0
            || !config.as_bytes()[at - 1].is_ascii_alphanumeric()
                && config.as_bytes()[at - 1] != b'_';
        let rest = &config[at + pat.len()..];
        if boundary {
            let end = if rest.starts_with('(') {
                rest.find(')').map_or(rest.len(), |e| e + 1)
            } else {
                rest.find([',', ')', '\n']).unwrap_or(rest.len())
            };
            // pretty_text spreads tuples over lines: one space between items
            let value = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
            return Some(
                value
                    .replace("( ", "(")
                    .replace(", )", ")")
                    .replace(",)", ")"),
            );
        }
        from = at + pat.len();
    }
    None
}

/// `key=(a, b)` as two numbers.
fn pair_after(config: &str, key: &str) -> Option<[usize; 2]> {
    let v = config_value(config, key)?;
    let nums: Vec<usize> = v
        .trim_matches(|c| c == '(' || c == ')')
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    (nums.len() == 2).then(|| [nums[0], nums[1]])
}

/// The test pipeline's resize scale: the `Resize` (1.x `scale=`) or `MultiScaleFlipAug`
/// (0.x `img_scale=`) after `test_pipeline`.
fn scale_of(config: &str) -> Option<[usize; 2]> {
    let test = &config[config.find("test_pipeline")?..];
    let p = pair_after(test, "img_scale").or_else(|| pair_after(test, "scale"))?;
    Some([p[0].max(p[1]), p[0].min(p[1])])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_values_are_whole_words() {
        let c = "model = dict(backbone=dict(strides=(1, 2, 1, 1), dilations=(1, 1, 2, 4)), \
                 test_cfg=dict(mode='slide', crop_size=(769, 769), stride=(513, 513)), align_corners=True)\n\
                 test_pipeline = [dict(type='MultiScaleFlipAug', img_scale=(2049, 1025))]";
        assert_eq!(
            config_value(c, "dilations").as_deref(),
            Some("(1, 1, 2, 4)")
        );
        assert_eq!(pair_after(c, "stride"), Some([513, 513]));
        assert_eq!(pair_after(c, "crop_size"), Some([769, 769]));
        assert_eq!(config_value(c, "mode").as_deref(), Some("'slide'"));
        assert_eq!(config_value(c, "align_corners").as_deref(), Some("True"));
        assert_eq!(scale_of(c), Some([2049, 1025]));
    }

    #[test]
    fn settings_follow_the_config_then_the_name() {
        let mut notes = Vec::new();
        let s = Settings::decide(
            None,
            "danet_r50-d8_769x769_40k_cityscapes_20200530_025703-76681c60.pth",
            &MmsegOverrides::default(),
            &mut notes,
        );
        assert!(s.align_corners);
        assert_eq!((s.test.crop, s.test.stride), (Some(769), Some(513)));
        assert_eq!(s.output_stride, 8);
        let s = Settings::decide(
            None,
            "danet_r50-d8_512x1024_80k_cityscapes.pth",
            &MmsegOverrides::default(),
            &mut notes,
        );
        assert!(!s.align_corners && s.test.crop.is_none());
        assert_eq!(s.test.scale, [2048, 1024]);
        let forced = MmsegOverrides {
            align_corners: Some(true),
            output_stride: None,
        };
        let s = Settings::decide(
            Some("align_corners=False, mode='whole'"),
            "x.pth",
            &forced,
            &mut notes,
        );
        assert!(s.align_corners && s.test.crop.is_none());
    }
}
