//! mmcv's test-time image resize, exactly: the sizes of `Resize(scale=..., keep_ratio=True)`
//! and `Resize(scale_factor=r, keep_ratio=True)` (mmcv 2.2 `rescale_size` / `_scale_size`,
//! in float64 as Python computes them), and the pixels of `cv2.resize(img, (w, h),
//! interpolation=cv2.INTER_LINEAR)` on uint8 images (OpenCV 5.0), bit for bit.
//!
//! OpenCV's uint8 bilinear resize is fixed point: the horizontal pass weighs two source
//! pixels with 11-bit coefficients (`saturate_cast<short>(w * 2048)`, rounded half to
//! even, from float32 fractions) into int32; the vertical pass is its SIMD kernel
//! (`VResizeLinearVec_32s8u`) over the whole row: each int32 is shifted right by 4,
//! packed to int16, multiplied by the 11-bit row weight keeping the high 16 bits, the
//! two rows added (saturating) and `(v + 2) >> 2` packed to uint8. Columns are clamped
//! to the image (weight 0 on a missing neighbour); rows are not: above the first and
//! below the last row both taps read the edge row with their unclamped weights. The
//! scalar formula `(b0 * s0 + b1 * s1 + 2^21) >> 22` rounds differently and does not
//! match OpenCV 5.0's output (checked against cv2 by tests/reference/mmseg_resize_ref.py).

/// `(h, w)` of an `h` x `w` image scaled by `factor`: mmcv's `_scale_size`,
/// `int(side * factor + 0.5)` (at least one pixel, where OpenCV would refuse zero).
pub fn scale_size(h: usize, w: usize, factor: f64) -> (usize, usize) {
    let side = |len: usize| ((len as f64 * factor + 0.5) as usize).max(1);
    (side(h), side(w))
}

/// `(h, w)` of `Resize(scale=(long, short), keep_ratio=True)` (mmcv's `rescale_size`
/// with a tuple): the largest factor that keeps the long side within `max(scale)` and the
/// short side within `min(scale)`, then [`scale_size`].
pub fn keep_ratio_size(h: usize, w: usize, scale: [usize; 2]) -> (usize, usize) {
    let long = scale[0].max(scale[1]) as f64;
    let short = scale[0].min(scale[1]) as f64;
    let factor = (long / h.max(w) as f64).min(short / h.min(w) as f64);
    scale_size(h, w, factor)
}

/// `(h, w)` of `Resize(scale_factor=ratio, keep_ratio=True)`, mmseg's TTA resize: mmcv
/// first rounds the scaled size (`_scale_size`), then rescales the image to fit it
/// ([`keep_ratio_size`]), so the factor is rounded twice.
pub fn ratio_size(h: usize, w: usize, ratio: f64) -> (usize, usize) {
    let (sh, sw) = scale_size(h, w, ratio);
    keep_ratio_size(h, w, [sw, sh])
}

/// `(first source index, weights)` of every destination index along one axis, as
/// OpenCV's `resize` computes them in fixed point.
struct Taps {
    ofs: Vec<usize>,
    weights: Vec<[i32; 2]>,
}

/// `saturate_cast<short>(x * INTER_RESIZE_COEF_SCALE)`: rounded half to even.
fn coef(x: f32) -> i32 {
    (x * 2048.0).round_ties_even() as i32
}

/// Column taps: source positions clamped to the image, a missing right neighbour weighted
/// zero (OpenCV's `xofs`/`ialpha`, with everything from `xmax` on a plain copy).
fn column_taps(src: usize, dst: usize) -> Taps {
    let scale = 1.0 / (dst as f64 / src as f64);
    let mut taps = Taps {
        ofs: Vec::with_capacity(dst),
        weights: Vec::with_capacity(dst),
    };
    let mut past_edge = false;
    for d in 0..dst {
        let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
        let mut s = f.floor() as i64;
        let mut frac = f - s as f32;
        if s < 0 {
            s = 0;
            frac = 0.0;
        }
        if s + 1 >= src as i64 {
            past_edge = true;
            if s >= src as i64 - 1 {
                s = src as i64 - 1;
                frac = 0.0;
            }
        }
        taps.ofs.push(s as usize);
        taps.weights.push(if past_edge {
            [2048, 0]
        } else {
            [coef(1.0 - frac), coef(frac)]
        });
    }
    taps
}

