//! Accuracy mode: the training crate's evaluation protocol (`segtool_train::eval::sliding`)
//! on any [`Engine`], on ndarray, without tch.
//!
//! Same protocol, step for step: for every scale the normalised batch is resized
//! (bilinear, `align_corners=true`), run whole or in `crop` x `crop` windows `stride`
//! apart (mmsegmentation's placement: the last window moved back to end at the edge;
//! windows of an image smaller than the crop padded bottom/right with zero pixels, i.e.
//! `-mean/std`), optionally averaged with the mirrored image, overlapping windows
//! averaged, and the logits resized back (`align_corners=true`) and summed over scales.
//! No softmax anywhere: raw logits are combined, as the reference does.

use image::RgbImage;
use ndarray::{concatenate, s, Array2, Array4, ArrayView4, Axis};
use segtool_core::ModelSpec;

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::postprocess::{argmax, resize_bilinear};
use crate::preprocess::{normalise_batch, zero_pixel};

pub use segtool_core::protocol::{window_starts, windows, Window, MULTI_SCALES};

/// How each (scaled) image goes through the engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccuracyMode {
    /// The whole image in one run.
    Whole,
    /// `crop` x `crop` windows, `stride` pixels apart (see [`windows`]).
    Sliding { crop: usize, stride: usize },
}

/// The protocol; chained setters from [`AccuracyOptions::new`] (whole image, one scale,
/// no flip) or the paper's presets. Mirrors `segtool_train::eval::EvalOptions`.
#[derive(Clone, Debug, PartialEq)]
pub struct AccuracyOptions {
    pub mode: AccuracyMode,
    /// Also run the mirrored image and average the logits.
    pub flip: bool,
    /// Scales whose (resized back) logits are summed.
    pub scales: Vec<f64>,
    /// Sliding mode: windows per engine run (flip doubles it). Whole mode: unused (the
    /// whole batch goes in one run).
    pub batch_size: usize,
}

impl Default for AccuracyOptions {
    fn default() -> Self {
        Self {
            mode: AccuracyMode::Whole,
            flip: false,
            scales: vec![1.0],
            batch_size: 1,
        }
    }
}

impl AccuracyOptions {
    pub fn new() -> Self {
        Self::default()
    }

    /// The published single-scale protocol: crop 768, stride 512, flip.
    pub fn paper_single_scale() -> Self {
        Self::new().sliding(768, 512).flip(true)
    }

    /// The published multi-scale protocol: crop 1024, stride 512, flip, [`MULTI_SCALES`].
    pub fn paper_multi_scale() -> Self {
        Self::new()
            .sliding(1024, 512)
            .flip(true)
            .scales(MULTI_SCALES.to_vec())
    }

    pub fn whole(mut self) -> Self {
        self.mode = AccuracyMode::Whole;
        self
    }

    pub fn sliding(mut self, crop: usize, stride: usize) -> Self {
        self.mode = AccuracyMode::Sliding { crop, stride };
        self
    }

    pub fn flip(mut self, flip: bool) -> Self {
        self.flip = flip;
        self
    }

    pub fn scales(mut self, scales: Vec<f64>) -> Self {
        self.scales = scales;
        self
    }

    pub fn batch_size(mut self, batch_size: usize) -> Self {
        self.batch_size = batch_size;
        self
    }

    /// Rejects options that would leave pixels unpredicted or divide by zero.
    pub fn validate(&self) -> Result<()> {
        let bad = |expected: &str, got: String| {
            Err(RuntimeError::InputShape {
                expected: expected.into(),
                got,
            })
        };
        if let AccuracyMode::Sliding { crop, stride } = self.mode {
            if crop < 1 || stride < 1 || stride > crop {
                return bad(
                    "sliding windows with 1 <= stride <= crop",
                    format!("crop {crop} stride {stride}"),
                );
            }
        }
        if self.scales.is_empty() || self.scales.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return bad("positive scales", format!("{:?}", self.scales));
        }
        if self.batch_size == 0 {
            return bad("a batch size of at least 1", "0".into());
        }
        Ok(())
    }
}

/// Fused logits `(N, K, H, W)` of normalised `images` `(N, 3, H, W)` under `opts`.
pub fn predict(
    engine: &mut dyn Engine,
    images: ArrayView4<f32>,
    spec: &ModelSpec,
    opts: &AccuracyOptions,
) -> Result<Array4<f32>> {
    opts.validate()?;
    let (_, _, h, w) = images.dim();
    let mut total: Option<Array4<f32>> = None;
    for &scale in &opts.scales {
        let (sh, sw) = (scaled(h, scale), scaled(w, scale));
        let resized = resize_bilinear(images, sh, sw, true);
        let logits = at_scale(engine, resized.view(), spec, opts)?;
        let logits = resize_bilinear(logits.view(), h, w, true);
        total = Some(match total {
            Some(t) => t + logits,
            None => logits,
        });
    }
    Ok(total.expect("at least one scale (validated)"))
}

