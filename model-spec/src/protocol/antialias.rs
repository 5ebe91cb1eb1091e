//! The antialiased resizes of uint8 images that torchvision and Pillow do, bit for bit:
//! Hugging Face image processors resize this way (transformers 5's default backend is
//! torchvision's `F.resize(..., antialias=True)` on uint8 tensors; its Pillow backend is
//! `Image.resize(..., resample)`), so a model trained behind one sees other pixels through
//! OpenCV's `INTER_LINEAR` ([`super::resize::resize_linear_u8`]), most of all when
//! shrinking, where OpenCV reads only two source pixels per output.
//!
//! Both are Pillow's separable resampler: a kernel ([`Kernel`]: triangle, Keys cubic with
//! `a = -0.5`, or Lanczos-3) whose support grows with the downscale factor, weights
//! normalised per output pixel, then fixed point. Per axis of `n` source and `m`
//! destination pixels (all float64): `scale = n / m`, `support = kernel support * max(scale,
//! 1)`; destination `i` is centred at `c = scale * (i + 0.5)` and reads sources `xmin =
//! max(trunc(c - support + 0.5), 0)` up to `min(trunc(c + support + 0.5), n)`, weighted
//! `k((j - c + 0.5) / max(scale, 1))` and divided by their sum. The weights become
//! integers (rounded half away from zero, `w * 2^p`) and an output is `clamp((2^(p-1) +
//! sum w_q * v) >> p, 0, 255)`. Pillow fixes `p = 22`; torch's uint8 kernel (AVX2, AVX-512
//! and NEON) takes the largest `p < 22` whose biggest weight of the axis stays below `2^15`
//! (int16 lanes). The horizontal pass comes first, rounded to uint8, then the vertical
//! one; an axis whose size does not change is not resampled. Checked against torchvision
//! 0.28 and Pillow by the Hugging Face tests (tests/reference/segformer_ref.py and
//! hf_processors_ref.py).
//!
//! Nearest neighbour ([`resize_nearest_u8`]) differs between the two as well: torch reads
//! source `floor(i * n / m)` (the scale in float32), Pillow `floor((i + 0.5) * n / m)`.

/// The interpolation kernel of a resize (the `resample` of an image processor).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kernel {
    /// Triangle, support 1 (`BILINEAR`).
    #[default]
    Bilinear,
    /// Keys cubic with `a = -0.5`, support 2 (`BICUBIC`; torch's antialiased bicubic uses
    /// Pillow's `a`, not the `-0.75` of its plain bicubic).
    Bicubic,
    /// `sinc(x) sinc(x / 3)`, support 3 (`LANCZOS`).
    Lanczos,
}

impl Kernel {
    fn support(self) -> f64 {
        match self {
            Kernel::Bilinear => 1.0,
            Kernel::Bicubic => 2.0,
            Kernel::Lanczos => 3.0,
        }
    }

    fn weight(self, x: f64) -> f64 {
        let x = x.abs();
        match self {
            Kernel::Bilinear => (1.0 - x).max(0.0),
            Kernel::Bicubic => {
                const A: f64 = -0.5;
                if x < 1.0 {
                    ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
                } else if x < 2.0 {
                    (((x - 5.0) * x + 8.0) * x - 4.0) * A
                } else {
                    0.0
                }
            }
            Kernel::Lanczos => {
                if x < 3.0 {
                    sinc(x) * sinc(x / 3.0)
                } else {
                    0.0
                }
            }
        }
    }
}

fn sinc(x: f64) -> f64 {
    if x == 0.0 {
        1.0
    } else {
        let px = x * std::f64::consts::PI;
        px.sin() / px
    }
}

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

/// Per destination of an axis of `n` sources and `m` destinations: the first source and
/// the normalised float weights (module docs).
fn float_taps(n: usize, m: usize, kernel: Kernel) -> (Vec<usize>, Vec<Vec<f64>>) {
    let scale = n as f64 / m as f64;
    let filter_scale = scale.max(1.0);
    let support = kernel.support() * filter_scale;
    let inv = 1.0 / filter_scale;
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
            .map(|j| kernel.weight(((j + xmin) as f64 - center + 0.5) * inv))
            .collect();
        let total: f64 = w.iter().sum();
        if total != 0.0 {
            w.iter_mut().for_each(|v| *v /= total);
        }
        start.push(xmin);
        float_weights.push(w);
    }
    (start, float_weights)
}

