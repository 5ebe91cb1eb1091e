//! The resizes of mmsegmentation's train pipeline (mmcv's `imresize`, OpenCV backend):
//! `cv2.INTER_LINEAR` for images and `cv2.INTER_NEAREST` for label maps, with OpenCV's
//! sampling positions (bilinear: half-pixel centres, edges clamped; nearest:
//! `floor(dst_x * src / dst)`, not centred) and its 11-bit fixed-point bilinear weights.
//! Labels are exact; images agree with OpenCV within 1 level (its SIMD and scalar tails
//! round the vertical pass differently; this follows the SIMD one).

use image::{GrayImage, Luma, Rgb, RgbImage};

/// OpenCV's `INTER_RESIZE_COEF_BITS`.
const COEF_BITS: u32 = 11;
const COEF_SCALE: f32 = (1 << COEF_BITS) as f32;

/// OpenCV's `scale_x = 1. / inv_scale_x` with `inv_scale_x = dst / src` (doubles).
fn inverse_scale(src: u32, dst: u32) -> f64 {
    1.0 / (dst as f64 / src as f64)
}

/// Per destination index: the two source taps and their fixed-point weights.
fn linear_taps(src: u32, dst: u32) -> Vec<([usize; 2], [i32; 2])> {
    let scale = inverse_scale(src, dst);
    (0..dst)
        .map(|d| {
            let pos = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let mut s = pos.floor() as i64;
            let mut f = pos - s as f32;
            if s < 0 {
                (s, f) = (0, 0.0);
            }
            if s >= src as i64 - 1 {
                (s, f) = (src as i64 - 1, 0.0);
            }
            let s = s as usize;
            let w0 = ((1.0 - f) * COEF_SCALE).round_ties_even() as i32;
            let w1 = (f * COEF_SCALE).round_ties_even() as i32;
            ([s, (s + 1).min(src as usize - 1)], [w0, w1])
        })
        .collect()
}

/// `cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR)` of an 8-bit RGB image.
pub fn bilinear_rgb(image: &RgbImage, w: u32, h: u32) -> RgbImage {
    let (sw, sh) = image.dimensions();
    let xs = linear_taps(sw, w);
    let ys = linear_taps(sh, h);
    // Horizontal pass per source row, in the fixed-point units of OpenCV's `hresize`.
    let rows: Vec<Vec<[i32; 3]>> = (0..sh)
        .map(|y| {
            xs.iter()
                .map(|&([a, b], [wa, wb])| {
                    let (pa, pb) = (
                        image.get_pixel(a as u32, y).0,
                        image.get_pixel(b as u32, y).0,
                    );
                    [0, 1, 2].map(|c| pa[c] as i32 * wa + pb[c] as i32 * wb)
                })
                .collect()
        })
        .collect();
    RgbImage::from_fn(w, h, |x, y| {
        let ([r0, r1], [b0, b1]) = ys[y as usize];
        let (s0, s1) = (rows[r0][x as usize], rows[r1][x as usize]);
        // VResizeLinearVec_32s8u: ((b0 * (s0 >> 4)) >> 16) + ((b1 * (s1 >> 4)) >> 16), + 2 >> 2.
        Rgb([0, 1, 2].map(|c| {
            let v = ((b0 * (s0[c] >> 4)) >> 16) + ((b1 * (s1[c] >> 4)) >> 16);
            ((v + 2) >> 2).clamp(0, 255) as u8
        }))
    })
}

/// `cv2.resize(mask, (w, h), interpolation=cv2.INTER_NEAREST)`: source index
/// `min(floor(d * src / dst), src - 1)` on each axis.
pub fn nearest_gray(mask: &GrayImage, w: u32, h: u32) -> GrayImage {
    let (sw, sh) = mask.dimensions();
    let index = |d: u32, src: u32, dst: u32| {
        ((d as f64 * inverse_scale(src, dst)).floor() as u32).min(src - 1)
    };
    let xs: Vec<u32> = (0..w).map(|x| index(x, sw, w)).collect();
    GrayImage::from_fn(w, h, |x, y| {
        Luma(mask.get_pixel(xs[x as usize], index(y, sh, h)).0)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_size_is_identity() {
        let img = RgbImage::from_fn(5, 3, |x, y| Rgb([x as u8 * 40, y as u8 * 70, 9]));
        assert_eq!(bilinear_rgb(&img, 5, 3), img);
        let mask = GrayImage::from_fn(5, 3, |x, y| Luma([(x + y) as u8]));
        assert_eq!(nearest_gray(&mask, 5, 3), mask);
    }

    #[test]
    fn nearest_takes_the_top_left_source_of_each_cell() {
        let mask = GrayImage::from_fn(4, 1, |x, _| Luma([x as u8]));
        let up = nearest_gray(&mask, 8, 1);
        assert_eq!(up.as_raw(), &[0, 0, 1, 1, 2, 2, 3, 3]);
        let down = nearest_gray(&mask, 2, 1);
        assert_eq!(down.as_raw(), &[0, 2]);
    }
}
