//! From (image, mask) samples to training tensors: the recipe's augmentation (flip, random
//! rescale, pad with 0 / ignore, random crop), optional photometric extras (colour jitter,
//! Gaussian blur) and normalisation to NCHW f32; and mmsegmentation's train pipeline
//! (`RandomResize` with keep_ratio, `RandomCrop` with `cat_max_ratio`, `RandomFlip`,
//! `PhotoMetricDistortion`, padding after normalisation).

use image::imageops::{self, FilterType};
use image::{GrayImage, Luma, Rgb, RgbImage};
use rand::Rng;
use segtool_core::dataset::Sample;
use segtool_core::IGNORE_LABEL;
use segtool_model_spec::ModelSpec;
use tch::{Device, Kind, Tensor};

pub use crate::photometric::PhotoMetric;

/// Per-sample augmentation. Every random choice comes from the RNG handed to
/// [`Augment::apply`], so a sample's augmentation is reproducible from that RNG alone
/// (the loader seeds one per sample, which is what makes it independent of threads).
///
/// Build variants with struct update syntax, `Augment { crop: Some(512), ..Augment::none() }`,
/// so new fields do not break callers.
#[derive(Clone, Debug)]
pub struct Augment {
    pub flip: bool,
    /// Short side rescaled to `base_size * U(lo, hi)`; `None` keeps the size.
    pub scale: Option<(f64, f64)>,
    pub base_size: u32,
    /// Random crop (padded first when smaller); `None` keeps the whole image.
    pub crop: Option<u32>,
    /// Colour jitter strength `s` in [0, 1]: brightness, contrast and saturation factors
    /// each drawn from U(1 - s, 1 + s). 0 turns it off. Image only.
    pub color_jitter: f64,
    /// Probability in [0, 1] of a Gaussian blur with sigma drawn from `blur_sigma`.
    /// 0 turns it off. Image only.
    pub blur_prob: f64,
    /// (lo, hi) range of the blur's sigma in pixels; lo must be positive when blurring.
    pub blur_sigma: (f64, f64),
    /// mmsegmentation's `RandomResize(scale=(long, short), ratio_range=scale,
    /// keep_ratio=True)` instead of `base_size`: r ~ U(scale), and the image is resized by
    /// min(long r / its long side, short r / its short side) (bilinear, labels nearest).
    pub resize_scale: Option<(u32, u32)>,
    /// A rectangular crop (height, width) instead of `crop`'s square.
    pub crop_hw: Option<(u32, u32)>,
    /// mmsegmentation's `cat_max_ratio`: the crop window is redrawn, up to 10 times, while
    /// it holds fewer than two labelled classes or one covers `cat_max_ratio` or more of
    /// its labelled pixels. 1 turns it off.
    pub cat_max_ratio: f64,
    /// mmsegmentation's `PhotoMetricDistortion` on the crop, before padding.
    pub photometric: Option<PhotoMetric>,
    /// Pad the image after normalisation, with 0 (the mean colour), as mmsegmentation's
    /// `SegDataPreProcessor` does: the image stays unpadded here (the mask is padded with
    /// ignore) and [`images_to_tensor_padded`] pads it. Off: padded with black pixels.
    pub pad_after_normalize: bool,
}

/// An [`Augment`] whose parameters cannot be applied (they would panic in the RNG or the
/// blur); reported up front instead of from a worker thread mid-epoch.
#[derive(Debug, thiserror::Error)]
#[error("invalid augmentation: {0}")]
pub struct InvalidAugment(pub String);

impl Default for Augment {
    /// No augmentation: same as [`Augment::none`].
    fn default() -> Self {
        Self::none()
    }
}

impl Augment {
    pub fn none() -> Self {
        Self {
            flip: false,
            scale: None,
            base_size: 0,
            crop: None,
            color_jitter: 0.0,
            blur_prob: 0.0,
            blur_sigma: (0.1, 2.0),
            resize_scale: None,
            crop_hw: None,
            cat_max_ratio: 1.0,
            photometric: None,
            pad_after_normalize: false,
        }
    }

    /// The crop's (width, height), square or rectangular; `None` without a crop.
    pub fn crop_dims(&self) -> Option<(u32, u32)> {
        match (self.crop_hw, self.crop) {
            (Some((h, w)), _) => Some((w, h)),
            (None, Some(c)) => Some((c, c)),
            (None, None) => None,
        }
    }

