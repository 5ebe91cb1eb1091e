//! Image -> model input: RGB u8 HWC to normalised f32 NCHW, `(x * scale - mean) / std`
//! ([`normalised`]; a spec's scale is 1/255).
//!
//! The formula is evaluated once per channel and byte value into a 3x256 table, so every
//! pixel costs a lookup and the values are bit-identical to the straightforward formula
//! (and to what training used), not merely close to it. A model's card and a spec build
//! the same table, so an image read in place and its RGB copy give the same tensor.
//!
//! [`prepare`] adds an optional resize and padding to a multiple of the output stride;
//! the [`Prepared`] it returns undoes both on the logits or masks.

use image::RgbImage;
use ndarray::{s, Array4, ArrayView4, ArrayViewMut3, Axis};
use segtool_model_spec::ModelSpec;

use crate::segmentation::class_map::ClassMap;
use crate::error::{Result, RuntimeError};
use crate::frame::Frame;
use crate::segmentation::postprocess::{masks_at_size, resize_bilinear, Upsample};

/// The one normalisation formula, `(x * scale - mean) / std`, for a pixel value `x`
/// (0-255, or a grey level between). A scale of one over a whole number (1/255: segtool's
/// training and exports, torchvision's `ToTensor`, Hugging Face's rescale) divides by
/// that number, as those pipelines compute it (Hugging Face multiplies in float64 and
/// rounds to float32, which gives the same value as the float32 division; the float32
/// product differs in the last bit for about half the byte values); any other scale
/// multiplies.
pub(crate) fn normalised(x: f32, scale: f32, mean: f32, std: f32) -> f32 {
    let whole = (1.0 / f64::from(scale)).round();
    let rescaled = match whole >= 1.0 && (1.0 / whole) as f32 == scale {
        true => x / whole as f32,
        false => x * scale,
    };
    (rescaled - mean) / std
}

/// Per-channel lookup table of normalised values: output channel `c` reads the image's
/// RGB channel `source[c]`.
pub(crate) struct Table {
    values: [[f32; 256]; 3],
    source: [usize; 3],
}

impl Table {
    /// A spec's normalisation: RGB, `(x / 255 - mean) / std`.
    fn new(spec: &ModelSpec) -> Self {
        Self::with(1.0 / 255.0, &spec.mean, &spec.std, [0, 1, 2])
    }

    /// `(x * scale - mean[c]) / std[c]` on RGB channel `source[c]` (three channels).
    pub(crate) fn with(scale: f32, mean: &[f32], std: &[f32], source: [usize; 3]) -> Self {
        let mut values = [[0f32; 256]; 3];
        for (c, row) in values.iter_mut().enumerate() {
            for (x, v) in row.iter_mut().enumerate() {
                *v = normalised(x as f32, scale, mean[c], std[c]);
            }
        }
        Table { values, source }
    }

    /// Writes interleaved RGB `pixels` into `out` laid out `(3, H, W)`, at `(top, left)`
    /// (`out` may be larger: padding), `width` pixels a row.
    pub(crate) fn fill_at(
        &self,
        pixels: &[u8],
        width: usize,
        mut out: ArrayViewMut3<f32>,
        (top, left): (usize, usize),
    ) {
        for (c, table) in self.values.iter().enumerate() {
            let source = self.source[c];
            let mut plane = out.index_axis_mut(Axis(0), c);
            for (y, src) in pixels.chunks_exact(width * 3).enumerate() {
                let mut row = plane.slice_mut(s![y + top, left..left + width]);
                let row = row.as_slice_mut().expect("a row of a standard layout");
                for (dst, px) in row.iter_mut().zip(src.chunks_exact(3)) {
                    *dst = table[px[source] as usize];
                }
            }
        }
    }

    /// Writes `img` into `out` laid out `(3, H, W)`.
    fn fill(&self, img: &RgbImage, out: ArrayViewMut3<f32>) {
        self.fill_at(img.as_raw(), img.width() as usize, out, (0, 0));
    }