/// Row taps: weights from the unclamped source position, rows clipped to the image
/// (OpenCV's `yofs`/`ibeta` and `clip` in `resizeGeneric_Invoker`).
fn row_taps(src: usize, dst: usize) -> (Vec<[usize; 2]>, Vec<[i32; 2]>) {
    let scale = 1.0 / (dst as f64 / src as f64);
    let clip = |s: i64| s.clamp(0, src as i64 - 1) as usize;
    (0..dst)
        .map(|d| {
            let f = ((d as f64 + 0.5) * scale - 0.5) as f32;
            let s = f.floor() as i64;
            let frac = f - s as f32;
            ([clip(s), clip(s + 1)], [coef(1.0 - frac), coef(frac)])
        })
        .unzip()
}

/// `cv2.resize(src, (dst_w, dst_h), interpolation=cv2.INTER_LINEAR)` of an interleaved
/// uint8 image (`h` rows of `w` pixels of `channels` values), bit for bit as OpenCV 5.0
/// computes it (module docs). The same size is a copy.
pub fn resize_linear_u8(
    src: &[u8],
    h: usize,
    w: usize,
    channels: usize,
    dst_h: usize,
    dst_w: usize,
) -> Vec<u8> {
    assert_eq!(src.len(), h * w * channels, "image buffer size");
    assert!(h > 0 && w > 0 && dst_h > 0 && dst_w > 0, "empty resize");
    if (h, w) == (dst_h, dst_w) {
        return src.to_vec();
    }
    let cols = column_taps(w, dst_w);
    let (rows, betas) = row_taps(h, dst_h);
    let row_len = dst_w * channels;
    // Horizontal pass of one source row into int32 (value x 2048).
    let horizontal = |y: usize, out: &mut Vec<i32>| {
        out.clear();
        let line = &src[y * w * channels..(y + 1) * w * channels];
        for (&s, &[a0, a1]) in cols.ofs.iter().zip(&cols.weights) {
            let next = (s + 1).min(w - 1);
            for c in 0..channels {
                let p0 = i32::from(line[s * channels + c]);
                let p1 = i32::from(line[next * channels + c]);
                out.push(p0 * a0 + p1 * a1);
            }
        }
    };
    let sat16 = |v: i32| v.clamp(i32::from(i16::MIN), i32::from(i16::MAX));
    let mut dst = Vec::with_capacity(dst_h * row_len);
    let (mut r0, mut r1) = (Vec::with_capacity(row_len), Vec::with_capacity(row_len));
    let mut cached: [Option<usize>; 2] = [None, None];
    for ([y0, y1], [b0, b1]) in rows.into_iter().zip(betas) {
        if cached[0] != Some(y0) {
            if cached[1] == Some(y0) {
                std::mem::swap(&mut r0, &mut r1);
                cached.swap(0, 1);
            } else {
                horizontal(y0, &mut r0);
                cached[0] = Some(y0);
            }
        }
        if cached[1] != Some(y1) {
            horizontal(y1, &mut r1);
            cached[1] = Some(y1);
        }
        dst.extend(r0.iter().zip(&r1).map(|(&s0, &s1)| {
            let t0 = (sat16(s0 >> 4) * b0) >> 16;
            let t1 = (sat16(s1 >> 4) * b1) >> 16;
            ((sat16(t0 + t1) + 2) >> 2).clamp(0, 255) as u8
        }));
    }
    dst
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_ratio_sizes_follow_mmcv() {
        // Cityscapes at (2048, 1024): unchanged; a portrait image fits its long side.
        assert_eq!(keep_ratio_size(1024, 2048, [2048, 1024]), (1024, 2048));
        assert_eq!(keep_ratio_size(2048, 1024, [2048, 1024]), (2048, 1024));
        // min(128 / 130, 64 / 97) = 0.6598: int(97 f + 0.5) = 64, int(130 f + 0.5) = 86.
        assert_eq!(keep_ratio_size(97, 130, [128, 64]), (64, 86));
        // ADE20K-like (2048, 512) on 375 x 500: the short side to 512.
        assert_eq!(keep_ratio_size(375, 500, [2048, 512]), (512, 683));
        // TTA 0.75 on 97 x 130: (73, 98) first, then min(98/130, 73/97) = 0.7526.
        assert_eq!(ratio_size(97, 130, 0.75), (73, 98));
        assert_eq!(ratio_size(1024, 2048, 0.5), (512, 1024));
        assert_eq!(scale_size(3, 5, 0.01), (1, 1));
    }

    #[test]
    fn constant_images_stay_constant_and_same_size_copies() {
        let img = vec![77u8; 5 * 7 * 3];
        for (h, w) in [(11, 3), (2, 2), (5, 14), (1, 1)] {
            assert!(resize_linear_u8(&img, 5, 7, 3, h, w)
                .iter()
                .all(|&v| v == 77));
        }
        let ramp: Vec<u8> = (0..5 * 7 * 3).map(|i| i as u8).collect();
        assert_eq!(resize_linear_u8(&ramp, 5, 7, 3, 5, 7), ramp);
    }
}