    /// DANet's Cityscapes recipe: flip, short side in [0.75, 2.0] x 1024, 768 crop.
    pub fn danet_cityscapes() -> Self {
        Self {
            flip: true,
            scale: Some((0.75, 2.0)),
            base_size: 1024,
            crop: Some(768),
            ..Self::none()
        }
    }

    /// Checks the parameters that would otherwise panic while augmenting.
    pub fn validate(&self) -> Result<(), InvalidAugment> {
        let bad = |msg: String| Err(InvalidAugment(msg));
        if let Some((lo, hi)) = self.scale {
            if !(lo > 0.0 && lo < hi) {
                return bad(format!("scale range ({lo}, {hi}) must satisfy 0 < lo < hi"));
            }
        }
        if self.crop == Some(0) || self.crop_hw.is_some_and(|(h, w)| h == 0 || w == 0) {
            return bad("crop size must be positive".into());
        }
        if let Some((long, short)) = self.resize_scale {
            if long == 0 || short == 0 || self.scale.is_none() {
                return bad(format!(
                    "resize scale ({long}, {short}) needs positive sides and a ratio range"
                ));
            }
        }
        if !(self.cat_max_ratio > 0.0 && self.cat_max_ratio <= 1.0) {
            return bad(format!(
                "cat_max_ratio {} is outside (0, 1]",
                self.cat_max_ratio
            ));
        }
        if !(0.0..=1.0).contains(&self.color_jitter) {
            return bad(format!(
                "colour jitter {} is outside [0, 1]",
                self.color_jitter
            ));
        }
        if !(0.0..=1.0).contains(&self.blur_prob) {
            return bad(format!(
                "blur probability {} is outside [0, 1]",
                self.blur_prob
            ));
        }
        let (lo, hi) = self.blur_sigma;
        if self.blur_prob > 0.0 && !(lo > 0.0 && lo <= hi && hi.is_finite()) {
            return bad(format!(
                "blur sigma range ({lo}, {hi}) must satisfy 0 < lo <= hi"
            ));
        }
        Ok(())
    }

    /// Augments a copy of `sample`; see [`Augment::transform`].
    pub fn apply(&self, sample: &Sample, rng: &mut impl Rng) -> Sample {
        let copy = Sample {
            image: sample.image.clone(),
            mask: sample.mask.clone(),
        };
        self.transform(copy, rng)
    }

    /// Augments `sample` in this order: flip, rescale, choose the crop window, photometric
    /// changes (image only), pad with 0 / ignore. The photometric step runs on the cropped
    /// but not yet padded pixels, as mmsegmentation does: the padding stays exactly 0, the
    /// contrast mean ignores it, and jittering only the crop is cheaper than the whole
    /// rescaled image. The RNG draws of the geometric steps come first and are the same as
    /// without the extras, so turning the extras off reproduces earlier results exactly.
    pub fn transform(&self, sample: Sample, rng: &mut impl Rng) -> Sample {
        let Sample {
            mut image,
            mut mask,
        } = sample;
        if self.flip && rng.gen_bool(0.5) {
            image = imageops::flip_horizontal(&image);
            mask = imageops::flip_horizontal(&mask);
        }
        match (self.scale, self.resize_scale) {
            (Some(ratio), Some(scale)) => {
                let (w, h) = image.dimensions();
                let (nw, nh) = mmseg_random_resize((w, h), scale, ratio, rng);
                if (nw, nh) != (w, h) {
                    image = crate::resize::bilinear_rgb(&image, nw, nh);
                    mask = crate::resize::nearest_gray(&mask, nw, nh);
                }
            }
            (Some((lo, hi)), None) => {
                let (w, h) = image.dimensions();
                let short = (self.base_size as f64 * rng.gen_range(lo..hi))
                    .round()
                    .max(1.0);
                let factor = short / w.min(h) as f64;
                let (nw, nh) = (
                    ((w as f64 * factor).round() as u32).max(1),
                    ((h as f64 * factor).round() as u32).max(1),
                );
                image = imageops::resize(&image, nw, nh, FilterType::Triangle);
                mask = imageops::resize(&mask, nw, nh, FilterType::Nearest);
            }
            (None, _) => {}
        }
        let crop = self.crop_dims();
        if let Some((crop_w, crop_h)) = crop {
            // The window is drawn over the image padded (at its bottom/right) to at least
            // the crop; only the part inside the real image needs cutting out now, since
            // the window starts at 0 along any axis that needs padding.
            let (w, h) = image.dimensions();
            let (x, y, cw, ch) = self.crop_window(&mask, (crop_w, crop_h), rng);
            if (x, y, cw, ch) != (0, 0, w, h) {
                image = imageops::crop_imm(&image, x, y, cw, ch).to_image();
                mask = imageops::crop_imm(&mask, x, y, cw, ch).to_image();
            }
        }
        self.photometric(&mut image, rng);
        if let Some((crop_w, crop_h)) = crop {
            let (w, h) = image.dimensions();
            if w < crop_w || h < crop_h {
                let (pw, ph) = (w.max(crop_w), h.max(crop_h));
                let mut padded_mask = GrayImage::from_pixel(pw, ph, Luma([IGNORE_LABEL]));
                imageops::replace(&mut padded_mask, &mask, 0, 0);
                mask = padded_mask;
                if !self.pad_after_normalize {
                    let mut padded = RgbImage::from_pixel(pw, ph, Rgb([0, 0, 0]));
                    imageops::replace(&mut padded, &image, 0, 0);
                    image = padded;
                }
            }
        }
        Sample { image, mask }
    }