    /// Writes `frame` (any [`PixelFormat`](crate::PixelFormat), strided rows: read in
    /// place) into `out` laid out `(3, H, W)`; a grey frame fills all three channels.
    pub(crate) fn fill_frame(&self, frame: &Frame<'_>, mut out: ArrayViewMut3<f32>) {
        let step = frame.format().bytes_per_pixel();
        let offsets = frame.format().rgb_offsets().unwrap_or([0, 0, 0]);
        let w = frame.width() as usize;
        for (c, table) in self.values.iter().enumerate() {
            let offset = offsets[self.source[c]];
            let mut plane = out.index_axis_mut(Axis(0), c);
            let plane = plane
                .as_slice_mut()
                .expect("freshly allocated, standard layout");
            for (y, dst) in plane.chunks_exact_mut(w).enumerate() {
                let row = frame.row(y as u32);
                for (d, px) in dst.iter_mut().zip(row.chunks_exact(step)) {
                    *d = table[px[offset] as usize];
                }
            }
        }
    }
}

/// The one size of a batch, or [`RuntimeError::InputShape`] for an empty batch or mixed
/// sizes (models take one spatial size per run; see `Segmenter::segment_batch` for mixed
/// sizes).
pub(crate) fn batch_size_of(mut dims: impl Iterator<Item = (u32, u32)>) -> Result<(u32, u32)> {
    let (w, h) = dims.next().ok_or_else(|| RuntimeError::InputShape {
        expected: "at least one image".into(),
        got: "an empty batch".into(),
    })?;
    if let Some((i, (ow, oh))) = dims.enumerate().find(|(_, d)| *d != (w, h)) {
        return Err(RuntimeError::InputShape {
            expected: format!("every image of a batch {w}x{h} like image 0"),
            got: format!("image {} is {ow}x{oh}", i + 1),
        });
    }
    Ok((w, h))
}

