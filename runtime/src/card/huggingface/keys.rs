//! What each `preprocessor_config.json` key of a transformers 5 image processor does in
//! segtool: applied to the card, of no effect on inference (with the reason), or refused
//! (with the card field that would replace it). A key in none of the lists is refused by
//! name too: a wrong mask that looks right is worse than no mask.
//!
//! The processors segtool reads, and the defaults each class gives a key its folder leaves
//! out (transformers 5.25's `Class().to_dict()` and the class attributes it omits, read
//! there; a key absent from the folder takes its class's default, not SegFormer's).

use serde_json::{json, Value};

/// An image processor class segtool reads (`image_processor_type`, with or without the
/// `Pil` suffix of its Pillow backend or the `Fast` suffix of transformers 4).
///
/// # Example
///
/// ```
/// use segtool_runtime::card::huggingface::keys::Processor;
/// // A folder's `image_processor_type`, transformers 4's name included.
/// let (processor, pillow) = Processor::from_class("SegformerFeatureExtractor").ok_or("unknown")?;
/// assert_eq!((processor, pillow), (Processor::Segformer, false));
/// assert_eq!(processor.class(), "SegformerImageProcessor");
/// assert!(!processor.mask_classification());
/// // What a key the folder leaves out takes: the class's default.
/// assert_eq!(processor.defaults()["size"]["height"], 512);
/// assert_eq!(Processor::from_model_type("upernet"), Some(Processor::Segformer));
/// # Ok::<(), &str>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Processor {
    /// `SegformerImageProcessor` (SegFormer, UperNet).
    Segformer,
    /// `MobileViTImageProcessor` (MobileViT, MobileViTV2): shortest edge, centre crop, BGR.
    MobileVit,
    /// `DPTImageProcessor`: aspect-keeping resize to a multiple, centre padding.
    Dpt,
    /// `BeitImageProcessor` (BEiT, Data2Vec-Vision).
    Beit,
    /// `MobileNetV2ImageProcessor` (DeepLabV3-MobileNetV2).
    MobileNetV2,
    /// `MaskFormerImageProcessor`: a mask-classification head.
    MaskFormer,
    /// `Mask2FormerImageProcessor`: a mask-classification head, masks resized to 384.
    Mask2Former,
    /// `OneFormerImageProcessor` (semantic task): a mask-classification head.
    OneFormer,
    /// `Sapiens2ImageProcessor` (Sapiens2's body-part segmentation).
    Sapiens2,
    /// `Tipsv2DptImageProcessor` (TIPSv2's DPT head): rescaled, not normalised.
    Tipsv2Dpt,
    /// `DetrImageProcessor` (`DetrForSegmentation`): a mask-classification head
    /// (`logits`, `pred_masks`).
    Detr,
    /// `EomtImageProcessor` (EoMT, EoMT-DINOv3) without its sliding crops: a
    /// mask-classification head, masks resized to the processor's size first.
    Eomt,
}

/// Every processor segtool reads.
pub const PROCESSORS: [Processor; 12] = [
    Processor::Segformer,
    Processor::MobileVit,
    Processor::Dpt,
    Processor::Beit,
    Processor::MobileNetV2,
    Processor::MaskFormer,
    Processor::Mask2Former,
    Processor::OneFormer,
    Processor::Sapiens2,
    Processor::Tipsv2Dpt,
    Processor::Detr,
    Processor::Eomt,
];

/// Classes transformers maps for segmentation that segtool does not read yet, with why.
pub const NOT_READ: [(&str, &str); 1] = [("VideomtImageProcessor", "a video model")];

