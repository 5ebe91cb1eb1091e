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

use std::borrow::Cow;

use image::RgbImage;
use ndarray::{s, Array4, Axis};
use segtool_model_spec::protocol::antialias::{
    resize_antialias_f32, resize_kernel_u8, resize_nearest_u8, Antialias, Kernel,
};
use segtool_model_spec::protocol::resize::{keep_ratio_size, resize_linear_u8};
use segtool_onnx::card::{
    ChannelOrder, Dtype, Fit, InputCard, Layout, ModelCard, OutputKind, Resample, ResizeFilter,
    Restore,
};

use crate::segmentation::class_map::ClassMap;
use crate::engines::Engine;
use crate::error::{Result, RuntimeError};
use crate::frame::Frame;
use crate::engines::io_contract::{EngineOutput, EngineTensor};
use crate::segmentation::Segmentation;
use crate::segmentation::postprocess::{argmax, resize_bilinear, resize_nearest};
use crate::normalise::{batch_size_of, normalised, Table};

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

/// An image's interleaved RGB pixels resized to `(h, w)` with the card's filter and kernel.
fn resize_pixels(img: &RgbImage, (h, w): (usize, usize), i: &InputCard) -> Vec<u8> {
    let (iw, ih) = (img.width() as usize, img.height() as usize);
    let kind = match i.resize_filter {
        ResizeFilter::Opencv => return resize_linear_u8(img.as_raw(), ih, iw, 3, h, w),
        ResizeFilter::Torchvision => Antialias::Torchvision,
        ResizeFilter::Pillow => Antialias::Pillow,
    };
    let kernel = match i.resample {
        Resample::Nearest => return resize_nearest_u8(img.as_raw(), (ih, iw), 3, (h, w), kind),
        Resample::Bilinear => Kernel::Bilinear,
        Resample::Bicubic => Kernel::Bicubic,
        Resample::Lanczos => Kernel::Lanczos,
    };
    resize_kernel_u8(img.as_raw(), (ih, iw), 3, (h, w), kind, kernel)
}

/// The centre `(ch, cw)` of interleaved RGB `pixels` of `(h, w)`, as torchvision's
/// `center_crop` in transformers: where the crop is larger the image is first padded with
/// black (left and top get the smaller half), then the crop starts at `floor((H - ch) /
/// 2)`.
fn center_crop(pixels: &[u8], (h, w): (usize, usize), (ch, cw): (usize, usize)) -> Vec<u8> {
    let (ph, pw) = (h.max(ch), w.max(cw));
    let (pad_top, pad_left) = ((ph - h) / 2, (pw - w) / 2);
    let (top, left) = ((ph - ch) / 2, (pw - cw) / 2);
    let mut out = vec![0u8; ch * cw * 3];
    for y in 0..ch {
        let Some(sy) = (y + top).checked_sub(pad_top).filter(|&sy| sy < h) else {
            continue;
        };
        for x in 0..cw {
            if let Some(sx) = (x + left).checked_sub(pad_left).filter(|&sx| sx < w) {
                let (d, s) = ((y * cw + x) * 3, (sy * w + sx) * 3);
                out[d..d + 3].copy_from_slice(&pixels[s..s + 3]);
            }
        }
    }
    out
}

/// The input tensor of same-size `imgs` under `card`, and where they sit in it.
pub fn prepare(imgs: &[RgbImage], card: &ModelCard) -> Result<(EngineTensor, Geometry)> {
    let (w, h) = one_size(imgs)?;
    let geom = Geometry::of(card, (h as usize, w as usize));
    Ok((prepare_at(imgs, card, geom)?, geom))
}

/// The one `(width, height)` of same-size `imgs`; an empty or mixed batch is refused.
fn one_size(imgs: &[RgbImage]) -> Result<(u32, u32)> {
    let first = imgs.first().ok_or_else(|| RuntimeError::InputShape {
        expected: "at least one image".into(),
        got: "none".into(),
    })?;
    let (w, h) = first.dimensions();
    if let Some(other) = imgs.iter().find(|i| i.dimensions() != (w, h)) {
        return Err(RuntimeError::InputShape {
            expected: format!("images of one size ({w}x{h})"),
            got: format!("{}x{}", other.width(), other.height()),
        });
    }
    Ok((w, h))
}

