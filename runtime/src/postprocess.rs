//! Model output -> masks and pictures: argmax, nearest-neighbour mask resize, colour
//! masks and overlays.
//!
//! Masks are `(H, W)` `u8` class indices, the same layout as training labels, so they go
//! straight into `segtool_core`'s confusion matrix.

use image::{Rgb, RgbImage};
use ndarray::{Array2, ArrayView2, ArrayView4, Axis, Zip};

/// Blend factor used by the CLI for overlays: half image, half class colour.
pub const DEFAULT_ALPHA: f32 = 0.5;

/// Per-pixel argmax over the class axis of `[N, C, H, W]` logits: one `(H, W)` mask per
/// image. Ties resolve to the lowest class index, like `torch.argmax`; a NaN score never
/// wins over a number (a broken class should not paint the whole image).
///
/// # Panics
/// With more than 256 classes (a `u8` mask cannot hold them).
pub fn argmax(logits: ArrayView4<f32>) -> Vec<Array2<u8>> {
    let (_, c, h, w) = logits.dim();
    assert!(c <= 256, "{c} classes do not fit a u8 mask");
    logits
        .outer_iter()
        .map(|scores| {
            let mut best = scores.index_axis(Axis(0), 0).to_owned();
            let mut mask = Array2::<u8>::zeros((h, w));
            for (k, plane) in scores.outer_iter().enumerate().skip(1) {
                Zip::from(&mut best)
                    .and(&mut mask)
                    .and(&plane)
                    .for_each(|b, m, &v| {
                        if v > *b || (b.is_nan() && !v.is_nan()) {
                            *b = v;
                            *m = k as u8;
                        }
                    });
            }
            mask
        })
        .collect()
}

/// Nearest-neighbour resize of a mask to `(height, width)`, PyTorch `mode="nearest"`
/// convention (source index `floor(dst * src / dst_size)`). Labels are never blended.
pub fn resize_nearest(mask: ArrayView2<u8>, height: usize, width: usize) -> Array2<u8> {
    let (h, w) = mask.dim();
    if (h, w) == (height, width) {
        return mask.to_owned();
    }
    let src =
        |dst: usize, src_len: usize, dst_len: usize| ((dst * src_len) / dst_len).min(src_len - 1);
    let cols: Vec<usize> = (0..width).map(|x| src(x, w, width)).collect();
    Array2::from_shape_fn((height, width), |(y, x)| mask[[src(y, h, height), cols[x]]])
}

/// Colour picture of a mask. Labels without a palette entry (e.g. 255, ignore) are black.
pub fn colorize(mask: ArrayView2<u8>, palette: &[[u8; 3]]) -> RgbImage {
    let (h, w) = mask.dim();
    RgbImage::from_fn(w as u32, h as u32, |x, y| {
        Rgb(palette
            .get(mask[[y as usize, x as usize]] as usize)
            .copied()
            .unwrap_or([0, 0, 0]))
    })
}

/// `img` blended with the mask's colours: `(1 - alpha) * img + alpha * colour`, rounded.
/// Pixels whose label has no palette entry keep the image colour. A mask of another size
/// is resized (nearest) to the image first.
pub fn overlay(img: &RgbImage, mask: ArrayView2<u8>, palette: &[[u8; 3]], alpha: f32) -> RgbImage {
    let (w, h) = img.dimensions();
    let resized;
    let mask = if mask.dim() == (h as usize, w as usize) {
        mask
    } else {
        resized = resize_nearest(mask, h as usize, w as usize);
        resized.view()
    };
    let alpha = alpha.clamp(0.0, 1.0);
    let mut out = img.clone();
    for (x, y, px) in out.enumerate_pixels_mut() {
        if let Some(colour) = palette.get(mask[[y as usize, x as usize]] as usize) {
            for (p, &c) in px.0.iter_mut().zip(colour) {
                *p = ((1.0 - alpha) * f32::from(*p) + alpha * f32::from(c)).round() as u8;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use ndarray::{arr2, Array4};

    #[test]
    fn argmax_picks_class_per_pixel_and_image() {
        // N=2, C=3, H=1, W=2
        let mut l = Array4::<f32>::zeros((2, 3, 1, 2));
        l[[0, 2, 0, 0]] = 5.0;
        l[[0, 1, 0, 1]] = 1.0;
        l[[1, 0, 0, 0]] = -1.0; // classes 1 and 2 tie at 0 -> 1
        l[[1, 0, 0, 1]] = f32::NAN;
        l[[1, 2, 0, 1]] = 3.0;
        let masks = argmax(l.view());
        assert_eq!(masks.len(), 2);
        assert_eq!(masks[0], arr2(&[[2, 1]]));
        assert_eq!(masks[1], arr2(&[[1, 2]]));
    }

    #[test]
    fn resize_nearest_keeps_labels() {
        let m = arr2(&[[1u8, 2], [3, 4]]);
        assert_eq!(
            resize_nearest(m.view(), 4, 4),
            arr2(&[[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]])
        );
        assert_eq!(resize_nearest(m.view(), 1, 1), arr2(&[[1]]));
        assert_eq!(
            resize_nearest(m.view(), 2, 3),
            arr2(&[[1, 1, 2], [3, 3, 4]])
        );
    }

    #[test]
    fn colorize_and_overlay() {
        let palette = [[0, 0, 0], [255, 0, 0], [0, 255, 0]];
        let mask = arr2(&[[0u8, 1], [2, 255]]);
        let c = colorize(mask.view(), &palette);
        assert_eq!((c.width(), c.height()), (2, 2));
        assert_eq!(c.get_pixel(1, 0), &Rgb([255, 0, 0]));
        assert_eq!(c.get_pixel(0, 1), &Rgb([0, 255, 0]));
        assert_eq!(c.get_pixel(1, 1), &Rgb([0, 0, 0]));

        let img = RgbImage::from_pixel(2, 2, Rgb([100, 100, 100]));
        let o = overlay(&img, mask.view(), &palette, DEFAULT_ALPHA);
        assert_eq!(o.get_pixel(0, 0), &Rgb([50, 50, 50]));
        assert_eq!(o.get_pixel(1, 0), &Rgb([178, 50, 50])); // 177.5 rounds up
        assert_eq!(o.get_pixel(1, 1), &Rgb([100, 100, 100])); // ignore label: untouched
                                                              // A 1x1 mask is stretched over the 2x2 image.
        let o = overlay(&img, arr2(&[[2u8]]).view(), &palette, 1.0);
        assert!(o.pixels().all(|p| *p == Rgb([0, 255, 0])));
    }
}
