//! The readers of `preprocessor_config.json` and `config.json`: each key is applied or
//! refused by name (the file, the key, the value), never read as a guess.

use std::path::{Path, PathBuf};

use segtool_testkit::{foreign_model_bytes, with_fixed_size};

use super::*;
use crate::card::pipeline::{self, Geometry};
use crate::card::{resolve, write_card, CardRequest, CardSource, ModelCard, Resample};

/// `preprocessor_config.json` (and `config.json` where given) written into `dir`.
fn folder(dir: &Path, pre: &str, config: Option<&str>) {
    std::fs::write(dir.join(PREPROCESSOR_CONFIG), pre).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join(CONFIG), config).unwrap();
    }
}

/// The folder's fields, or its refusal's message.
fn read_pre(pre: &str) -> std::result::Result<CardFields, String> {
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), pre, None);
    read_folder(dir.path())
        .map(|f| f.expect("a preprocessor_config.json"))
        .map_err(|e| e.to_string())
}

/// A refusal names the file, the key and the value.
fn assert_refused(pre: &str, key: &str, value: &str) {
    let e = read_pre(pre).expect_err(pre);
    for what in [PREPROCESSOR_CONFIG, key, value] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
}

#[test]
fn booleans_given_as_strings_are_refused_not_read_as_false() {
    let beit = r#"{"image_processor_type": "BeitImageProcessor", "KEY": "true"}"#;
    for key in [
        "do_resize",
        "do_rescale",
        "do_normalize",
        "do_center_crop",
        "do_pad",
        "do_convert_rgb",
    ] {
        assert_refused(&beit.replace("KEY", key), key, "\"true\"");
    }
    let dpt = r#"{"image_processor_type": "DPTImageProcessor", "keep_aspect_ratio": "false"}"#;
    assert_refused(dpt, "keep_aspect_ratio", "\"false\"");
    // JSON booleans and null (unset) are read.
    let f = read_pre(
        r#"{"image_processor_type": "BeitImageProcessor", "do_center_crop": true,
            "do_pad": null, "crop_size": {"height": 20, "width": 30}}"#,
    )
    .unwrap();
    assert_eq!(f.input.center_crop, Some([20, 30]));
}