/// Masks `(H, W)` and fused logits `(N, K, H, W)` of same-size images.
pub fn segment(
    engine: &mut dyn Engine,
    spec: &ModelSpec,
    imgs: &[RgbImage],
    opts: &AccuracyOptions,
) -> Result<(Vec<Array2<u8>>, Array4<f32>)> {
    let input = normalise_batch(imgs, spec)?;
    let logits = predict(engine, input.view(), spec, opts)?;
    if logits.shape()[1] > 256 {
        return Err(RuntimeError::OutputShape {
            expected: "at most 256 classes for a u8 mask".into(),
            got: format!("logits {:?}", logits.shape()),
        });
    }
    Ok((argmax(logits.view()), logits))
}

/// `len * scale`, rounded, at least one pixel.
fn scaled(len: usize, scale: f64) -> usize {
    ((len as f64 * scale).round() as usize).max(1)
}

/// Logits of one scaled batch at its own size.
pub fn at_scale(
    engine: &mut dyn Engine,
    images: ArrayView4<f32>,
    spec: &ModelSpec,
    opts: &AccuracyOptions,
) -> Result<Array4<f32>> {
    match opts.mode {
        AccuracyMode::Whole => forward_flip(engine, images, opts.flip),
        AccuracyMode::Sliding { crop, stride } => slide(
            engine,
            images,
            spec,
            crop,
            stride,
            opts.flip,
            opts.batch_size,
        ),
    }
}

/// The engine's logits; with `flip`, the mean of the logits of `x` and of its mirror
/// (mirrored back). Both halves share one run.
pub fn forward_flip(
    engine: &mut dyn Engine,
    x: ArrayView4<f32>,
    flip: bool,
) -> Result<Array4<f32>> {
    if !flip {
        return engine.run(x);
    }
    let n = x.dim().0;
    let both = concatenate(Axis(0), &[x, x.slice(s![.., .., .., ..;-1])]).expect("same shapes");
    let out = engine.run(both.view())?;
    let a = out.slice(s![..n, .., .., ..]);
    let b = out.slice(s![n.., .., .., ..;-1]);
    Ok((&a + &b) / 2.0)
}

/// Sliding-window logits of `images` `(N, 3, H, W)`: windows padded with zero pixels to
/// the full crop where the image is smaller, `batch` windows per run, overlapping
/// logits averaged.
pub fn slide(
    engine: &mut dyn Engine,
    images: ArrayView4<f32>,
    spec: &ModelSpec,
    crop: usize,
    stride: usize,
    flip: bool,
    batch: usize,
) -> Result<Array4<f32>> {
    let (n, _, h, w) = images.dim();
    let all = windows(h, w, crop, stride);
    let mut sum: Option<Array4<f32>> = None;
    let mut counts = Array2::<f32>::zeros((h, w));
    for win in &all {
        counts
            .slice_mut(s![win.y..win.y + win.h, win.x..win.x + win.w])
            .mapv_inplace(|c| c + 1.0);
    }
    for chunk in all.chunks(batch.max(1)) {
        let crops: Vec<Array4<f32>> = chunk
            .iter()
            .map(|win| {
                let part = images.slice(s![.., .., win.y..win.y + win.h, win.x..win.x + win.w]);
                pad_to(part, crop, crop, spec)
            })
            .collect();
        let views: Vec<_> = crops.iter().map(|c| c.view()).collect();
        let input = concatenate(Axis(0), &views).expect("same crop size");
        let logits = forward_flip(engine, input.view(), flip)?;
        let sum = sum.get_or_insert_with(|| Array4::zeros((n, logits.dim().1, h, w)));
        for (j, win) in chunk.iter().enumerate() {
            let out = logits.slice(s![j * n..(j + 1) * n, .., ..win.h, ..win.w]);
            let mut region = sum.slice_mut(s![.., .., win.y..win.y + win.h, win.x..win.x + win.w]);
            region += &out;
        }
    }
    let mut sum = sum.expect("at least one window");
    for mut img in sum.outer_iter_mut() {
        for mut plane in img.outer_iter_mut() {
            plane /= &counts;
        }
    }
    Ok(sum)
}