    /// The crop window (x, y, width, height) inside an image of `mask`'s size: one uniform
    /// draw of the offset over the image padded to the crop, redrawn for `cat_max_ratio`
    /// as mmseg's `RandomCrop.crop_bbox` does (10 checks; the 11th draw is kept unchecked).
    fn crop_window(
        &self,
        mask: &GrayImage,
        (crop_w, crop_h): (u32, u32),
        rng: &mut impl Rng,
    ) -> (u32, u32, u32, u32) {
        let (w, h) = mask.dimensions();
        let draw = |rng: &mut _| {
            let (pw, ph) = (w.max(crop_w), h.max(crop_h));
            let x = gen_upto(rng, pw - crop_w);
            let y = gen_upto(rng, ph - crop_h);
            (x, y, crop_w.min(w - x), crop_h.min(h - y))
        };
        let mut window = draw(rng);
        if self.cat_max_ratio < 1.0 {
            for _ in 0..10 {
                if class_balance_ok(mask, window, self.cat_max_ratio) {
                    break;
                }
                window = draw(rng);
            }
        }
        window
    }

    /// Colour jitter (or mmseg's photometric distortion) then blur. Draws nothing from
    /// `rng` when all are off.
    fn photometric(&self, image: &mut RgbImage, rng: &mut impl Rng) {
        if let Some(p) = &self.photometric {
            p.apply(image, rng);
        }
        let s = self.color_jitter;
        if s > 0.0 {
            let range = (1.0 - s).max(0.0)..=1.0 + s;
            let brightness = rng.gen_range(range.clone()) as f32;
            let contrast = rng.gen_range(range.clone()) as f32;
            let saturation = rng.gen_range(range) as f32;
            color_jitter(image, brightness, contrast, saturation);
        }
        if self.blur_prob > 0.0 && rng.gen_bool(self.blur_prob) {
            let (lo, hi) = self.blur_sigma;
            let sigma = rng.gen_range(lo..=hi) as f32;
            *image = imageops::blur(image, sigma);
        }
    }
}

/// A uniform integer in 0..=n (`rng.gen_range(0..=n)`, as the crop has always drawn).
fn gen_upto(rng: &mut impl Rng, n: u32) -> u32 {
    rng.gen_range(0..=n)
}

/// mmseg's `RandomResize` with keep_ratio: ratio r ~ U(lo, hi), then
/// [`mmseg_resize_size`] at r.
pub fn mmseg_random_resize(
    size: (u32, u32),
    scale: (u32, u32),
    (lo, hi): (f64, f64),
    rng: &mut impl Rng,
) -> (u32, u32) {
    let ratio = if lo < hi { rng.gen_range(lo..hi) } else { lo };
    mmseg_resize_size(size, scale, ratio)
}

