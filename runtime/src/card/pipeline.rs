//! Driving a model by its card: same-size RGB images to the input tensor the card
//! describes, and the output back to one class map per image at the image's size.
//!
//! Before the graph, in this order: a resize to the card's fixed size, its keep-ratio box
//! (mmdeploy) or its minimum short side (PaddleOCR), then to the nearest multiple of its
//! size divisor with `fit = "resize"`, bilinear with the card's filter (OpenCV's
//! `INTER_LINEAR`, or torchvision's and Pillow's antialiased resize, each bit for bit);
//! the channel order; `(pixel * scale - mean) / std`; zero padding (after
//! normalisation, as mmsegmentation pads) at the bottom and right up to the next multiple
//! of the divisor with `fit = "pad"`. uint8 inputs get the pixels as they are (the graph
//! normalises).
//!
//! After it: scores at any resolution are upsampled bilinearly (PyTorch's
//! `F.interpolate`, the card's `align_corners`) to the image when nothing was padded (as
//! Hugging Face's `post_process_semantic_segmentation` does from a resized input), or to
//! the padded input, cropped and, if the input was resized, brought to the image; then
//! argmax. A class map is cropped and resized by nearest neighbour; a binary map is
//! upsampled like scores, then thresholded (class 1 where the probability is above the
//! threshold, as DBNet's and mmsegmentation's binary heads decide).

use image::RgbImage;
use ndarray::{s, Array4, Axis};
use segtool_onnx::card::{ChannelOrder, Dtype, Fit, Layout, ModelCard, OutputKind, ResizeFilter};
use segtool_spec::protocol::antialias::{resize_antialias_u8, Antialias};
use segtool_spec::protocol::resize::{keep_ratio_size, resize_linear_u8};

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::io_contract::{EngineOutput, EngineTensor, Segmentation};
use crate::postprocess::{argmax, resize_bilinear, resize_nearest};

/// Largest input tensor a card may make from an image, in pixels (16384 x 16384, the C
/// ABI's largest image).
pub const MAX_INPUT_PIXELS: u64 = 1 << 28;

/// Where the image sits in the tensor the graph got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// The images' own `(height, width)`.
    pub image: (usize, usize),
    /// The resized image inside the tensor (`image` when not resized).
    pub content: (usize, usize),
    /// The tensor's spatial size (`content` plus padding).
    pub tensor: (usize, usize),
}

impl Geometry {
    /// The geometry of an image of `(h, w)` under `card`: its resize (a fixed size, a
    /// keep-ratio box, or a minimum short side), rounded to the nearest multiple of the
    /// divisor with `fit = "resize"`, padded up to the next one with `fit = "pad"`.
    pub fn of(card: &ModelCard, (h, w): (usize, usize)) -> Self {
        let i = &card.input;
        let resized = match (i.size, i.keep_ratio, i.min_short_side) {
            (Some([sh, sw]), _, _) => (sh, sw),
            (None, Some(scale), _) => keep_ratio_size(h, w, scale),
            (None, None, Some(min)) => min_short_side_size(h, w, min),
            _ => (h, w),
        };
        let content = match (i.size, i.size_divisor, i.fit) {
            (None, Some(d), Fit::Resize) => (
                nearest_multiple(resized.0, d),
                nearest_multiple(resized.1, d),
            ),
            _ => resized,
        };
        let tensor = match (i.size, i.size_divisor, i.fit) {
            (None, Some(d), Fit::Pad) => (content.0.div_ceil(d) * d, content.1.div_ceil(d) * d),
            _ => content,
        };
        Self {
            image: (h, w),
            content,
            tensor,
        }
    }