#[test]
fn resample_and_rescale_factor_are_followed_or_refused() {
    let seg =
        |extra: &str| format!(r#"{{"image_processor_type": "SegformerImageProcessor", {extra}}}"#);
    assert_refused(&seg(r#""resample": "bicubic""#), "resample", "\"bicubic\"");
    assert_refused(&seg(r#""resample": 2.5"#), "resample", "2.5");
    assert_refused(&seg(r#""resample": null"#), "resample", "null");
    assert_refused(&seg(r#""resample": 4"#), "resample", "4");
    let f = read_pre(&seg(r#""resample": 3"#)).unwrap();
    assert_eq!(f.input.resample, Some(Resample::Bicubic));

    assert_refused(
        &seg(r#""rescale_factor": "1/255""#),
        "rescale_factor",
        "\"1/255\"",
    );
    assert_refused(&seg(r#""rescale_factor": 0"#), "rescale_factor", "0");
    let f = read_pre(&seg(r#""rescale_factor": 0.5"#)).unwrap();
    assert_eq!(f.input.scale, Some(0.5));
    // Not rescaling, the factor is not used (transformers does not read it either).
    let f = read_pre(&seg(r#""do_rescale": false, "rescale_factor": null"#)).unwrap();
    assert_eq!(f.input.scale, Some(1.0));
}

#[test]
fn unknown_and_refused_keys_are_refused_whatever_their_value() {
    let seg =
        |extra: &str| format!(r#"{{"image_processor_type": "SegformerImageProcessor", {extra}}}"#);
    assert_refused(&seg(r#""do_magic_warp": false"#), "do_magic_warp", "false");
    assert_refused(&seg(r#""do_magic_warp": null"#), "do_magic_warp", "null");
    assert_refused(&seg(r#""crop_pct": null"#), "crop_pct", "null");
    // Another processor's key, even unset.
    assert_refused(
        &seg(r#""do_flip_channel_order": false"#),
        "do_flip_channel_order",
        "false",
    );
    // The listed keys of no effect pass, with their reason.
    let dir = tempfile::tempdir().unwrap();
    folder(dir.path(), &seg(r#""do_reduce_labels": true"#), None);
    let report = key_report(dir.path()).unwrap().unwrap();
    assert!(report
        .keys
        .iter()
        .any(|(k, r)| k == "do_reduce_labels" && matches!(r, KeyRule::NoEffect(_))));
}

#[test]
fn do_convert_rgb_is_read_and_other_typed_keys_are_checked() {
    let one =
        |extra: &str| format!(r#"{{"image_processor_type": "OneFormerImageProcessor", {extra}}}"#);
    // Frames are RGB already: either boolean feeds the same tensor.
    for value in ["true", "false", "null"] {
        let f = read_pre(&one(&format!(r#""do_convert_rgb": {value}"#))).unwrap();
        assert_eq!(f.input.channels, Some(ChannelOrder::Rgb), "{value}");
    }
    assert_refused(
        &one(r#""do_convert_rgb": "yes""#),
        "do_convert_rgb",
        "\"yes\"",
    );
    assert_refused(&one(r#""do_convert_rgb": 1"#), "do_convert_rgb", "1");

    let mask =
        |extra: &str| format!(r#"{{"image_processor_type": "MaskFormerImageProcessor", {extra}}}"#);
    assert_refused(&mask(r#""size_divisor": "32""#), "size_divisor", "\"32\"");
    assert_refused(&mask(r#""size_divisor": 0"#), "size_divisor", "0");
    assert_refused(
        &mask(r#""size": {"shortest_edge": 800, "longest_edge": -1}"#),
        "longest_edge",
        "-1",
    );
    assert_refused(&mask(r#""data_format": 1"#), "data_format", "1");
    assert_refused(
        r#"{"image_processor_type": 7, "feature_extractor_type": "SegformerFeatureExtractor"}"#,
        "image_processor_type",
        "7",
    );
    let f = read_pre(&mask(r#""size_divisor": 16"#)).unwrap();
    assert_eq!(f.input.size_divisor, Some(16));
}

#[test]
fn id2label_names_are_strings_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let pre = r#"{"image_processor_type": "SegformerImageProcessor"}"#;
    folder(
        dir.path(),
        pre,
        Some(r#"{"id2label": {"0": "wall", "1": 5}}"#),
    );
    let e = read_folder(dir.path()).unwrap_err().to_string();
    for what in [CONFIG, "id2label", "\"1\"", "5"] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
    folder(dir.path(), pre, Some(r#"{"id2label": ["wall", "sky"]}"#));
    let e = read_folder(dir.path()).unwrap_err().to_string();
    assert!(e.contains(CONFIG) && e.contains("id2label"), "{e}");
    folder(
        dir.path(),
        pre,
        Some(r#"{"id2label": {"1": "sky", "0": "wall"}}"#),
    );
    let f = read_folder(dir.path()).unwrap().unwrap();
    assert_eq!(f.classes, Some(vec!["wall".to_string(), "sky".to_string()]));
}

/// A graph fixed at `h`x`w` (input `image`, output `logits`, 3 classes), read for its
/// inputs and outputs only: its Conv still names the plain graph's values.
fn fixed_graph(dir: &Path, name: &str, h: i64, w: i64) -> PathBuf {
    let path = dir.join(name);
    let plain = foreign_model_bytes(3, 3, false);
    std::fs::write(&path, with_fixed_size(&plain, 3, h, w)).unwrap();
    path
}

/// A processor resizes, then crops, then the graph takes the crop: a graph fixed at the
/// crop's size does not replace the resize, and one that is not is refused naming the
/// processor's file and key and both sizes.
#[test]
fn a_fixed_graph_size_never_replaces_the_processors_resize() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(PREPROCESSOR_CONFIG),
        r#"{"image_processor_type": "BeitImageProcessor", "do_resize": true,
            "size": {"height": 256, "width": 256}, "do_center_crop": true,
            "crop_size": {"height": 224, "width": 224}}"#,
    )
    .unwrap();
    let model = fixed_graph(dir.path(), "model.onnx", 224, 224);
    let r = resolve(&model, &CardRequest::new()).unwrap();
    let i = &r.card.input;
    assert_eq!(
        (i.size, i.center_crop),
        (Some([256, 256]), Some([224, 224]))
    );
    let hf = CardSource::HuggingFace(dir.path().to_path_buf());
    assert_eq!(r.source_of("input.size"), Some(&hf));
    let g = Geometry::of(&r.card, (300, 400));
    assert_eq!(
        (g.resized, g.content, g.tensor),
        ((256, 256), (224, 224), (224, 224))
    );
    // The tensor is the centre of the 256 resize, not the whole photo at 224 (what reading
    // the size from the graph gave).
    let photo = image::RgbImage::from_fn(400, 300, |x, y| {
        image::Rgb([(x % 251) as u8, (y * 3 % 253) as u8, ((x * y) % 255) as u8])
    });
    let tensor = |card: &ModelCard| match pipeline::prepare(std::slice::from_ref(&photo), card) {
        Ok((crate::engines::io_contract::EngineTensor::NchwF32(x), _)) => x,
        other => panic!("a float tensor, got {other:?}"),
    };
    let mut resized = r.card.clone();
    resized.input.center_crop = None;
    let mut whole = resized.clone();
    whole.input.size = Some([224, 224]);
    let cropped = tensor(&r.card);
    assert_eq!(
        cropped,
        tensor(&resized).slice(ndarray::s![.., .., 16..240, 16..240])
    );
    assert_ne!(cropped, tensor(&whole));
    // The card goes into a copy of the fixed graph and reads back the same.
    let copy = dir.path().join("described.onnx");
    write_card(&model, &copy, &r.card).unwrap();
    assert_eq!(resolve(&copy, &CardRequest::new()).unwrap().card, r.card);

    // A graph at the resize's size contradicts the crop.
    let at_256 = fixed_graph(dir.path(), "at256.onnx", 256, 256);
    let e = resolve(&at_256, &CardRequest::new())
        .unwrap_err()
        .to_string();
    for what in [
        PREPROCESSOR_CONFIG,
        "crop_size: input.center_crop",
        "224x224",
        "256x256",
        "at256.onnx",
    ] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
    // A size the graph does not take is refused, not replaced by the graph's.
    std::fs::write(
        dir.path().join(PREPROCESSOR_CONFIG),
        r#"{"image_processor_type": "SegformerImageProcessor",
            "size": {"height": 512, "width": 512}}"#,
    )
    .unwrap();
    let e = resolve(&model, &CardRequest::new())
        .unwrap_err()
        .to_string();
    for what in [
        PREPROCESSOR_CONFIG,
        "size: input.size",
        "512x512",
        "224x224",
    ] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
    // A shortest-edge resize then a crop to the graph's size runs as the processor does.
    std::fs::write(
        dir.path().join(PREPROCESSOR_CONFIG),
        r#"{"image_processor_type": "MobileViTImageProcessor",
            "size": {"shortest_edge": 256}, "crop_size": {"height": 224, "width": 224}}"#,
    )
    .unwrap();
    let r = resolve(&model, &CardRequest::new()).unwrap();
    assert_eq!(
        (r.card.input.size, r.card.input.shortest_edge),
        (None, Some(256))
    );
    assert_eq!(Geometry::of(&r.card, (300, 400)).resized, (256, 341));
    // With no resize or crop anywhere, the graph's size is the resize.
    let plain = tempfile::tempdir().unwrap();
    let bare = fixed_graph(plain.path(), "bare.onnx", 224, 224);
    let norm = plain.path().join("card.toml");
    std::fs::write(
        &norm,
        "[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n",
    )
    .unwrap();
    let r = resolve(&bare, &CardRequest::new().card_file(&norm)).unwrap();
    assert_eq!(r.card.input.size, Some([224, 224]));
    assert_eq!(r.source_of("input.size"), Some(&CardSource::Graph));
}