/// The input tensor of same-size `imgs` placed as `geom` says (the card's own
/// [`Geometry::of`], or the images as they are for an evaluation protocol that sizes
/// its own windows), normalised and laid out as `card` says.
pub(crate) fn prepare_at(
    imgs: &[RgbImage],
    card: &ModelCard,
    geom: Geometry,
) -> Result<EngineTensor> {
    let (w, h) = one_size(imgs)?;
    debug_assert_eq!(geom.image, (h as usize, w as usize));
    let (ch, cw) = geom.content;
    let (th, tw) = geom.tensor;
    // Each card side is bounded (ModelCard::check_self), but a minimum short side scales
    // the long side by the image's aspect ratio: bound the tensor itself.
    let (rh, rw) = geom.resized;
    let pixels = (th as u128 * tw as u128)
        .max(ch as u128 * cw as u128)
        .max(rh as u128 * rw as u128);
    if pixels > MAX_INPUT_PIXELS as u128 {
        return Err(RuntimeError::InputShape {
            expected: format!(
                "at most {MAX_INPUT_PIXELS} pixels in the input tensor (16384 x 16384)"
            ),
            got: format!("{th}x{tw} for a {w}x{h} image under the card's resize"),
        });
    }
    let i = &card.input;
    if let Some([ph, pw]) = i.pad_size {
        if ch > ph || cw > pw {
            return Err(RuntimeError::InputShape {
                expected: format!("an image that fits input.pad_size {ph}x{pw} once resized"),
                got: format!("{ch}x{cw} for a {w}x{h} image under the card's resize"),
            });
        }
    }
    // The images as they are where nothing resizes or crops them (no copy).
    let pixels: Vec<Cow<'_, [u8]>> = imgs
        .iter()
        .map(|img| {
            if geom.resized == geom.image && i.center_crop.is_none() {
                return Cow::Borrowed(img.as_raw().as_slice());
            }
            let resized = resize_pixels(img, geom.resized, i);
            Cow::Owned(match i.center_crop {
                Some(_) => center_crop(&resized, geom.resized, geom.content),
                None => resized,
            })
        })
        .collect();
    let offset = geom.offset;
    let order = channel_order(i);
    let grey = i.mean.len() == 1;
    let channels = if grey { 1 } else { 3 };
    let tensor = match (i.dtype, i.layout) {
        (Dtype::Float32, Layout::Nchw) if grey => {
            let mut x = Array4::<f32>::zeros((imgs.len(), 1, th, tw));
            for (mut image, buf) in x.outer_iter_mut().zip(&pixels) {
                let mut plane = image.index_axis_mut(Axis(0), 0);
                for (y, src) in buf.chunks_exact(cw * 3).enumerate() {
                    let mut row = plane.slice_mut(s![y + offset.0, offset.1..offset.1 + cw]);
                    let row = row.as_slice_mut().expect("a row of a standard layout");
                    for (v, px) in row.iter_mut().zip(src.chunks_exact(3)) {
                        // ITU-R BT.601 luma, as OpenCV's cvtColor(..., COLOR_RGB2GRAY).
                        let luma = 0.299 * f32::from(px[0])
                            + 0.587 * f32::from(px[1])
                            + 0.114 * f32::from(px[2]);
                        *v = normalised(luma, i.scale, i.mean[0], i.std[0]);
                    }
                }
            }
            EngineTensor::NchwF32(x)
        }
        (Dtype::Float32, Layout::Nchw) => {
            let table = Table::with(i.scale, &i.mean, &i.std, order);
            let mut x = Array4::<f32>::zeros((imgs.len(), 3, th, tw));
            for (image, buf) in x.outer_iter_mut().zip(&pixels) {
                table.fill_at(buf, cw, image, offset);
            }
            EngineTensor::NchwF32(x)
        }
        (Dtype::Uint8, Layout::Nhwc) if !grey => {
            let mut x = Array4::<u8>::zeros((imgs.len(), th, tw, 3));
            for (n, buf) in pixels.iter().enumerate() {
                for (p, px) in buf.chunks_exact(3).enumerate() {
                    for c in 0..3 {
                        x[[n, p / cw + offset.0, p % cw + offset.1, c]] = px[order[c]];
                    }
                }
            }
            EngineTensor::NhwcU8(x)
        }
        (dtype, layout) => {
            return Err(RuntimeError::InputShape {
                expected: "a card input of float32 NCHW or uint8 NHWC (3 channels)".into(),
                got: format!("{dtype:?} {layout:?} with {channels} channel(s)"),
            })
        }
    };
    Ok(tensor)
}