    fn padded(&self) -> bool {
        self.content != self.tensor
    }
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

/// An image's interleaved RGB pixels resized to `(h, w)` with the card's filter.
fn resize_pixels(img: &RgbImage, (h, w): (usize, usize), filter: ResizeFilter) -> Vec<u8> {
    let (iw, ih) = (img.width() as usize, img.height() as usize);
    match filter {
        ResizeFilter::Opencv => resize_linear_u8(img.as_raw(), ih, iw, 3, h, w),
        ResizeFilter::Torchvision => {
            resize_antialias_u8(img.as_raw(), ih, iw, 3, h, w, Antialias::Torchvision)
        }
        ResizeFilter::Pillow => {
            resize_antialias_u8(img.as_raw(), ih, iw, 3, h, w, Antialias::Pillow)
        }
    }
}

/// The input tensor of same-size `imgs` under `card`, and where they sit in it.
pub fn prepare(imgs: &[RgbImage], card: &ModelCard) -> Result<(EngineTensor, Geometry)> {
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
    let geom = Geometry::of(card, (h as usize, w as usize));
    let (ch, cw) = geom.content;
    let (th, tw) = geom.tensor;
    // Each card side is bounded (ModelCard::check_self), but a minimum short side scales
    // the long side by the image's aspect ratio: bound the tensor itself.
    let pixels = (th as u128 * tw as u128).max(ch as u128 * cw as u128);
    if pixels > MAX_INPUT_PIXELS as u128 {
        return Err(RuntimeError::InputShape {
            expected: format!(
                "at most {MAX_INPUT_PIXELS} pixels in the input tensor (16384 x 16384)"
            ),
            got: format!("{th}x{tw} for a {w}x{h} image under the card's resize"),
        });
    }
    let i = &card.input;
    let pixels: Vec<Vec<u8>> = imgs
        .iter()
        .map(|img| resize_pixels(img, (ch, cw), i.resize_filter))
        .collect();
    let order: [usize; 3] = match i.channels {
        ChannelOrder::Rgb => [0, 1, 2],
        ChannelOrder::Bgr => [2, 1, 0],
    };
    let grey = i.mean.len() == 1;
    let channels = if grey { 1 } else { 3 };
    // ITU-R BT.601 luma, as OpenCV's cvtColor(..., COLOR_RGB2GRAY).
    let value = |px: &[u8], c: usize| -> f32 {
        if grey {
            0.299 * f32::from(px[0]) + 0.587 * f32::from(px[1]) + 0.114 * f32::from(px[2])
        } else {
            f32::from(px[order[c]])
        }
    };
    let tensor = match (i.dtype, i.layout) {
        (Dtype::Float32, Layout::Nchw) => {
            let mut x = Array4::<f32>::zeros((imgs.len(), channels, th, tw));
            for (n, buf) in pixels.iter().enumerate() {
                for (p, px) in buf.chunks_exact(3).enumerate() {
                    let (y, xx) = (p / cw, p % cw);
                    for c in 0..channels {
                        x[[n, c, y, xx]] = (value(px, c) * i.scale - i.mean[c]) / i.std[c];
                    }
                }
            }
            EngineTensor::NchwF32(x)
        }
        (Dtype::Uint8, Layout::Nhwc) if !grey => {
            let mut x = Array4::<u8>::zeros((imgs.len(), th, tw, 3));
            for (n, buf) in pixels.iter().enumerate() {
                for (p, px) in buf.chunks_exact(3).enumerate() {
                    for c in 0..3 {
                        x[[n, p / cw, p % cw, c]] = px[order[c]];
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
    Ok((tensor, geom))
}

/// One [`Segmentation`] per image from the graph's `output` under `card`.
pub fn decode(
    output: EngineOutput,
    card: &ModelCard,
    geom: Geometry,
    keep_logits: bool,
) -> Result<Vec<Segmentation>> {
    let (h, w) = geom.image;
    let classes = card.num_classes();
    match (card.output.kind, output) {
        (OutputKind::ClassMap, EngineOutput::Mask(m)) => Ok(m
            .outer_iter()
            .map(|plane| {
                let plane = plane.slice(s![
                    ..geom.content.0.min(plane.dim().0),
                    ..geom.content.1.min(plane.dim().1)
                ]);
                Segmentation {
                    mask: resize_nearest(plane, h, w),
                    logits: None,
                }
            })
            .collect()),
        (OutputKind::Logits | OutputKind::Probabilities, EngineOutput::Logits(l)) => {
            if l.dim().1 != classes {
                return Err(RuntimeError::OutputShape {
                    expected: format!("{classes} class channels (the card's classes)"),
                    got: format!("{:?}", l.shape()),
                });
            }
            let scores = to_image(l, card, geom);
            let masks = argmax(scores.view());
            Ok(masks
                .into_iter()
                .zip(scores.outer_iter())
                .map(|(mask, s)| Segmentation {
                    mask,
                    logits: keep_logits.then(|| s.to_owned()),
                })
                .collect())
        }
        (OutputKind::Binary, EngineOutput::Logits(p)) => {
            if p.dim().1 != 1 {
                return Err(RuntimeError::OutputShape {
                    expected: "one probability channel [N, 1, h, w] (kind binary)".into(),
                    got: format!("{:?}", p.shape()),
                });
            }
            let t = card
                .output
                .threshold
                .expect("checked: binary has a threshold");
            let probs = to_image(p, card, geom);
            Ok(probs
                .outer_iter()
                .map(|plane| Segmentation {
                    mask: plane.index_axis(Axis(0), 0).mapv(|v| u8::from(v > t)),
                    logits: keep_logits.then(|| plane.to_owned()),
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
    if !geom.padded() {
        return resize_bilinear(scores.view(), h, w, ac);
    }
    let (th, tw) = geom.tensor;
    let (ch, cw) = geom.content;
    let full = resize_bilinear(scores.view(), th, tw, ac);
    let cropped = full.slice(s![.., .., ..ch, ..cw]);
    resize_bilinear(cropped, h, w, ac)
}