impl Processor {
    /// The torchvision-backend class name.
    pub fn class(self) -> &'static str {
        match self {
            Processor::Segformer => "SegformerImageProcessor",
            Processor::MobileVit => "MobileViTImageProcessor",
            Processor::Dpt => "DPTImageProcessor",
            Processor::Beit => "BeitImageProcessor",
            Processor::MobileNetV2 => "MobileNetV2ImageProcessor",
            Processor::MaskFormer => "MaskFormerImageProcessor",
            Processor::Mask2Former => "Mask2FormerImageProcessor",
            Processor::OneFormer => "OneFormerImageProcessor",
            Processor::Sapiens2 => "Sapiens2ImageProcessor",
            Processor::Tipsv2Dpt => "Tipsv2DptImageProcessor",
            Processor::Detr => "DetrImageProcessor",
            Processor::Eomt => "EomtImageProcessor",
        }
    }

    /// The processor a class name (`image_processor_type`, or transformers 4's
    /// `feature_extractor_type`) names, and whether it is the Pillow backend.
    pub fn from_class(name: &str) -> Option<(Self, bool)> {
        let (base, pil) = match name.strip_suffix("Pil") {
            Some(base) => (base.to_string(), true),
            None => (
                name.trim_end_matches("Fast")
                    .replace("FeatureExtractor", "ImageProcessor"),
                false,
            ),
        };
        PROCESSORS
            .iter()
            .find(|p| p.class() == base)
            .map(|p| (*p, pil))
    }

    /// The processor `config.json`'s `model_type` uses (transformers'
    /// `IMAGE_PROCESSOR_MAPPING_NAMES`), for folders that name no processor class.
    pub fn from_model_type(model_type: &str) -> Option<Self> {
        Some(match model_type {
            "segformer" | "upernet" => Processor::Segformer,
            "mobilevit" | "mobilevitv2" => Processor::MobileVit,
            "dpt" => Processor::Dpt,
            "beit" | "data2vec-vision" => Processor::Beit,
            "mobilenet_v2" => Processor::MobileNetV2,
            "maskformer" => Processor::MaskFormer,
            "mask2former" => Processor::Mask2Former,
            "oneformer" => Processor::OneFormer,
            "sapiens2" => Processor::Sapiens2,
            "tipsv2_dpt" => Processor::Tipsv2Dpt,
            "detr" => Processor::Detr,
            "eomt" | "eomt_dinov3" => Processor::Eomt,
            _ => return None,
        })
    }

    /// Whether a plain number `size` means a square (`default_to_square`), or else the
    /// shortest edge.
    pub fn int_size_is_square(self) -> bool {
        matches!(
            self,
            Processor::Segformer
                | Processor::Dpt
                | Processor::Beit
                | Processor::Sapiens2
                | Processor::Tipsv2Dpt
        )
    }

    /// Whether the head is mask classification (class and mask logits).
    pub fn mask_classification(self) -> bool {
        matches!(
            self,
            Processor::MaskFormer
                | Processor::Mask2Former
                | Processor::OneFormer
                | Processor::Detr
                | Processor::Eomt
        )
    }

    /// The class's defaults, as `to_dict()` writes them plus the attributes it leaves out
    /// (`null`: unset, which the class reads as false).
    pub fn defaults(self) -> Value {
        let imagenet =
            json!({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]});
        let half = json!({"image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]});
        let common = json!({"do_resize": true, "do_rescale": true,
            "rescale_factor": 1.0 / 255.0, "do_reduce_labels": false});
        let own = match self {
            Processor::Segformer => json!({"resample": 2, "do_normalize": true,
                "size": {"height": 512, "width": 512}}),
            Processor::MobileVit => json!({"resample": 3, "do_normalize": null,
                "do_center_crop": true, "do_flip_channel_order": true,
                "size": {"shortest_edge": 224}, "crop_size": {"height": 256, "width": 256}}),
            Processor::Dpt => json!({"resample": 3, "do_normalize": true, "do_pad": false,
                "ensure_multiple_of": 1, "keep_aspect_ratio": false, "do_center_crop": null,
                "size": {"height": 384, "width": 384}}),
            Processor::Beit => json!({"resample": 3, "do_normalize": true,
                "do_center_crop": false, "size": {"height": 224, "width": 224},
                "crop_size": {"height": 224, "width": 224}}),
            Processor::MobileNetV2 => json!({"resample": 2, "do_normalize": true,
                "do_center_crop": true, "size": {"shortest_edge": 256},
                "crop_size": {"height": 224, "width": 224}}),
            Processor::MaskFormer | Processor::Mask2Former => json!({"resample": 2,
                "do_normalize": true, "size_divisor": 32,
                "size": {"shortest_edge": 800, "longest_edge": 1333}}),
            Processor::OneFormer => json!({"resample": 2, "do_normalize": true,
                "size": {"shortest_edge": 800, "longest_edge": 1333}}),
            Processor::Sapiens2 => json!({"resample": 2, "do_normalize": true,
                "do_pad": false, "do_center_crop": false, "size": {"height": 1024, "width": 768},
                "crop_size": {"height": 224, "width": 224}}),
            Processor::Tipsv2Dpt => json!({"resample": 2, "do_normalize": false,
                "size": {"height": 448, "width": 448}}),
            Processor::Detr => json!({"resample": 2, "do_normalize": true, "do_pad": true,
                "size": {"shortest_edge": 800, "longest_edge": 1333}}),
            Processor::Eomt => json!({"resample": 2, "do_normalize": true, "do_pad": false,
                "do_split_image": false, "size": {"shortest_edge": 640, "longest_edge": 640}}),
        };
        let means = match self {
            Processor::Segformer
            | Processor::MaskFormer
            | Processor::Mask2Former
            | Processor::OneFormer
            | Processor::Sapiens2
            | Processor::Detr
            | Processor::Eomt => imagenet,
            // No class default: a folder that normalises names its own.
            Processor::Tipsv2Dpt => json!({}),
            _ => half,
        };
        let mut all = common;
        for extra in [own, means] {
            if let (Some(all), Value::Object(extra)) = (all.as_object_mut(), extra) {
                all.extend(extra);
            }
        }
        all
    }
}

