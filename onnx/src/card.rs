//! The model card: what a deployment needs to know about a segmentation model that its
//! graph does not say (how pixels become the input tensor, what the output means, the
//! class names and colours), for ONNX files segtool did not write.
//!
//! A segtool export carries all of it in its spec; a `torch.onnx.export` of torchvision's
//! FCN, a Hugging Face SegFormer or an mmdeploy `end2end.onnx` carries none of it. The
//! card is the one description every source fills in (the file's own metadata under
//! [`CARD_METADATA_KEY`], a sidecar TOML, the mmdeploy and Hugging Face folder files,
//! command-line flags) and every front end reads. [`ModelCard::check_graph`] refuses a
//! card that contradicts the graph, naming both sides; where the graph tells (rank, dtype,
//! fixed dims), the graph wins.
//!
//! Its serialised form (JSON in the metadata, TOML in a sidecar) uses the field names
//! below; unknown fields are refused so that a typo is not silently ignored.

use std::fmt;

use serde::{Deserialize, Serialize};

mod steps;

pub use steps::{Resample, Restore};

use crate::proto::DataType;
use crate::read::{ModelIo, TensorInfo};

/// Key of the model card (JSON) in `metadata_props`: `segtool card M --out M2.onnx`
/// writes it, and a file that has it describes itself.
pub const CARD_METADATA_KEY: &str = "segtool.card";

/// Most classes a card may name, as a spec: class maps are `u8`.
pub use segtool_model_spec::MAX_CLASSES;

/// Largest side a card's resize may ask for (`input.size`, `input.keep_ratio`,
/// `input.min_short_side`, `input.size_divisor`): 16384, the C ABI's largest image side.
pub const MAX_INPUT_SIDE: usize = 16384;

/// How the input tensor's axes are ordered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// `[N, C, H, W]` (PyTorch exports).
    Nchw,
    /// `[N, H, W, C]` (segtool's `--preprocess`, TensorFlow exports).
    Nhwc,
}

/// The input tensor's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// float32: the card's scale, mean and std are applied before the graph.
    Float32,
    /// uint8 pixels: the graph normalises (scale, mean and std must be absent or neutral).
    Uint8,
}

/// The order of the colour channels the model was trained on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelOrder {
    /// Red, green, blue (PIL, torchvision, Hugging Face).
    Rgb,
    /// Blue, green, red (OpenCV; mmdeploy without `to_rgb`, DeepStream's
    /// `model-color-format=1`).
    Bgr,
}

/// How an image of any size is made acceptable to a graph with a size divisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fit {
    /// Pad bottom and right up to the next multiple (zeros after normalisation); the
    /// output is cropped back.
    Pad,
    /// Resize (bilinear) to the nearest multiple; the output is resized back.
    Resize,
    /// Resize up to the next multiple (MaskFormer's and Mask2Former's `size_divisor`).
    #[serde(rename = "resize_up")]
    ResizeUp,
    /// Pad to the next multiple, the padding split between both sides (top gets the
    /// smaller half), as DPT's `do_pad`.
    #[serde(rename = "pad_centre")]
    PadCentre,
}

impl Fit {
    /// The serialised name.
    pub fn name(self) -> &'static str {
        match self {
            Fit::Pad => "pad",
            Fit::Resize => "resize",
            Fit::ResizeUp => "resize_up",
            Fit::PadCentre => "pad_centre",
        }
    }
}

/// Whose bilinear resize brings images to the network's size: models are trained behind
/// one, and the others give other pixels (most of all when shrinking).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResizeFilter {
    /// OpenCV's `INTER_LINEAR` (mmcv, mmdeploy, PaddleOCR, DeepStream-style pipelines).
    #[default]
    Opencv,
    /// torchvision's `F.resize(..., antialias=True)` on uint8 (Hugging Face image
    /// processors since transformers 5).
    Torchvision,
    /// Pillow's `Image.resize(..., BILINEAR)` (older Hugging Face processors).
    Pillow,
}

impl ResizeFilter {
    /// The serialised name.
    pub fn name(self) -> &'static str {
        match self {
            ResizeFilter::Opencv => "opencv",
            ResizeFilter::Torchvision => "torchvision",
            ResizeFilter::Pillow => "pillow",
        }
    }
}

