//! The antialiased bilinear resize of uint8 images that torchvision and Pillow do, bit for
//! bit: Hugging Face image processors resize this way (transformers 5's default backend is
//! torchvision's `F.resize(..., antialias=True)` on uint8 tensors; its Pillow backend is
//! `Image.resize(..., BILINEAR)`), so a model trained behind one sees other pixels through
//! OpenCV's `INTER_LINEAR` ([`super::resize::resize_linear_u8`]), most of all when
//! shrinking, where OpenCV reads only two source pixels per output.
//!
//! Both are Pillow's separable resampler: a triangle filter whose support grows with the
//! downscale factor, weights normalised per output pixel, then fixed point. Per axis of `n`
//! source and `m` destination pixels (all float64): `scale = n / m`, `support = max(scale,
//! 1)`; destination `i` is centred at `c = scale * (i + 0.5)` and reads sources `xmin =
//! max(trunc(c - support + 0.5), 0)` up to `min(trunc(c + support + 0.5), n)`, weighted
//! `max(0, 1 - |(j - c + 0.5) / support|)` and divided by their sum. The weights become
//! integers `trunc(0.5 + w * 2^p)` and an output is `clamp((2^(p-1) + sum w_q * v) >> p,
//! 0, 255)`. Pillow fixes `p = 22`; torch's uint8 kernel (AVX2, AVX-512 and NEON) takes
//! the largest `p < 22` whose biggest weight of the axis stays below `2^15` (int16
//! lanes). The horizontal pass comes first, rounded to uint8, then the vertical one; an
//! axis whose size does not change is not resampled. Checked against torchvision 0.28 and
//! Pillow by tests/reference/segformer_ref.py through the Hugging Face test.

/// Whose fixed point to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Antialias {
    /// torchvision's uint8 kernel (`antialias=True`): precision from the largest weight.
    Torchvision,
    /// Pillow's `Image.resize(..., Image.BILINEAR)`: 22 bits.
    Pillow,
}

/// The taps of one axis: first source index and integer weights per destination.
struct Axis {
    start: Vec<usize>,
    weights: Vec<Vec<i64>>,
    precision: u32,
}

fn axis(n: usize, m: usize, kind: Antialias) -> Axis {
    let scale = n as f64 / m as f64;
    let support = scale.max(1.0);
    let inv = 1.0 / support;
    let max_taps = (support.ceil() as usize) * 2 + 1;
    let mut start = Vec::with_capacity(m);
    let mut float_weights: Vec<Vec<f64>> = Vec::with_capacity(m);
    for i in 0..m {
        let center = scale * (i as f64 + 0.5);
        let xmin = ((center - support + 0.5).trunc() as i64).max(0) as usize;
        let xmax = ((center + support + 0.5).trunc() as i64)
            .min(n as i64)
            .max(0) as usize;
        let size = xmax.saturating_sub(xmin).min(max_taps);
        let mut w: Vec<f64> = (0..size)
            .map(|j| (1.0 - (((j + xmin) as f64 - center + 0.5) * inv).abs()).max(0.0))
            .collect();
        let total: f64 = w.iter().sum();
        if total != 0.0 {
            w.iter_mut().for_each(|v| *v /= total);
        }
        start.push(xmin);
        float_weights.push(w);
    }
    let precision = match kind {
        Antialias::Pillow => 22,
        Antialias::Torchvision => {
            let w_max = float_weights
                .iter()
                .flatten()
                .fold(0.0f64, |m, &v| m.max(v));
            (1..22u32)
                .rev()
                .find(|&p| ((0.5 + w_max * f64::from(1u32 << p)) as i64) < (1 << 15))
                .unwrap_or(0)
        }
    };
    let one = f64::from(1u32 << precision);
    let weights = float_weights
        .into_iter()
        .map(|w| w.into_iter().map(|v| (0.5 + v * one) as i64).collect())
        .collect();
    Axis {
        start,
        weights,
        precision,
    }
}

fn tap(values: impl Iterator<Item = i64>, weights: &[i64], precision: u32) -> u8 {
    let acc: i64 = values.zip(weights).map(|(v, w)| v * w).sum::<i64>();
    ((acc + (1 << (precision - 1))) >> precision).clamp(0, 255) as u8
}

/// An interleaved uint8 image (`h` rows of `w` pixels of `channels` values) resized to
/// `dst_h` x `dst_w` as `kind` does it (module docs). The same size is a copy.
pub fn resize_antialias_u8(
    src: &[u8],
    h: usize,
    w: usize,
    channels: usize,
    dst_h: usize,
    dst_w: usize,
    kind: Antialias,
) -> Vec<u8> {
    assert_eq!(src.len(), h * w * channels, "image buffer size");
    assert!(h > 0 && w > 0 && dst_h > 0 && dst_w > 0, "empty resize");
    let c = channels;
    let horizontal = if dst_w != w {
        let ax = axis(w, dst_w, kind);
        let mut out = Vec::with_capacity(h * dst_w * c);
        for y in 0..h {
            let row = &src[y * w * c..(y + 1) * w * c];
            for (x0, wts) in ax.start.iter().zip(&ax.weights) {
                for ch in 0..c {
                    let values = (0..wts.len()).map(|j| i64::from(row[(x0 + j) * c + ch]));
                    out.push(tap(values, wts, ax.precision));
                }
            }
        }
        out
    } else {
        src.to_vec()
    };
    if dst_h == h {
        return horizontal;
    }
    let ax = axis(h, dst_h, kind);
    let line = dst_w * c;
    let mut out = Vec::with_capacity(dst_h * line);
    for (y0, wts) in ax.start.iter().zip(&ax.weights) {
        for k in 0..line {
            let values = (0..wts.len()).map(|j| i64::from(horizontal[(y0 + j) * line + k]));
            out.push(tap(values, wts, ax.precision));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_images_stay_constant_and_same_size_copies() {
        let img = vec![77u8; 5 * 7 * 3];
        for kind in [Antialias::Torchvision, Antialias::Pillow] {
            for (h, w) in [(11, 3), (2, 2), (5, 14), (1, 1), (5, 2)] {
                let out = resize_antialias_u8(&img, 5, 7, 3, h, w, kind);
                assert_eq!(out.len(), h * w * 3);
                assert!(out.iter().all(|&v| v == 77), "{kind:?} {h}x{w}");
            }
        }
        let ramp: Vec<u8> = (0..5 * 7 * 3).map(|i| i as u8).collect();
        assert_eq!(
            resize_antialias_u8(&ramp, 5, 7, 3, 5, 7, Antialias::Pillow),
            ramp
        );
    }

    #[test]
    fn halving_averages_pairs_and_precision_follows_the_largest_weight() {
        // 4 -> 2: support 2, each output reads 3-4 sources with triangle weights.
        let ax = axis(4, 2, Antialias::Torchvision);
        assert_eq!(ax.start, [0, 1]);
        // Upscaling's largest weight is 1 (a source hit exactly is not, but close): torch
        // then keeps 14 bits, Pillow 22.
        assert_eq!(axis(3, 7, Antialias::Torchvision).precision, 14);
        assert_eq!(axis(3, 7, Antialias::Pillow).precision, 22);
    }
}
