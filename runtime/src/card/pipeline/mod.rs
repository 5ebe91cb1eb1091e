//! Driving a model by its card: same-size RGB images to the input tensor the card
//! describes, and the output back to one class map per image at the image's size.
//!
//! Before the graph, in this order: a resize to the card's fixed size (with DPT's aspect
//! keeping and multiple), its shortest edge (transformers), its keep-ratio box (mmdeploy)
//! or its minimum short side (PaddleOCR), then to the nearest multiple of its size divisor
//! with `fit = "resize"` or the next one up with `"resize_up"`, with the card's filter
//! (OpenCV's bilinear `INTER_LINEAR`, or torchvision's and Pillow's resizes with the card's
//! `resample` kernel, each bit for bit); a centre crop; the channel order;
//! `(pixel * scale - mean) / std`; zero padding (after normalisation, as mmsegmentation and
//! transformers pad) up to the next multiple of the divisor, at the bottom and right with
//! `fit = "pad"` or on both sides with `"pad_centre"`, and up to `pad_size`. uint8 inputs
//! get the pixels as they are (the graph normalises).
//!
//! After it: scores at any resolution are upsampled bilinearly (PyTorch's
//! `F.interpolate`, the card's `align_corners`) to the image when nothing was padded or
//! when `output.restore = "stretch"` (as Hugging Face's `post_process_semantic_segmentation`
//! does, whatever the crop or padding before the model), or else to the padded input,
//! cropped and, if the input was resized, brought to the image; then argmax. A
//! mask-classification head's semantic scores ([`super::mask_head`]) go the same way. A
//! class map is cropped and resized by nearest neighbour; a binary map is
//! upsampled like scores, then thresholded (class 1 where the probability is above the
//! threshold, as DBNet's and mmsegmentation's binary heads decide).

use image::RgbImage;
use segtool_model_spec::protocol::resize::keep_ratio_size;
use segtool_onnx::card::{Fit, ModelCard};

use crate::engines::Engine;
use crate::error::Result;
use crate::segmentation::Segmentation;

mod decode;
mod prepare;

pub(crate) use decode::decode_checked;
pub use decode::{check_output, decode};
pub use prepare::prepare;
pub(crate) use prepare::{prepare_at, prepare_frames, reads_frames_in_place};

/// Largest input tensor a card may make from an image, in pixels (16384 x 16384, the C
/// ABI's largest image).
pub const MAX_INPUT_PIXELS: u64 = 1 << 28;

/// Where the image sits in the tensor the graph got.
///
/// # Example
///
/// ```
/// use segtool_runtime::card::{self, pipeline, Fit};
/// use segtool_runtime::IoContract;
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// let mut card = card::from_spec(&spec, IoContract::default(), "image", "logits").card;
/// card.input.size_divisor = Some(32); // sizes padded up to multiples of 32
/// card.input.fit = Fit::PadCentre;
/// let (tensor, geometry) = pipeline::prepare(&[image::RgbImage::new(100, 70)], &card)?;
/// assert_eq!(geometry.image, (70, 100)); // (height, width)
/// assert_eq!(geometry.tensor, (96, 128));
/// assert_eq!(geometry.offset, (13, 14)); // the padding split between both sides
/// assert_eq!(pipeline::Geometry::of(&card, (70, 100)), geometry);
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The images' own `(height, width)`.
    pub image: (usize, usize),
    /// The image after the resize, before a centre crop.
    pub resized: (usize, usize),
    /// What the tensor holds of the image: `resized`, or the centre crop's size.
    pub content: (usize, usize),
    /// The tensor's spatial size (`content` plus padding).
    pub tensor: (usize, usize),
    /// `(top, left)` of the content in the tensor (centre padding).
    pub offset: (usize, usize),
}