/// `x` `(N, 3, h, w)` in the top-left corner of an `h` x `w` canvas of zero pixels
/// (`-mean/std` after normalisation); `x` itself when it already has that size.
pub fn pad_to(x: ArrayView4<f32>, h: usize, w: usize, spec: &ModelSpec) -> Array4<f32> {
    let (n, c, xh, xw) = x.dim();
    if (xh, xw) == (h, w) {
        return x.to_owned();
    }
    let zero = zero_pixel(spec);
    let mut canvas = Array4::from_shape_fn((n, c, h, w), |(_, ch, _, _)| zero[ch]);
    canvas.slice_mut(s![.., .., ..xh, ..xw]).assign(&x);
    canvas
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::tiny_spec;

    /// Logits = input channels plus a position-dependent term that differs between
    /// windows, so averaging and placement are visible.
    struct Probe {
        runs: Vec<Vec<usize>>,
    }

    impl Engine for Probe {
        fn name(&self) -> &str {
            "probe"
        }
        fn provider(&self) -> &str {
            "cpu"
        }
        fn run(&mut self, input: ArrayView4<f32>) -> Result<Array4<f32>> {
            self.runs.push(input.shape().to_vec());
            let (n, _, h, w) = input.dim();
            Ok(Array4::from_shape_fn((n, 2, h, w), |(i, k, y, x)| {
                input[[i, k, y, x]] + if k == 1 { (y * w + x) as f32 } else { 0.0 }
            }))
        }
    }

    #[test]
    fn sliding_averages_windows_and_pads_small_images() {
        let spec = tiny_spec(2);
        let x = Array4::from_shape_fn((2, 3, 5, 7), |(n, c, y, x)| (n + c + y * x) as f32);
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new().sliding(4, 2).batch_size(3);
        let out = predict(&mut probe, x.view(), &spec, &opts).unwrap();
        // Channel 0 is the identity: averaging identical copies gives the input back.
        for (a, b) in out
            .index_axis(Axis(1), 0)
            .iter()
            .zip(x.index_axis(Axis(1), 0))
        {
            assert!((a - b).abs() < 1e-5);
        }
        // windows: ys [0, 1], xs [0, 2, 3] -> 6 windows, 3 per run, 2 images each.
        assert_eq!(probe.runs, vec![vec![6, 3, 4, 4], vec![6, 3, 4, 4]]);
        // Pixel (0, 0) is only in window (0, 0): position term 0.
        assert_eq!(out[[0, 1, 0, 0]], x[[0, 1, 0, 0]]);

        // Smaller than the crop: one padded window, flip doubles the batch.
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new().sliding(8, 4).flip(true);
        let out = predict(&mut probe, x.view(), &spec, &opts).unwrap();
        assert_eq!(probe.runs, vec![vec![4, 3, 8, 8]]);
        assert_eq!(out.dim(), (2, 2, 5, 7));
        let pad = pad_to(x.view(), 8, 8, &spec);
        assert_eq!(pad[[0, 2, 7, 7]], zero_pixel(&spec)[2]);
        assert!(AccuracyOptions::new().sliding(2, 3).validate().is_err());
    }

    #[test]
    fn flip_and_scales() {
        let spec = tiny_spec(2);
        let x = Array4::from_shape_fn((1, 3, 4, 6), |(_, c, y, x)| (c * 7 + y * 3 + x) as f32);
        let mut probe = Probe { runs: Vec::new() };
        let out = predict(
            &mut probe,
            x.view(),
            &spec,
            &AccuracyOptions::new().flip(true),
        )
        .unwrap();
        // The position term of the flipped copy is mirrored: the mean is symmetric.
        let want = |y: usize, x: usize| (y * 6 + x) as f32 / 2.0 + (y * 6 + 5 - x) as f32 / 2.0;
        assert_eq!(out[[0, 1, 2, 1]], x[[0, 1, 2, 1]] + want(2, 1));
        assert_eq!(out[[0, 0, 3, 5]], x[[0, 0, 3, 5]]);
        // Two scales: the sum of both predictions; channel 0 of a linear ramp survives a
        // round trip through align_corners=true resizes up to rounding.
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new().scales(vec![1.0, 2.0]);
        let out = predict(&mut probe, x.view(), &spec, &opts).unwrap();
        assert_eq!(probe.runs, vec![vec![1, 3, 4, 6], vec![1, 3, 8, 12]]);
        for (a, b) in out
            .index_axis(Axis(1), 0)
            .iter()
            .zip(x.index_axis(Axis(1), 0))
        {
            assert!((a - 2.0 * b).abs() < 1e-4, "{a} vs 2*{b}");
        }
    }
}
