//! Before the graph: same-size images (or frames read in place) to the input tensor the
//! card describes (see the module docs of [`super`]).

use std::borrow::Cow;

use image::RgbImage;
use ndarray::{s, Array4, Axis};
use segtool_model_spec::protocol::antialias::{
    resize_kernel_u8, resize_nearest_u8, Antialias, Kernel,
};
use segtool_model_spec::protocol::resize::resize_linear_u8;
use segtool_onnx::card::{
    ChannelOrder, Dtype, InputCard, Layout, ModelCard, Resample, ResizeFilter,
};

use super::{Geometry, MAX_INPUT_PIXELS};
use crate::engines::io_contract::EngineTensor;
use crate::error::{Result, RuntimeError};
use crate::frame::Frame;
use crate::normalise::{batch_size_of, normalised, Table};

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