impl Geometry {
    /// The geometry of an image of `(h, w)` under `card`: its resize (a fixed size, DPT's
    /// aspect-keeping fixed size, the shortest edge, a keep-ratio box, or a minimum short
    /// side), rounded to a multiple of the divisor with `fit = "resize"` (nearest) or
    /// `"resize_up"`, a centre crop, then padding up to the next multiple with `fit =
    /// "pad"` (bottom and right) or `"pad_centre"`, and up to `pad_size`.
    pub fn of(card: &ModelCard, (h, w): (usize, usize)) -> Self {
        let i = &card.input;
        let resized = match (i.size, i.shortest_edge, i.keep_ratio, i.min_short_side) {
            (Some(size), ..) if i.keep_aspect_ratio || i.ensure_multiple_of.is_some() => dpt_size(
                (h, w),
                size,
                i.keep_aspect_ratio,
                i.ensure_multiple_of.unwrap_or(1),
            ),
            (Some([sh, sw]), ..) => (sh, sw),
            (None, Some(short), ..) => shortest_edge_size((h, w), short, i.longest_edge),
            (None, None, Some(scale), _) => keep_ratio_size(h, w, scale),
            (None, None, None, Some(min)) => min_short_side_size(h, w, min),
            _ => (h, w),
        };
        let resized = match (i.size, i.size_divisor, i.fit) {
            (None, Some(d), Fit::Resize) => (
                nearest_multiple(resized.0, d),
                nearest_multiple(resized.1, d),
            ),
            (_, Some(d), Fit::ResizeUp) => (resized.0.div_ceil(d) * d, resized.1.div_ceil(d) * d),
            _ => resized,
        };
        let content = i.center_crop.map_or(resized, |[ch, cw]| (ch, cw));
        let tensor = match (i.size, i.size_divisor, i.fit) {
            (None, Some(d), Fit::Pad) | (_, Some(d), Fit::PadCentre) => {
                (content.0.div_ceil(d) * d, content.1.div_ceil(d) * d)
            }
            _ => content,
        };
        let tensor = i
            .pad_size
            .map_or(tensor, |[ph, pw]| (tensor.0.max(ph), tensor.1.max(pw)));
        let offset = match i.fit {
            Fit::PadCentre => ((tensor.0 - content.0) / 2, (tensor.1 - content.1) / 2),
            _ => (0, 0),
        };
        Self {
            image: (h, w),
            resized,
            content,
            tensor,
            offset,
        }
    }

    /// An image of `(h, w)` as it is: no resize, crop or padding.
    pub(crate) fn identity(size: (usize, usize)) -> Self {
        Self {
            image: size,
            resized: size,
            content: size,
            tensor: size,
            offset: (0, 0),
        }
    }

    /// Whether the tensor holds the image as it is (no resize, crop or padding).
    pub(crate) fn is_identity(&self) -> bool {
        *self == Self::identity(self.image)
    }

    fn padded(&self) -> bool {
        self.content != self.tensor
    }

    /// The tensor size `card`'s steps give every image, or what makes it follow the image.
    pub(super) fn tensor_size(card: &ModelCard) -> TensorSize {
        let i = &card.input;
        let content = match (i.center_crop, i.size) {
            (Some(_), _) => Some("input.center_crop"),
            (None, Some(_)) if !i.keep_aspect_ratio => Some("input.size"),
            _ => None,
        };
        if let Some(field) = content {
            // The content no longer depends on the image, so neither does the padding.
            let g = Self::of(card, (1, 1));
            let field = match i.pad_size {
                _ if g.tensor == g.content => field,
                Some([h, w]) if (h, w) == g.tensor => "input.pad_size",
                _ => "input.size_divisor",
            };
            return TensorSize::Fixed(g.tensor, field);
        }
        let divisor_pads = i
            .size_divisor
            .filter(|_| matches!(i.fit, Fit::Pad | Fit::PadCentre));
        if let Some([h, w]) = i.pad_size {
            // `prepare` refuses an image whose resize exceeds `pad_size`.
            if divisor_pads.is_none_or(|d| h % d == 0 && w % d == 0) {
                return TensorSize::Fixed((h, w), "input.pad_size");
            }
        }
        TensorSize::FollowsImage(
            [
                (i.keep_aspect_ratio, "input.keep_aspect_ratio"),
                (i.shortest_edge.is_some(), "input.shortest_edge"),
                (i.keep_ratio.is_some(), "input.keep_ratio"),
                (i.min_short_side.is_some(), "input.min_short_side"),
            ]
            .into_iter()
            .find_map(|(given, field)| given.then_some(field)),
        )
    }
}

