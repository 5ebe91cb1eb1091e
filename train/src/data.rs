//! From (image, mask) samples to training tensors: the recipe's augmentation (flip, random
//! rescale, pad with 0 / ignore, random crop) and normalisation to NCHW f32.

use image::imageops::{self, FilterType};
use image::{GrayImage, Luma, Rgb, RgbImage};
use rand::Rng;
use segtool_core::dataset::Sample;
use segtool_core::{ModelSpec, IGNORE_LABEL};
use tch::{Device, Kind, Tensor};

#[derive(Clone, Debug)]
pub struct Augment {
    pub flip: bool,
    /// Short side rescaled to `base_size * U(lo, hi)`; `None` keeps the size.
    pub scale: Option<(f64, f64)>,
    pub base_size: u32,
    /// Random crop (padded first when smaller); `None` keeps the whole image.
    pub crop: Option<u32>,
}

impl Augment {
    pub fn none() -> Self {
        Self {
            flip: false,
            scale: None,
            base_size: 0,
            crop: None,
        }
    }

    /// DANet's Cityscapes recipe: flip, short side in [0.75, 2.0] x 1024, 768 crop.
    pub fn danet_cityscapes() -> Self {
        Self {
            flip: true,
            scale: Some((0.75, 2.0)),
            base_size: 1024,
            crop: Some(768),
        }
    }

    pub fn apply(&self, sample: &Sample, rng: &mut impl Rng) -> Sample {
        let (mut image, mut mask) = (sample.image.clone(), sample.mask.clone());
        if self.flip && rng.gen_bool(0.5) {
            image = imageops::flip_horizontal(&image);
            mask = imageops::flip_horizontal(&mask);
        }
        if let Some((lo, hi)) = self.scale {
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
        if let Some(crop) = self.crop {
            let (w, h) = image.dimensions();
            if w < crop || h < crop {
                let (pw, ph) = (w.max(crop), h.max(crop));
                let mut padded = RgbImage::from_pixel(pw, ph, Rgb([0, 0, 0]));
                let mut padded_mask = GrayImage::from_pixel(pw, ph, Luma([IGNORE_LABEL]));
                imageops::replace(&mut padded, &image, 0, 0);
                imageops::replace(&mut padded_mask, &mask, 0, 0);
                image = padded;
                mask = padded_mask;
            }
            let (w, h) = image.dimensions();
            let (x, y) = (rng.gen_range(0..=w - crop), rng.gen_range(0..=h - crop));
            image = imageops::crop_imm(&image, x, y, crop, crop).to_image();
            mask = imageops::crop_imm(&mask, x, y, crop, crop).to_image();
        }
        Sample { image, mask }
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
    fn normalisation_matches_formula() {
        let spec = ModelSpec::new("tiny", segtool_core::BackboneSpec::tiny(), vec!["a".into()]);
        let img = RgbImage::from_pixel(2, 1, Rgb([255, 0, 128]));
        let t = images_to_tensor(&[&img], &spec, Device::Cpu);
        assert_eq!(t.size(), vec![1, 3, 1, 2]);
        let v = t.double_value(&[0, 2, 0, 1]);
        assert!((v - (128.0 / 255.0 - 0.406) / 0.225).abs() < 1e-6);
    }
}