/// Same-size frames stacked into one normalised `(N, 3, H, W)` batch, each read in place
/// (the values are those of [`normalise_batch`] on the same pixels).
pub fn normalise_frames(frames: &[Frame<'_>], spec: &ModelSpec) -> Result<Array4<f32>> {
    let (w, h) = batch_size_of(frames.iter().map(|f| (f.width(), f.height())))?;
    let table = Table::new(spec);
    let mut out = Array4::zeros((frames.len(), 3, h as usize, w as usize));
    for (frame, slot) in frames.iter().zip(out.outer_iter_mut()) {
        table.fill_frame(frame, slot);
    }
    Ok(out)
}

/// One image as a `(1, 3, H, W)` normalised tensor.
pub fn normalise(img: &RgbImage, spec: &ModelSpec) -> Array4<f32> {
    let (w, h) = img.dimensions();
    let mut out = Array4::zeros((1, 3, h as usize, w as usize));
    Table::new(spec).fill(img, out.index_axis_mut(Axis(0), 0));
    out
}

/// Same-size images stacked into one `(N, 3, H, W)` batch.
///
/// Fails with [`RuntimeError::InputShape`] for an empty slice or mixed sizes (models
/// take one spatial size per run; see `Segmenter::segment_batch` for mixed sizes).
pub fn normalise_batch(imgs: &[RgbImage], spec: &ModelSpec) -> Result<Array4<f32>> {
    let (w, h) = batch_size_of(imgs.iter().map(|i| i.dimensions()))?;
    let table = Table::new(spec);
    let mut out = Array4::zeros((imgs.len(), 3, h as usize, w as usize));
    for (img, slot) in imgs.iter().zip(out.outer_iter_mut()) {
        table.fill(img, slot);
    }
    Ok(out)
}

/// Normalised value of a zero (black) pixel per channel, `-mean / std`: what padding
/// is filled with, as in training and evaluation.
pub fn zero_pixel(spec: &ModelSpec) -> [f32; 3] {
    std::array::from_fn(|c| -spec.mean[c] / spec.std[c])
}

/// What [`prepare`] does besides normalising.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::{prepare, PrepareOptions};
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// // Shrink every frame to 30x60, then pad to the model's output stride (8 here).
/// let options = PrepareOptions::new().with_resize(30, 60).with_pad_to_stride(true);
/// let prepared = prepare(&[image::RgbImage::new(640, 320)], &spec, &options)?;
/// assert_eq!(prepared.resized, (30, 60));
/// assert_eq!(prepared.padded, (32, 64));
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrepareOptions {
    /// Resize the images (bilinear) to `(height, width)` first.
    pub resize: Option<(u32, u32)>,
    /// Pad bottom and right with zero pixels to a multiple of the model's output stride
    /// (`spec.backbone.output_stride`).
    pub pad_to_stride: bool,
}

impl PrepareOptions {
    /// Normalise only: no resize, no padding.
    pub fn new() -> Self {
        Self::default()
    }

    /// Resize every image to `height` x `width` first.
    pub fn with_resize(mut self, height: u32, width: u32) -> Self {
        self.resize = Some((height, width));
        self
    }

    /// Pad to a multiple of the output stride ([`PrepareOptions::pad_to_stride`]).
    pub fn with_pad_to_stride(mut self, pad: bool) -> Self {
        self.pad_to_stride = pad;
        self
    }
}

/// A prepared batch and the sizes needed to map its output back to the images.
///
/// # Example
///
/// ```
/// use ndarray::Array4;
/// use segtool_runtime::expert::{prepare, PrepareOptions};
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// let options = PrepareOptions::new().with_pad_to_stride(true);
/// let prepared = prepare(&[image::RgbImage::new(20, 10)], &spec, &options)?;
/// assert_eq!(prepared.original, (10, 20));
/// assert_eq!(prepared.input.dim(), (1, 3, 16, 24)); // what the engine runs
/// // Stand-in for the engine's logits: the padding is cropped off on the way back.
/// let logits = Array4::<f32>::zeros((1, 2, 16, 24));
/// assert_eq!(prepared.restore_logits(logits.view()).dim(), (1, 2, 10, 20));
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Prepared {
    /// Normalised `(N, 3, padded.0, padded.1)`.
    pub input: Array4<f32>,
    /// The images' own `(height, width)`.
    pub original: (usize, usize),
    /// After the resize, before padding.
    pub resized: (usize, usize),
    /// The model's input size.
    pub padded: (usize, usize),
}

impl Prepared {
    /// `[N, C, h, w]` logits of `input` -> `[N, C, H, W]` at the original size: the
    /// padding is cropped off, the rest resized (bilinear, `align_corners=false`). Logits
    /// at another size than the input (a coarse output) are first brought to it.
    pub fn restore_logits(&self, logits: ArrayView4<f32>) -> Array4<f32> {
        let cropped = self.crop(logits);
        let (h, w) = self.original;
        resize_bilinear(cropped.view(), h, w, false)
    }

    /// Masks at the original size; see [`Upsample`] for the two ways there.
    pub fn restore_masks(&self, logits: ArrayView4<f32>, upsample: Upsample) -> Vec<ClassMap> {
        let cropped = self.crop(logits);
        let (h, w) = self.original;
        masks_at_size(cropped.view(), h, w, upsample)
    }

    /// The logits of the un-padded region, at the resized size.
    fn crop(&self, logits: ArrayView4<f32>) -> Array4<f32> {
        let (_, _, lh, lw) = logits.dim();
        let (ph, pw) = self.padded;
        let full;
        let logits = if (lh, lw) == (ph, pw) {
            logits
        } else {
            full = resize_bilinear(logits, ph, pw, false);
            full.view()
        };
        let (rh, rw) = self.resized;
        logits.slice(s![.., .., ..rh, ..rw]).to_owned()
    }
}

/// Same-size images -> model input: optional resize, normalisation, optional padding to
/// a multiple of the output stride (zero pixels, i.e. `-mean/std`, bottom and right).
pub fn prepare(imgs: &[RgbImage], spec: &ModelSpec, opts: &PrepareOptions) -> Result<Prepared> {
    let original = imgs
        .first()
        .map(|i| (i.height() as usize, i.width() as usize))
        .unwrap_or((0, 0));
    let resized_imgs;
    let imgs = match opts.resize {
        Some((h, w)) if (h as usize, w as usize) != original && !imgs.is_empty() => {
            if h == 0 || w == 0 {
                return Err(RuntimeError::InputShape {
                    expected: "a resize target of at least 1x1".into(),
                    got: format!("{h}x{w}"),
                });
            }
            resized_imgs = imgs
                .iter()
                .map(|i| image::imageops::resize(i, w, h, image::imageops::FilterType::Triangle))
                .collect::<Vec<_>>();
            &resized_imgs[..]
        }
        _ => imgs,
    };
    let input = normalise_batch(imgs, spec)?;
    let (n, _, rh, rw) = input.dim();
    let stride = spec.backbone.output_stride.max(1) as usize;
    let (ph, pw) = if opts.pad_to_stride {
        (rh.div_ceil(stride) * stride, rw.div_ceil(stride) * stride)
    } else {
        (rh, rw)
    };
    let input = if (ph, pw) == (rh, rw) {
        input
    } else {
        let zero = zero_pixel(spec);
        let mut padded = Array4::from_shape_fn((n, 3, ph, pw), |(_, c, _, _)| zero[c]);
        padded.slice_mut(s![.., .., ..rh, ..rw]).assign(&input);
        padded
    };
    Ok(Prepared {
        input,
        original,
        resized: (rh, rw),
        padded: (ph, pw),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;
    use segtool_testkit::tiny_spec;

    /// Frames in any pixel format, with padded rows, normalise to the values of the same
    /// pixels as an RGB image, bit for bit.
    #[test]
    fn frames_normalise_as_their_rgb_images() {
        let spec = tiny_spec(2);
        let img = RgbImage::from_fn(5, 3, |x, y| Rgb([(x * 50) as u8, (y * 90) as u8, 7]));
        let want = normalise_batch(&[img.clone(), img.clone()], &spec).unwrap();
        let stride = 5 * 4 + 3;
        let mut bgra = vec![0xAB; stride * 3];
        for (x, y, p) in img.enumerate_pixels() {
            let at = y as usize * stride + x as usize * 4;
            bgra[at..at + 3].copy_from_slice(&[p.0[2], p.0[1], p.0[0]]);
        }
        let frames = [
            Frame::rgb(&img),
            Frame::new(&bgra, 5, 3, stride, crate::PixelFormat::Bgra8).unwrap(),
        ];
        assert_eq!(normalise_frames(&frames, &spec).unwrap(), want);
        let short = Frame::new(&bgra, 4, 3, stride, crate::PixelFormat::Bgra8).unwrap();
        let e = normalise_frames(&[frames[0], short], &spec).unwrap_err();
        assert!(e.to_string().contains("image 1 is 4x3"), "{e}");
    }

    /// One formula for every scale: one over a whole number divides (bit for bit what
    /// training's `x / 255` gives), any other multiplies.
    #[test]
    fn the_formula_divides_by_a_whole_reciprocal_scale_and_multiplies_otherwise() {
        let mut products_differ = 0;
        for x in (0..=255).map(|v| v as f32) {
            assert_eq!(
                normalised(x, 1.0 / 255.0, 0.485, 0.229),
                (x / 255.0 - 0.485) / 0.229
            );
            products_differ += usize::from(x * (1.0 / 255.0) != x / 255.0);
            assert_eq!(normalised(x, 1.0, 123.675, 58.395), (x - 123.675) / 58.395);
            assert_eq!(normalised(x, 0.5, 0.0, 1.0), x * 0.5);
            assert_eq!(normalised(x, 0.017, 1.0, 2.0), (x * 0.017 - 1.0) / 2.0);
        }
        assert!(products_differ > 0, "the division matters");
    }

    #[test]
    fn normalise_matches_formula_and_layout() {
        let spec = tiny_spec(2);
        let mut img = RgbImage::new(3, 2);
        img.put_pixel(0, 0, Rgb([0, 128, 255]));
        img.put_pixel(2, 1, Rgb([255, 0, 10]));
        let t = normalise(&img, &spec);
        assert_eq!(t.shape(), &[1, 3, 2, 3]);
        let f = |x: f32, c: usize| (x / 255.0 - spec.mean[c]) / spec.std[c];
        assert_eq!(t[[0, 0, 0, 0]], f(0.0, 0));
        assert_eq!(t[[0, 1, 0, 0]], f(128.0, 1));
        assert_eq!(t[[0, 2, 0, 0]], f(255.0, 2));
        assert_eq!(t[[0, 0, 1, 2]], f(255.0, 0));
        assert_eq!(t[[0, 2, 1, 2]], f(10.0, 2));
        // ImageNet numbers: black red channel is -0.485/0.229.
        assert!((t[[0, 0, 0, 1]] + 2.117_904).abs() < 1e-5);
    }

    #[test]
    fn batch_stacks_and_rejects_mixed_sizes() {
        let spec = tiny_spec(2);
        let a = RgbImage::from_pixel(4, 2, Rgb([10, 20, 30]));
        let b = RgbImage::from_pixel(4, 2, Rgb([200, 100, 0]));
        let t = normalise_batch(&[a.clone(), b.clone()], &spec).unwrap();
        assert_eq!(t.shape(), &[2, 3, 2, 4]);
        assert_eq!(
            t.index_axis(Axis(0), 1),
            normalise(&b, &spec).index_axis(Axis(0), 0)
        );
        let err = normalise_batch(&[a, RgbImage::new(3, 2)], &spec).unwrap_err();
        assert!(err.to_string().contains("image 1 is 3x2"), "{err}");
        assert!(normalise_batch(&[], &spec).is_err());
    }

    #[test]
    fn prepare_pads_to_stride_and_restores() {
        let spec = tiny_spec(2);
        let stride = spec.backbone.output_stride as usize;
        let img = RgbImage::from_fn(10, 7, |x, y| Rgb([(x * 20) as u8, (y * 30) as u8, 7]));
        let p = prepare(
            std::slice::from_ref(&img),
            &spec,
            &PrepareOptions::new().with_pad_to_stride(true),
        )
        .unwrap();
        assert_eq!(p.original, (7, 10));
        assert_eq!(p.resized, (7, 10));
        assert_eq!(
            p.padded,
            (
                7usize.div_ceil(stride) * stride,
                10usize.div_ceil(stride) * stride
            )
        );
        assert_eq!(p.input.slice(s![.., .., ..7, ..10]), normalise(&img, &spec));
        let zero = zero_pixel(&spec);
        if p.padded.1 > 10 {
            assert_eq!(p.input[[0, 1, 0, 10]], zero[1]);
        }
        // An identity "model": the logits are the input; restoring gives the image back.
        let back = p.restore_logits(p.input.view());
        assert_eq!(back, normalise(&img, &spec));
        let masks = p.restore_masks(p.input.view(), Upsample::Nearest);
        assert_eq!(masks[0].dim(), (7, 10));

        // Resize to 14x20 and back.
        let p = prepare(
            std::slice::from_ref(&img),
            &spec,
            &PrepareOptions::new()
                .with_resize(14, 20)
                .with_pad_to_stride(true),
        )
        .unwrap();
        assert_eq!(p.resized, (14, 20));
        assert_eq!(p.restore_logits(p.input.view()).dim(), (1, 3, 7, 10));
        assert_eq!(
            p.restore_masks(p.input.view(), Upsample::Bilinear)[0].dim(),
            (7, 10)
        );
    }
}