/// What a key does.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::huggingface::keys::{rule, KeyRule, Processor};
/// assert_eq!(rule(Processor::Segformer, "image_mean"), KeyRule::Applied);
/// assert!(matches!(rule(Processor::Segformer, "do_reduce_labels"), KeyRule::NoEffect(_)));
/// // A refused key names the card field that would replace it.
/// match rule(Processor::Beit, "crop_pct") {
///     KeyRule::Refused(instead) => assert!(instead.starts_with("input.center_crop")),
///     other => panic!("crop_pct is not followed, got {other:?}"),
/// }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRule {
    /// It shapes the card.
    Applied,
    /// It changes nothing at inference, for this reason.
    NoEffect(&'static str),
    /// segtool refuses a folder that has it, whatever its value; the card field that would
    /// replace it.
    Refused(&'static str),
}

/// Keys that shape the card (for the processors that take them; see [`rule`]).
pub const APPLIED: [&str; 23] = [
    "image_processor_type",
    "feature_extractor_type",
    "do_resize",
    "size",
    "max_size",
    "resample",
    "do_rescale",
    "rescale_factor",
    "do_normalize",
    "image_mean",
    "image_std",
    "do_center_crop",
    "crop_size",
    "do_flip_channel_order",
    "keep_aspect_ratio",
    "ensure_multiple_of",
    "do_pad",
    "size_divisor",
    "pad_size",
    "do_convert_rgb",
    "data_format",
    "default_to_square",
    "do_split_image",
];

/// Keys that change nothing at inference, with why.
pub const NO_EFFECT: [(&str, &str); 14] = [
    ("do_reduce_labels", "maps training labels only"),
    (
        "reduce_labels",
        "maps training labels only (transformers 4's name)",
    ),
    (
        "ignore_index",
        "the label of ignored pixels in training targets",
    ),
    (
        "num_labels",
        "sizes training targets; the class count comes from the graph",
    ),
    (
        "processor_class",
        "names the processor that wraps the image processor",
    ),
    (
        "class_info_file",
        "OneFormer's class names for training targets",
    ),
    (
        "repo_path",
        "where OneFormer's class_info_file is fetched from",
    ),
    (
        "num_text",
        "OneFormer's text queries, used in training only",
    ),
    (
        "metadata",
        "OneFormer's class metadata for training targets",
    ),
    (
        "do_convert_annotations",
        "converts training annotations only",
    ),
    (
        "_processor_class",
        "names the processor that wraps the image processor",
    ),
    (
        "keypoint_heatmap_downscale_factor",
        "Sapiens2's pose-training heatmaps",
    ),
    (
        "keypoint_heatmap_sigma",
        "Sapiens2's pose-training heatmaps",
    ),
    (
        "format",
        "the annotation format of training targets (DETR's COCO detection or panoptic)",
    ),
];

/// Keys transformers knows that change preprocessing in ways segtool does not follow,
/// with the card field (or way) that replaces them.
pub const REFUSED: [(&str, &str); 4] = [
    ("crop_pct", "input.center_crop with the crop in pixels"),
    ("input_data_format", "input.layout"),
    (
        "auto_map",
        "a card file (--card): custom processor code cannot be followed",
    ),
    ("image_seq_length", "no card field"),
];

/// Keys that a processor's own code ignores (so they change nothing, whatever the value).
fn ignored_by(p: Processor, key: &str) -> Option<&'static str> {
    match (p, key) {
        (Processor::MobileVit, "do_normalize" | "image_mean" | "image_std") => {
            Some("MobileViT's processor never normalises (it only rescales)")
        }
        _ => None,
    }
}

/// Keys that only some processors take.
fn taken_by(p: Processor, key: &str) -> bool {
    match key {
        "do_flip_channel_order" => p == Processor::MobileVit,
        "do_split_image" => p == Processor::Eomt,
        "keep_aspect_ratio" | "ensure_multiple_of" => p == Processor::Dpt,
        "size_divisor" => matches!(
            p,
            Processor::Dpt | Processor::MaskFormer | Processor::Mask2Former
        ),
        "max_size" => p.mask_classification(),
        "do_center_crop" | "crop_size" => {
            matches!(
                p,
                Processor::MobileVit
                    | Processor::Dpt
                    | Processor::Beit
                    | Processor::MobileNetV2
                    | Processor::Sapiens2
            )
        }
        _ => true,
    }
}

/// What `key` does in a folder of processor `p`.
pub fn rule(p: Processor, key: &str) -> KeyRule {
    if let Some(why) = ignored_by(p, key) {
        return KeyRule::NoEffect(why);
    }
    if APPLIED.contains(&key) {
        return if taken_by(p, key) {
            KeyRule::Applied
        } else {
            KeyRule::Refused("a card file (--card): this processor does not take the key")
        };
    }
    if let Some((_, why)) = NO_EFFECT.iter().find(|(k, _)| *k == key) {
        return KeyRule::NoEffect(why);
    }
    match REFUSED.iter().find(|(k, _)| *k == key) {
        Some((_, instead)) => KeyRule::Refused(instead),
        None => KeyRule::Refused("a card file (--card) that says what the key does"),
    }
}