/// What the output tensor holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OutputKind {
    /// Per-class scores `[N, K, h, w]` at any resolution (upsampled bilinearly to the
    /// input with the card's `align_corners`, then argmax).
    Logits,
    /// Per-class probabilities `[N, K, h, w]`: treated as logits (argmax is the same).
    Probabilities,
    /// Class ids `[N, H, W]` or `[N, 1, H, W]` (int64, int32 or uint8).
    ClassMap,
    /// One probability channel `[N, 1, h, w]`: class 1 above the threshold, background
    /// at or below it.
    Binary,
    /// A mask-classification head (MaskFormer, Mask2Former, OneFormer): class logits
    /// `[N, Q, K + 1]` (`output.class_output`, the last class "no object") and mask logits
    /// `[N, Q, h, w]` (`output.name`); per class, `sum_q softmax(class)[q, k] *
    /// sigmoid(mask)[q]`, as transformers' `post_process_semantic_segmentation`.
    MaskClassification,
}

impl OutputKind {
    /// The serialised name.
    pub fn name(self) -> &'static str {
        match self {
            OutputKind::Logits => "logits",
            OutputKind::Probabilities => "probabilities",
            OutputKind::ClassMap => "class_map",
            OutputKind::Binary => "binary",
            OutputKind::MaskClassification => "mask_classification",
        }
    }
}

impl fmt::Display for OutputKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The input half of a card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputCard {
    /// The graph input to feed.
    pub name: String,
    /// Axis order.
    pub layout: Layout,
    /// Element type.
    pub dtype: Dtype,
    /// Colour order.
    pub channels: ChannelOrder,
    /// 0-255 pixel values are multiplied by this first (1/255, or 1 for none).
    pub scale: f32,
    /// Subtracted after scaling, per channel in the card's channel order (one value for
    /// a one-channel input).
    pub mean: Vec<f32>,
    /// Divided by after subtracting the mean, per channel.
    pub std: Vec<f32>,
    /// A fixed `[height, width]`: every image is resized to it and results back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<[usize; 2]>,
    /// Resize keeping the aspect ratio to the largest size inside this box (long side and
    /// short side, in either order), as mmcv's and mmdeploy's `Resize(keep_ratio=True)`:
    /// `f = min(long / max(h, w), short / min(h, w))`, sides `int(side * f + 0.5)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_ratio: Option<[usize; 2]>,
    /// Images whose short side is below this are scaled up (aspect kept, sides
    /// truncated) until it is, as PaddleOCR's detectors (`limit_type: min`) do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_short_side: Option<usize>,
    /// Whose bilinear resize to use for any of the above.
    #[serde(default)]
    pub resize_filter: ResizeFilter,
    /// Dynamic sizes must be multiples of this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_divisor: Option<usize>,
    /// How images are brought to a multiple of `size_divisor`.
    #[serde(default = "default_fit")]
    pub fit: Fit,
    /// The kernel of every resize (with the `resize_filter`'s implementation).
    #[serde(default)]
    pub resample: Resample,
    /// Resize so that the short side is this long, aspect kept (the long side truncated),
    /// as transformers' `size = {"shortest_edge"}` (torchvision's `F.resize(img, s)`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shortest_edge: Option<usize>,
    /// With `shortest_edge`: the long side may not exceed this (transformers'
    /// `get_size_with_aspect_ratio`, as MaskFormer's `{"shortest_edge", "longest_edge"}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub longest_edge: Option<usize>,
    /// With `size`: scale both sides by the one factor that changes the image least (DPT's
    /// `keep_aspect_ratio`).
    #[serde(default, skip_serializing_if = "steps::is_false")]
    pub keep_aspect_ratio: bool,
    /// With `size`: each side rounded to a multiple of this (DPT's `ensure_multiple_of`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ensure_multiple_of: Option<usize>,
    /// `[height, width]` cut from the centre after the resize (the image padded with black
    /// first where it is smaller), as the processors' `do_center_crop`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub center_crop: Option<[usize; 2]>,
    /// Pad bottom and right (zeros after normalisation) to this `[height, width]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pad_size: Option<[usize; 2]>,
}