/// The size mmseg's `RandomResize(scale=(long, short), keep_ratio=True)` gives a `(w, h)`
/// image at ratio r: the target (int(long r), int(short r)); the factor min(long' / max(w,
/// h), short' / min(w, h)) (mmcv's `rescale_size`); the size int(w f + 0.5) x int(h f + 0.5).
pub fn mmseg_resize_size((w, h): (u32, u32), (long, short): (u32, u32), ratio: f64) -> (u32, u32) {
    let (tl, ts) = ((long as f64 * ratio) as u32, (short as f64 * ratio) as u32);
    let (max_long, max_short) = (tl.max(ts) as f64, tl.min(ts) as f64);
    let factor = (max_long / w.max(h) as f64).min(max_short / w.min(h) as f64);
    let side = |x: u32| ((x as f64 * factor + 0.5) as u32).max(1);
    (side(w), side(h))
}

/// mmseg's `cat_max_ratio` test on a window: at least two labelled classes, and the
/// largest below `ratio` of the labelled pixels (255 is not counted).
fn class_balance_ok(mask: &GrayImage, (x, y, w, h): (u32, u32, u32, u32), ratio: f64) -> bool {
    let mut counts = [0u64; 256];
    for yy in y..y + h {
        for xx in x..x + w {
            counts[mask.get_pixel(xx, yy).0[0] as usize] += 1;
        }
    }
    counts[IGNORE_LABEL as usize] = 0;
    let classes = counts.iter().filter(|&&c| c > 0).count();
    let total: u64 = counts.iter().sum();
    let max = counts.iter().copied().max().unwrap_or(0);
    classes > 1 && (max as f64 / total as f64) < ratio
}

/// ITU-R 601 luma, the grey that torchvision's and PIL's saturation/contrast blend toward.
fn luma(p: [f32; 3]) -> f32 {
    0.299 * p[0] + 0.587 * p[1] + 0.114 * p[2]
}

/// Brightness (scale), contrast (blend with the mean grey) and saturation (blend with each
/// pixel's grey), in that fixed order, clamping to [0, 255] after each step like
/// torchvision does; rounded to u8 once at the end.
fn color_jitter(image: &mut RgbImage, brightness: f32, contrast: f32, saturation: f32) {
    if image.width() == 0 || image.height() == 0 {
        return;
    }
    let bright = |px: &Rgb<u8>| px.0.map(|v| (v as f32 * brightness).min(255.0));
    // Summed in f64 in pixel order: the same result on every run and thread.
    let mean = (image
        .pixels()
        .map(|px| luma(bright(px)) as f64)
        .sum::<f64>()
        / (image.width() as f64 * image.height() as f64)) as f32;
    for px in image.pixels_mut() {
        let v = bright(px).map(|v| ((v - mean) * contrast + mean).clamp(0.0, 255.0));
        let grey = luma(v);
        px.0 = v.map(|v| ((v - grey) * saturation + grey).clamp(0.0, 255.0).round() as u8);
    }
}

/// Normalised (N, 3, H, W) f32 tensor of same-size images: (x/255 - mean) / std.
pub fn images_to_tensor(images: &[&RgbImage], spec: &ModelSpec, device: Device) -> Tensor {
    let (w, h) = images[0].dimensions();
    let plane = (w * h) as usize;
    let mut data = vec![0f32; images.len() * 3 * plane];
    for (n, img) in images.iter().enumerate() {
        assert_eq!(img.dimensions(), (w, h), "a batch needs images of one size");
        for (i, px) in img.pixels().enumerate() {
            for c in 0..3 {
                data[(n * 3 + c) * plane + i] =
                    (px.0[c] as f32 / 255.0 - spec.mean[c]) / spec.std[c];
            }
        }
    }
    Tensor::from_slice(&data)
        .view([images.len() as i64, 3, h as i64, w as i64])
        .to_device(device)
}

/// Normalised (N, 3, H, W) f32 tensor of images padded (bottom/right) to `(w, h)` with 0
/// after normalisation, as mmsegmentation's `SegDataPreProcessor` pads (`pad_val=0`).
pub fn images_to_tensor_padded(
    images: &[&RgbImage],
    (w, h): (u32, u32),
    spec: &ModelSpec,
    device: Device,
) -> Tensor {
    let plane = (w * h) as usize;
    let mut data = vec![0f32; images.len() * 3 * plane];
    for (n, img) in images.iter().enumerate() {
        assert!(
            img.width() <= w && img.height() <= h,
            "an image larger than its batch's padded size"
        );
        for (x, y, px) in img.enumerate_pixels() {
            let i = (y * w + x) as usize;
            for c in 0..3 {
                data[(n * 3 + c) * plane + i] =
                    (px.0[c] as f32 / 255.0 - spec.mean[c]) / spec.std[c];
            }
        }
    }
    Tensor::from_slice(&data)
        .view([images.len() as i64, 3, h as i64, w as i64])
        .to_device(device)
}