fn axis(n: usize, m: usize, kind: Antialias, kernel: Kernel) -> Axis {
    let (start, float_weights) = float_taps(n, m, kernel);
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
        .map(|w| w.into_iter().map(|v| (v * one).round() as i64).collect())
        .collect();
    Axis {
        start,
        weights,
        precision,
    }
}

/// A fixed-point sum of `precision` fraction bits, rounded and saturated to uint8.
fn round_u8(acc: i64, precision: u32) -> u8 {
    ((acc + (1 << (precision - 1))) >> precision).clamp(0, 255) as u8
}

/// An interleaved uint8 image (`h` rows of `w` pixels of `channels` values) resized to
/// `dst_h` x `dst_w` with the bilinear kernel as `kind` does it (module docs). The same
/// size is a copy.
pub fn resize_antialias_u8(
    src: &[u8],
    h: usize,
    w: usize,
    channels: usize,
    dst_h: usize,
    dst_w: usize,
    kind: Antialias,
) -> Vec<u8> {
    resize_kernel_u8(
        src,
        (h, w),
        channels,
        (dst_h, dst_w),
        kind,
        Kernel::Bilinear,
    )
}

/// [`resize_antialias_u8`] with any [`Kernel`]: `(h, w)` to `(dst_h, dst_w)`.
pub fn resize_kernel_u8(
    src: &[u8],
    (h, w): (usize, usize),
    channels: usize,
    (dst_h, dst_w): (usize, usize),
    kind: Antialias,
    kernel: Kernel,
) -> Vec<u8> {
    assert_eq!(src.len(), h * w * channels, "image buffer size");
    assert!(h > 0 && w > 0 && dst_h > 0 && dst_w > 0, "empty resize");
    let c = channels;
    let horizontal = if dst_w != w {
        let ax = axis(w, dst_w, kind, kernel);
        let mut out = Vec::with_capacity(h * dst_w * c);
        for y in 0..h {
            let row = &src[y * w * c..(y + 1) * w * c];
            for (&x0, wts) in ax.start.iter().zip(&ax.weights) {
                let taps = &row[x0 * c..(x0 + wts.len()) * c];
                for ch in 0..c {
                    let mut acc = 0i64;
                    for (px, &wt) in taps.chunks_exact(c).zip(wts) {
                        acc += i64::from(px[ch]) * wt;
                    }
                    out.push(round_u8(acc, ax.precision));
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
    let ax = axis(h, dst_h, kind, kernel);
    let line = dst_w * c;
    let mut out = Vec::with_capacity(dst_h * line);
    // Row by row, in i32 (the same integer sums as the horizontal pass, in an order the compiler
    // vectorises). They fit: |sum| <= 255 * sum |w|, and sum |w| stays under 2^23 (weights
    // sum to 2^precision, precision <= 22, and no kernel's |k| sums to twice its sum).
    let mut acc = vec![0i32; line];
    for (y0, wts) in ax.start.iter().zip(&ax.weights) {
        acc.fill(0);
        for (j, &wt) in wts.iter().enumerate() {
            let wt = wt as i32;
            let row = &horizontal[(y0 + j) * line..(y0 + j + 1) * line];
            for (a, &v) in acc.iter_mut().zip(row) {
                *a += i32::from(v) * wt;
            }
        }
        out.extend(acc.iter().map(|&a| round_u8(i64::from(a), ax.precision)));
    }
    out
}

/// Nearest-neighbour resize of an interleaved uint8 image as `kind` does it: torch's
/// `interpolate(mode="nearest")` reads source `min(floor(i * s), n - 1)` with `s = n / m`
/// in float32 (exactly `i / 2` for a doubling), Pillow reads `floor((i + 0.5) * n / m)`.
pub fn resize_nearest_u8(
    src: &[u8],
    (h, w): (usize, usize),
    channels: usize,
    (dst_h, dst_w): (usize, usize),
    kind: Antialias,
) -> Vec<u8> {
    assert_eq!(src.len(), h * w * channels, "image buffer size");
    let index = |i: usize, n: usize, m: usize| -> usize {
        let j = match kind {
            _ if n == m => i,
            Antialias::Torchvision if m == 2 * n => i >> 1,
            Antialias::Torchvision => ((i as f32) * (n as f32 / m as f32)).floor() as usize,
            Antialias::Pillow => ((i as f64 + 0.5) * (n as f64 / m as f64)).floor() as usize,
        };
        j.min(n - 1)
    };
    let cols: Vec<usize> = (0..dst_w).map(|x| index(x, w, dst_w)).collect();
    let mut out = Vec::with_capacity(dst_h * dst_w * channels);
    for y in 0..dst_h {
        let row = index(y, h, dst_h) * w * channels;
        for &x in &cols {
            out.extend_from_slice(&src[row + x * channels..row + (x + 1) * channels]);
        }
    }
    out
}

/// Planes of float32 values (`planes` x `h` x `w`, row-major) resized to `(dst_h, dst_w)`
/// with the antialiased bilinear filter, as torch's `interpolate(..., mode="bilinear",
/// antialias=True)` on float tensors (torchvision's `F.resize` default): the same taps as
/// the uint8 resize, in floating point, the horizontal pass first.
pub fn resize_antialias_f32(
    src: &[f32],
    planes: usize,
    (h, w): (usize, usize),
    (dst_h, dst_w): (usize, usize),
) -> Vec<f32> {
    assert_eq!(src.len(), planes * h * w, "plane buffer size");
    let (xs, xw) = float_taps(w, dst_w, Kernel::Bilinear);
    let (ys, yw) = float_taps(h, dst_h, Kernel::Bilinear);
    let mut out = Vec::with_capacity(planes * dst_h * dst_w);
    let mut rows = vec![0f64; h * dst_w];
    for p in 0..planes {
        let plane = &src[p * h * w..(p + 1) * h * w];
        for y in 0..h {
            for (x, (x0, wts)) in xs.iter().zip(&xw).enumerate() {
                rows[y * dst_w + x] = wts
                    .iter()
                    .enumerate()
                    .map(|(j, wt)| wt * f64::from(plane[y * w + x0 + j]))
                    .sum();
            }
        }
        for (y0, wts) in ys.iter().zip(&yw) {
            for x in 0..dst_w {
                let v: f64 = wts
                    .iter()
                    .enumerate()
                    .map(|(j, wt)| wt * rows[(y0 + j) * dst_w + x])
                    .sum();
                out.push(v as f32);
            }
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
        let ax = axis(4, 2, Antialias::Torchvision, Kernel::Bilinear);
        assert_eq!(ax.start, [0, 1]);
        // Upscaling's largest weight is 1 (a source hit exactly is not, but close): torch
        // then keeps 14 bits, Pillow 22.
        assert_eq!(
            axis(3, 7, Antialias::Torchvision, Kernel::Bilinear).precision,
            14
        );
        assert_eq!(
            axis(3, 7, Antialias::Pillow, Kernel::Bilinear).precision,
            22
        );
    }

    #[test]
    fn kernels_keep_flat_images_flat_and_nearest_reads_as_documented() {
        let img = vec![90u8; 6 * 9 * 3];
        for kind in [Antialias::Torchvision, Antialias::Pillow] {
            for kernel in [Kernel::Bilinear, Kernel::Bicubic, Kernel::Lanczos] {
                let out = resize_kernel_u8(&img, (6, 9), 3, (13, 4), kind, kernel);
                assert!(
                    out.iter().all(|&v| v.abs_diff(90) <= 1),
                    "{kind:?} {kernel:?}"
                );
            }
        }
        let row: Vec<u8> = (0..5).collect();
        // 5 -> 3: torch reads floor(i * 5/3) = 0, 1, 3; Pillow floor((i + 0.5) * 5/3) = 0, 2, 4.
        let torch = resize_nearest_u8(&row, (1, 5), 1, (1, 3), Antialias::Torchvision);
        let pil = resize_nearest_u8(&row, (1, 5), 1, (1, 3), Antialias::Pillow);
        assert_eq!((torch, pil), (vec![0, 1, 3], vec![0, 2, 4]));
        assert_eq!(Kernel::Bicubic.weight(0.0), 1.0);
        assert_eq!(Kernel::Lanczos.weight(3.0), 0.0);
    }
}