fn default_fit() -> Fit {
    Fit::Pad
}

/// The output half of a card.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputCard {
    /// The graph output to read.
    pub name: String,
    /// What it holds.
    pub kind: OutputKind,
    /// `align_corners` of the bilinear upsampling of logits to the input.
    #[serde(default)]
    pub align_corners: bool,
    /// `binary` only: the probability at which a pixel is the class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f32>,
    /// How the scores come back to the image.
    #[serde(default)]
    pub restore: Restore,
    /// `mask_classification`: the class logits `[N, Q, K + 1]` (the output `name` is then
    /// the mask logits `[N, Q, h, w]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_output: Option<String>,
    /// `mask_classification`: the mask logits are first resized (bilinear) to this
    /// `[height, width]` (Mask2Former's post-processing resizes them to 384 x 384).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask_size: Option<[usize; 2]>,
}

/// Everything a deployment needs beside the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelCard {
    /// How pixels become the input tensor.
    pub input: InputCard,
    /// What the output means.
    pub output: OutputCard,
    /// Class names, one per class id.
    pub classes: Vec<String>,
    /// One RGB colour per class.
    pub palette: Vec<[u8; 3]>,
}

impl ModelCard {
    /// The JSON value stored under [`CARD_METADATA_KEY`].
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a plain struct serialises")
    }

    /// Parses [`ModelCard::to_json`]'s form; the error names the field.
    pub fn from_json(json: &str) -> Result<Self, String> {
        let card: Self = serde_json::from_str(json).map_err(|e| e.to_string())?;
        card.check_self()?;
        Ok(card)
    }

    /// The number of classes a mask can hold.
    pub fn num_classes(&self) -> usize {
        self.classes.len()
    }

    /// The card's own consistency: normalisation lengths, class and palette counts,
    /// positive std and scale, a threshold exactly for `binary`.
    pub fn check_self(&self) -> Result<(), String> {
        let i = &self.input;
        if i.mean.len() != i.std.len() || !matches!(i.mean.len(), 1 | 3) {
            return Err(format!(
                "input.mean has {} values and input.std {}: give 3 of each (1 for a \
                 one-channel input)",
                i.mean.len(),
                i.std.len()
            ));
        }
        if let Some(s) = i.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(format!("input.std {s} is not a positive number"));
        }
        if !(i.scale.is_finite() && i.scale > 0.0) {
            return Err(format!("input.scale {} is not a positive number", i.scale));
        }
        if matches!(i.size, Some([h, w]) if h == 0 || w == 0) {
            return Err("input.size must be two positive numbers [height, width]".into());
        }
        if i.size_divisor == Some(0) {
            return Err("input.size_divisor must be at least 1".into());
        }
        if matches!(i.keep_ratio, Some([a, b]) if a == 0 || b == 0) {
            return Err("input.keep_ratio must be two positive numbers [long, short]".into());
        }
        if i.min_short_side == Some(0) {
            return Err("input.min_short_side must be at least 1".into());
        }
        let sides = [
            ("input.size", i.size.map_or(0, |[h, w]| h.max(w))),
            (
                "input.keep_ratio",
                i.keep_ratio.map_or(0, |[a, b]| a.max(b)),
            ),
            ("input.min_short_side", i.min_short_side.unwrap_or(0)),
            ("input.size_divisor", i.size_divisor.unwrap_or(0)),
        ];
        if let Some((key, side)) = sides.iter().find(|(_, side)| *side > MAX_INPUT_SIDE) {
            return Err(format!(
                "{key} asks for a side of {side} pixels, over the {MAX_INPUT_SIDE} accepted"
            ));
        }
        let resizes = [
            i.size.map(|_| "input.size"),
            i.keep_ratio.map(|_| "input.keep_ratio"),
            i.min_short_side.map(|_| "input.min_short_side"),
            i.shortest_edge.map(|_| "input.shortest_edge"),
        ];
        let given: Vec<&str> = resizes.into_iter().flatten().collect();
        if given.len() > 1 {
            return Err(format!(
                "{} each decide the resized size: give one",
                given.join(" and ")
            ));
        }
        if self.classes.is_empty() {
            return Err("classes: the card names no class".into());
        }
        if self.classes.len() > MAX_CLASSES {
            return Err(format!(
                "{} classes: a class map holds at most {MAX_CLASSES}",
                self.classes.len()
            ));
        }
        if self.palette.len() != self.classes.len() {
            return Err(format!(
                "palette has {} colours for {} classes",
                self.palette.len(),
                self.classes.len()
            ));
        }
        steps::check(self)?;
        match (self.output.kind, self.output.threshold) {
            (OutputKind::Binary, None) => Err("output.kind binary needs output.threshold".into()),
            (OutputKind::Binary, Some(_)) if self.classes.len() != 2 => Err(format!(
                "output.kind binary has 2 classes (background and one), the card names {}",
                self.classes.len()
            )),
            (OutputKind::Binary, Some(t)) if !(t.is_finite() && (0.0..=1.0).contains(&t)) => Err(
                format!("output.threshold {t} is not a probability in [0, 1]"),
            ),
            (k, Some(_)) if k != OutputKind::Binary => {
                Err(format!("output.threshold applies to kind binary, not {k}"))
            }
            _ => Ok(()),
        }
    }

    /// Refuses a card that contradicts the graph, naming both sides: an input or output
    /// name the graph lacks, a dtype or rank the graph does not have, a channel count
    /// that differs from the normalisation's, a class count that differs from the
    /// output's channels, a class map declared as logits (or the reverse), a fixed size
    /// the graph's fixed dims contradict.
    pub fn check_graph(&self, io: &ModelIo) -> Result<(), String> {
        self.check_self()?;
        let input = find(&io.inputs, &self.input.name, "input")?;
        let output = find(&io.outputs, &self.output.name, "output")?;
        self.check_input(input)?;
        self.check_output(io, output)
    }

    /// The input's dtype, rank, channel count and fixed size against the graph's.
    fn check_input(&self, input: &TensorInfo) -> Result<(), String> {
        let i = &self.input;
        let dtype = match i.dtype {
            Dtype::Float32 => DataType::Float,
            Dtype::Uint8 => DataType::Uint8,
        };
        if input.elem_type != 0 && input.elem_type != dtype as i32 {
            return Err(format!(
                "the card says input {:?} is {:?}, the graph declares element type {}",
                i.name,
                i.dtype,
                type_name(input.elem_type)
            ));
        }
        if !input.dims.is_empty() && input.dims.len() != 4 {
            return Err(format!(
                "input {:?} has rank {} in the graph; the card describes a 4-D image batch",
                i.name,
                input.dims.len()
            ));
        }
        let (c_axis, h_axis, w_axis) = match i.layout {
            Layout::Nchw => (1, 2, 3),
            Layout::Nhwc => (3, 1, 2),
        };
        if let Some(Some(c)) = input.dims.get(c_axis) {
            if *c as usize != i.mean.len() {
                return Err(format!(
                    "the card gives {} mean/std values, the graph's input {:?} has {c} \
                     channel(s) on the {:?} channel axis",
                    i.mean.len(),
                    i.name,
                    i.layout
                ));
            }
        }
        if let (Some([h, w]), Some(Some(gh)), Some(Some(gw))) =
            (i.size, input.dims.get(h_axis), input.dims.get(w_axis))
        {
            if (h as i64, w as i64) != (*gh, *gw) {
                return Err(format!(
                    "the card's input size is {h}x{w}, the graph's input {:?} is fixed at \
                     {gh}x{gw}",
                    i.name
                ));
            }
        }
        Ok(())
    }

    /// The output's kind against its graph type, its rank and its channels against the
    /// classes.
    fn check_output(&self, io: &ModelIo, output: &TensorInfo) -> Result<(), String> {
        let o = &self.output;
        let integer = matches!(
            output.elem_type,
            t if t == DataType::Int64 as i32 || t == DataType::Int32 as i32 || t == DataType::Uint8 as i32
        );
        let float = output.elem_type == DataType::Float as i32;
        match o.kind {
            OutputKind::ClassMap if float => {
                return Err(format!(
                    "the card says output {:?} is a class map, the graph declares float32 \
                     (scores: use kind logits, probabilities or binary)",
                    o.name
                ))
            }
            OutputKind::Logits | OutputKind::Probabilities | OutputKind::Binary if integer => {
                return Err(format!(
                    "the card says output {:?} is {}, the graph declares {} (a class map: use \
                     kind class_map)",
                    o.name,
                    o.kind,
                    type_name(output.elem_type)
                ))
            }
            _ => {}
        }
        if o.kind == OutputKind::MaskClassification {
            return self.check_mask_head(io, output);
        }
        let rank = output.dims.len();
        let channels = match (o.kind, rank) {
            (_, 0) => None,
            (OutputKind::ClassMap, 3) => None,
            (_, 4) => Some(output.dims[1]),
            (k, r) => {
                return Err(format!(
                    "output {:?} has rank {r} in the graph; kind {k} is [N, K, h, w]{}",
                    o.name,
                    match k {
                        OutputKind::ClassMap => " or [N, H, W]",
                        _ => "",
                    }
                ))
            }
        };
        match (o.kind, channels) {
            (OutputKind::ClassMap, Some(Some(c))) if c != 1 => Err(format!(
                "output {:?} is a class map with {c} channels in the graph; a class map has one",
                o.name
            )),
            (OutputKind::Binary, Some(Some(c))) if c != 1 => Err(format!(
                "the card says output {:?} is one probability channel (binary), the graph \
                 gives {c} channels (use kind logits with {c} classes)",
                o.name
            )),
            (OutputKind::Logits | OutputKind::Probabilities, Some(Some(c)))
                if c as usize != self.classes.len() =>
            {
                Err(format!(
                    "the card names {} classes, the graph's output {:?} has {c} channels",
                    self.classes.len(),
                    o.name
                ))
            }
            _ => Ok(()),
        }
    }
}