/// What decides the spatial size of the tensor a card makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum TensorSize {
    /// Every image gives this `(height, width)`, decided by this card field.
    Fixed((usize, usize), &'static str),
    /// It follows the image through this resize field (`None`: no resize at all).
    FollowsImage(Option<&'static str>),
}

/// `v` rounded to the nearest multiple of `d` (ties to even, as Python's `round`, which
/// PaddleOCR's pipeline uses), at least `d`.
fn nearest_multiple(v: usize, d: usize) -> usize {
    (((v as f64) / (d as f64)).round_ties_even() as usize).max(1) * d
}

/// PaddleOCR's `limit_type: min`: a short side below `min` is scaled up to it, the other
/// side by the same ratio; sides truncated.
fn min_short_side_size(h: usize, w: usize, min: usize) -> (usize, usize) {
    let short = h.min(w);
    if short >= min {
        return (h, w);
    }
    let ratio = min as f64 / short as f64;
    let side = |len: usize| ((len as f64 * ratio) as usize).max(1);
    (side(h), side(w))
}

/// transformers' resize by `{"shortest_edge"}` (`get_resize_output_image_size` with
/// `default_to_square=False`: the long side `int(short * long / short_side)`) and by
/// `{"shortest_edge", "longest_edge"}` (`get_size_with_aspect_ratio`: the short side
/// shrinks to `round(longest * short / long)` when the long side would exceed `longest`).
fn shortest_edge_size(
    (h, w): (usize, usize),
    short: usize,
    longest: Option<usize>,
) -> (usize, usize) {
    let (hf, wf) = (h as f64, w as f64);
    let Some(max_size) = longest else {
        let (s, l) = if w <= h { (wf, hf) } else { (hf, wf) };
        let long = ((short as f64 * l / s) as usize).max(1);
        return if w <= h { (long, short) } else { (short, long) };
    };
    let (min_side, max_side) = (hf.min(wf), hf.max(wf));
    let mut size = short;
    let mut raw = None;
    if max_side / min_side * short as f64 > max_size as f64 {
        let r = max_size as f64 * min_side / max_side;
        raw = Some(r);
        size = r.round_ties_even() as usize;
    }
    let scaled = |len: f64, by: f64| -> usize {
        (match raw {
            Some(r) => r * len / by,
            None => size as f64 * len / by,
        } as usize)
            .max(1)
    };
    if (h <= w && h == size) || (w <= h && w == size) {
        (h, w)
    } else if w < h {
        (scaled(hf, wf), size)
    } else {
        (size, scaled(wf, hf))
    }
}

/// DPT's resize to `size` with `keep_aspect_ratio` (the scale that changes the image
/// least, for both sides) and `ensure_multiple_of` (each side `round(v / m) * m`, Python's
/// ties to even, at least `m`).
fn dpt_size(
    (h, w): (usize, usize),
    [sh, sw]: [usize; 2],
    keep: bool,
    multiple: usize,
) -> (usize, usize) {
    let (mut scale_h, mut scale_w) = (sh as f64 / h as f64, sw as f64 / w as f64);
    if keep {
        if (1.0 - scale_w).abs() < (1.0 - scale_h).abs() {
            scale_h = scale_w;
        } else {
            scale_w = scale_h;
        }
    }
    let m = multiple.max(1) as f64;
    let constrain = |v: f64| -> usize {
        let x = (v / m).round_ties_even() * m;
        (if x < m { (v / m).ceil() * m } else { x }).max(m) as usize
    };
    (constrain(scale_h * h as f64), constrain(scale_w * w as f64))
}

/// Same-size `imgs` through `engine` under `card`: [`prepare`], one run, [`decode`].
pub fn run(
    engine: &mut dyn Engine,
    card: &ModelCard,
    imgs: &[RgbImage],
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    let (input, geometry) = prepare(imgs, card)?;
    let out = engine.run(input.view())?;
    decode(out, card, geometry, keep_logits)
}
