//! Image -> model input: RGB u8 HWC to normalised f32 NCHW, `(x / 255 - mean) / std`.
//!
//! The formula is evaluated once per channel and byte value into a 3x256 table, so every
//! pixel costs a lookup and the values are bit-identical to the straightforward formula
//! (and to what training used), not merely close to it.

use image::RgbImage;
use ndarray::{Array4, ArrayViewMut3, Axis};
use segtool_core::ModelSpec;

use crate::error::{Result, RuntimeError};

/// Per-channel lookup table of normalised values.
struct Table([[f32; 256]; 3]);

impl Table {
    fn new(spec: &ModelSpec) -> Self {
        let mut t = [[0f32; 256]; 3];
        for (c, row) in t.iter_mut().enumerate() {
            for (x, v) in row.iter_mut().enumerate() {
                *v = (x as f32 / 255.0 - spec.mean[c]) / spec.std[c];
            }
        }
        Table(t)
    }

    /// Writes `img` into `out` laid out `(3, H, W)`.
    fn fill(&self, img: &RgbImage, mut out: ArrayViewMut3<f32>) {
        let w = img.width() as usize;
        for (c, table) in self.0.iter().enumerate() {
            let mut plane = out.index_axis_mut(Axis(0), c);
            let plane = plane
                .as_slice_mut()
                .expect("freshly allocated, standard layout");
            for (dst, px) in plane.iter_mut().zip(img.pixels()) {
                *dst = table[px.0[c] as usize];
            }
            debug_assert_eq!(plane.len(), w * img.height() as usize);
        }
    }
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
    let first = imgs.first().ok_or_else(|| RuntimeError::InputShape {
        expected: "at least one image".into(),
        got: "an empty batch".into(),
    })?;
    let (w, h) = first.dimensions();
    if let Some((i, odd)) = imgs
        .iter()
        .enumerate()
        .find(|(_, im)| im.dimensions() != (w, h))
    {
        return Err(RuntimeError::InputShape {
            expected: format!("every image of a batch {w}x{h} like image 0"),
            got: format!("image {i} is {}x{}", odd.width(), odd.height()),
        });
    }
    let table = Table::new(spec);
    let mut out = Array4::zeros((imgs.len(), 3, h as usize, w as usize));
    for (img, slot) in imgs.iter().zip(out.outer_iter_mut()) {
        table.fill(img, slot);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tiny_spec;
    use image::Rgb;

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
}