/// (N, H, W) i64 labels.
pub fn masks_to_tensor(masks: &[&GrayImage], device: Device) -> Tensor {
    let (w, h) = masks[0].dimensions();
    let data: Vec<i64> = masks
        .iter()
        .flat_map(|m| m.as_raw().iter().map(|&v| v as i64))
        .collect();
    Tensor::from_slice(&data)
        .view([masks.len() as i64, h as i64, w as i64])
        .to_kind(Kind::Int64)
        .to_device(device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn crop_pads_mask_with_ignore() {
        let sample = Sample {
            image: RgbImage::new(4, 3),
            mask: GrayImage::from_pixel(4, 3, Luma([1])),
        };
        let aug = Augment {
            flip: true,
            scale: None,
            base_size: 0,
            crop: Some(6),
            ..Augment::none()
        };
        let out = aug.apply(&sample, &mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
        assert_eq!(out.mask.dimensions(), (6, 6));
        assert_eq!(out.mask.as_raw().iter().filter(|&&v| v == 1).count(), 12);
        assert_eq!(
            out.mask
                .as_raw()
                .iter()
                .filter(|&&v| v == IGNORE_LABEL)
                .count(),
            24
        );
    }

    #[test]
    fn photometric_extras_keep_padding_black_and_mask_intact() {
        let sample = Sample {
            image: RgbImage::from_fn(5, 4, |x, y| Rgb([40 * x as u8, 50 * y as u8, 90])),
            mask: GrayImage::from_fn(5, 4, |x, _| Luma([x as u8])),
        };
        let aug = Augment {
            crop: Some(8),
            color_jitter: 0.5,
            blur_prob: 1.0,
            blur_sigma: (0.5, 1.5),
            ..Augment::none()
        };
        let out = aug.apply(&sample, &mut rand_chacha::ChaCha8Rng::seed_from_u64(3));
        assert_eq!(out.image.dimensions(), (8, 8));
        for (x, y, px) in out.image.enumerate_pixels() {
            if x >= 5 || y >= 4 {
                assert_eq!(px.0, [0, 0, 0], "padding at ({x}, {y})");
            }
        }
        let inner = imageops::crop_imm(&out.mask, 0, 0, 5, 4).to_image();
        assert_eq!(inner.as_raw(), sample.mask.as_raw());
        assert_ne!(
            imageops::crop_imm(&out.image, 0, 0, 5, 4)
                .to_image()
                .as_raw(),
            sample.image.as_raw()
        );
    }

    #[test]
    fn jitter_with_unit_factors_is_identity() {
        let mut img = RgbImage::from_fn(7, 3, |x, y| Rgb([x as u8 * 30, y as u8 * 80, 200]));
        let before = img.clone();
        color_jitter(&mut img, 1.0, 1.0, 1.0);
        assert_eq!(img, before);
    }

    #[test]
    fn validate_rejects_what_would_panic() {
        assert!(Augment::none().validate().is_ok());
        assert!(Augment::danet_cityscapes().validate().is_ok());
        let bad = [
            Augment {
                color_jitter: 1.5,
                ..Augment::none()
            },
            Augment {
                blur_prob: -0.1,
                ..Augment::none()
            },
            Augment {
                blur_prob: 0.5,
                blur_sigma: (0.0, 1.0),
                ..Augment::none()
            },
            Augment {
                scale: Some((1.0, 1.0)),
                ..Augment::none()
            },
            Augment {
                crop: Some(0),
                ..Augment::none()
            },
        ];
        for aug in bad {
            assert!(aug.validate().is_err(), "{aug:?}");
        }
    }

    #[test]
    fn normalisation_matches_formula() {
        let spec = ModelSpec::new(
            "tiny",
            segtool_model_spec::BackboneSpec::tiny(),
            vec!["a".into()],
        );
        let img = RgbImage::from_pixel(2, 1, Rgb([255, 0, 128]));
        let t = images_to_tensor(&[&img], &spec, Device::Cpu);
        assert_eq!(t.size(), vec![1, 3, 1, 2]);
        let v = t.double_value(&[0, 2, 0, 1]);
        assert!((v - (128.0 / 255.0 - 0.406) / 0.225).abs() < 1e-6);
    }
}