/// The RGB channel each of the tensor's channels reads.
fn channel_order(i: &InputCard) -> [usize; 3] {
    match i.channels {
        ChannelOrder::Rgb => [0, 1, 2],
        ChannelOrder::Bgr => [2, 1, 0],
    }
}

/// Whether [`prepare_frames`] reads frames under `card` in place: three channels, float32
/// NCHW or uint8 NHWC (a grey input's luma goes through an RGB copy).
pub(crate) fn reads_frames_in_place(card: &ModelCard) -> bool {
    let i = &card.input;
    i.mean.len() == 3
        && matches!(
            (i.dtype, i.layout),
            (Dtype::Float32, Layout::Nchw) | (Dtype::Uint8, Layout::Nhwc)
        )
}

/// Same-size frames (any [`PixelFormat`](crate::PixelFormat), strided rows) read in place
/// into the tensor `card` describes, for a card whose [`Geometry`] of their size is the
/// identity and which [`reads_frames_in_place`]: the values [`prepare_at`] gives their RGB
/// copies, bit for bit (the same table normalises both).
pub(crate) fn prepare_frames(frames: &[Frame<'_>], card: &ModelCard) -> Result<EngineTensor> {
    let (w, h) = batch_size_of(frames.iter().map(|f| (f.width(), f.height())))?;
    let (h, w) = (h as usize, w as usize);
    let i = &card.input;
    let order = channel_order(i);
    Ok(match (i.dtype, i.layout) {
        (Dtype::Float32, Layout::Nchw) => {
            let table = Table::with(i.scale, &i.mean, &i.std, order);
            let mut x = Array4::<f32>::zeros((frames.len(), 3, h, w));
            for (frame, slot) in frames.iter().zip(x.outer_iter_mut()) {
                table.fill_frame(frame, slot);
            }
            EngineTensor::NchwF32(x)
        }
        _ => {
            let mut x = Array4::<u8>::zeros((frames.len(), h, w, 3));
            for (frame, mut slot) in frames.iter().zip(x.outer_iter_mut()) {
                let step = frame.format().bytes_per_pixel();
                let rgb = frame.format().rgb_offsets().unwrap_or([0, 0, 0]);
                let offsets = order.map(|c| rgb[c]);
                let slot = slot
                    .as_slice_mut()
                    .expect("freshly allocated, standard layout");
                for (y, dst) in slot.chunks_exact_mut(w * 3).enumerate() {
                    let row = frame.row(y as u32);
                    for (d, px) in dst.chunks_exact_mut(3).zip(row.chunks_exact(step)) {
                        for c in 0..3 {
                            d[c] = px[offsets[c]];
                        }
                    }
                }
            }
            EngineTensor::NhwcU8(x)
        }
    })
}

/// Checks the graph's answer for `n` images against `card`: the batch size, and its
/// classes (as many score channels, one for a binary map; a class map's values below
/// them).
pub fn check_output(output: &EngineOutput, n: usize, card: &ModelCard) -> Result<()> {
    let classes = card.num_classes();
    let wrong = |expected: String| RuntimeError::OutputShape {
        expected,
        got: match output {
            EngineOutput::Logits(l) => format!("float scores {:?}", l.shape()),
            EngineOutput::Mask(m) => format!("a class map {:?}", m.shape()),
        },
    };
    if output.len() != n {
        return Err(wrong(format!("one answer per image ({n})")));
    }
    match (card.output.kind, output) {
        (OutputKind::Binary, EngineOutput::Logits(p)) if p.dim().1 != 1 => Err(wrong(
            "one probability channel [N, 1, h, w] (kind binary)".into(),
        )),
        (OutputKind::Binary, _) => Ok(()),
        (_, EngineOutput::Logits(l)) if l.dim().1 != classes => Err(wrong(format!(
            "{classes} class channels (the card's classes)"
        ))),
        (_, EngineOutput::Mask(m)) if m.iter().any(|&c| usize::from(c) >= classes) => Err(wrong(
            format!("class values below {classes} (the card's classes)"),
        )),
        _ => Ok(()),
    }
}

/// One [`Segmentation`] per image from the graph's `output` under `card`, checked first
/// ([`check_output`]).
pub fn decode(
    output: EngineOutput,
    card: &ModelCard,
    geom: Geometry,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    check_output(&output, output.len(), card)?;
    decode_checked(output, card, geom, keep_logits)
}

/// [`decode`] of an output [`check_output`] has passed.
pub(crate) fn decode_checked(
    output: EngineOutput,
    card: &ModelCard,
    geom: Geometry,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    let (h, w) = geom.image;
    let classes = card.num_classes();
    match (card.output.kind, output) {
        (OutputKind::ClassMap, EngineOutput::Mask(m)) => m
            .outer_iter()
            .map(|plane| {
                let (oy, ox) = geom.offset;
                let plane = match card.output.restore {
                    Restore::Stretch | Restore::StretchAntialias => plane,
                    Restore::Undo => plane.slice_move(s![
                        oy.min(plane.dim().0)..(oy + geom.content.0).min(plane.dim().0),
                        ox.min(plane.dim().1)..(ox + geom.content.1).min(plane.dim().1)
                    ]),
                };
                let mask = ClassMap::with_classes(resize_nearest(plane, h, w), classes)
                    .ok_or_else(|| RuntimeError::OutputShape {
                        expected: format!("class ids below {classes} (the card's classes)"),
                        got: "a larger class id".into(),
                    })?;
                Ok(Segmentation::new(mask, None))
            })
            .collect(),
        // A mask-classification head arrives as its semantic scores (card::mask_head).
        (
            OutputKind::Logits | OutputKind::Probabilities | OutputKind::MaskClassification,
            EngineOutput::Logits(l),
        ) => {
            let scores = to_image(l, card, geom);
            let masks = argmax(scores.view());
            Ok(masks
                .into_iter()
                .zip(scores.outer_iter())
                .map(|(mask, s)| Segmentation::new(mask, keep_logits.then(|| s.to_owned())))
                .collect())
        }
        (OutputKind::Binary, EngineOutput::Logits(p)) => {
            let t = card
                .output
                .threshold
                .expect("checked: binary has a threshold");
            let probs = to_image(p, card, geom);
            Ok(probs
                .outer_iter()
                .map(|plane| {
                    let mask = plane.index_axis(Axis(0), 0).mapv(|v| u8::from(v > t));
                    Segmentation::new(mask, keep_logits.then(|| plane.to_owned()))
                })
                .collect())
        }
        (kind, out) => Err(RuntimeError::OutputShape {
            expected: format!("the card's output kind {kind}"),
            got: match out {
                EngineOutput::Logits(l) => format!("float scores {:?}", l.shape()),
                EngineOutput::Mask(m) => format!("a class map {:?}", m.shape()),
            },
        }),
    }
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

/// Scores `[N, K, h, w]` at the image's size (see the module docs).
fn to_image(scores: Array4<f32>, card: &ModelCard, geom: Geometry) -> Array4<f32> {
    let ac = card.output.align_corners;
    let (h, w) = geom.image;
    let undo_padding = card.output.restore == Restore::Undo && geom.padded();
    if (scores.dim().2, scores.dim().3) == (h, w) && !undo_padding {
        // Already the image's size (the graph's input was the image): no copy.
        return scores;
    }
    match card.output.restore {
        Restore::StretchAntialias => return resize_antialias(scores, (h, w)),
        Restore::Stretch => return resize_bilinear(scores.view(), h, w, ac),
        Restore::Undo if !geom.padded() => return resize_bilinear(scores.view(), h, w, ac),
        Restore::Undo => {}
    }
    let (th, tw) = geom.tensor;
    let (ch, cw) = geom.content;
    let (oy, ox) = geom.offset;
    let full = resize_bilinear(scores.view(), th, tw, ac);
    let cropped = full.slice(s![.., .., oy..oy + ch, ox..ox + cw]);
    resize_bilinear(cropped, h, w, ac)
}

/// `[N, K, h, w]` scores resized to `(h, w)` with torchvision's antialiased bilinear.
fn resize_antialias(scores: Array4<f32>, (h, w): (usize, usize)) -> Array4<f32> {
    let (n, k, sh, sw) = scores.dim();
    if (sh, sw) == (h, w) {
        return scores;
    }
    let flat = scores.as_standard_layout();
    let src = flat.as_slice().expect("standard layout");
    let out = resize_antialias_f32(src, n * k, (sh, sw), (h, w));
    Array4::from_shape_vec((n, k, h, w), out).expect("sized")
}