impl ModelCard {
    /// A mask-classification head: mask logits `[N, Q, h, w]`, class logits `[N, Q, K + 1]`
    /// with `K` the card's classes, the same `Q`.
    fn check_mask_head(&self, io: &ModelIo, masks: &TensorInfo) -> Result<(), String> {
        let name = self.output.class_output.as_deref().unwrap_or_default();
        let classes = find(&io.outputs, name, "output")?;
        let rank = |t: &TensorInfo, want: usize, what: &str| match t.dims.len() {
            0 => Ok(()),
            r if r == want => Ok(()),
            r => Err(format!(
                "output {:?} has rank {r} in the graph; the {what} of a mask-classification \
                 head have rank {want}",
                t.name
            )),
        };
        rank(masks, 4, "mask logits [N, Q, h, w]")?;
        rank(classes, 3, "class logits [N, Q, K + 1]")?;
        if let Some(Some(k1)) = classes.dims.get(2) {
            if *k1 as usize != self.classes.len() + 1 {
                return Err(format!(
                    "the card names {} classes, the class logits {:?} have {k1} (K + 1 with \
                     \"no object\" last: {} classes)",
                    self.classes.len(),
                    classes.name,
                    k1 - 1
                ));
            }
        }
        if let (Some(Some(q1)), Some(Some(q2))) = (masks.dims.get(1), classes.dims.get(1)) {
            if q1 != q2 {
                return Err(format!(
                    "the mask logits {:?} have {q1} queries, the class logits {:?} {q2}",
                    masks.name, classes.name
                ));
            }
        }
        Ok(())
    }
}

fn find<'a>(list: &'a [TensorInfo], name: &str, what: &str) -> Result<&'a TensorInfo, String> {
    list.iter().find(|t| t.name == name).ok_or_else(|| {
        let names: Vec<&str> = list.iter().map(|t| t.name.as_str()).collect();
        format!("the card's {what} {name:?} is not in the graph (its {what}s: {names:?})")
    })
}

/// ONNX's name of an element type number, for messages.
pub fn type_name(elem_type: i32) -> String {
    match elem_type {
        1 => "float32".into(),
        2 => "uint8".into(),
        3 => "int8".into(),
        6 => "int32".into(),
        7 => "int64".into(),
        10 => "float16".into(),
        11 => "float64".into(),
        0 => "no element type".into(),
        t => format!("element type {t}"),
    }
}
