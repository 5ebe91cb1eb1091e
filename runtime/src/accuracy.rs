//! Accuracy mode: the evaluation protocol (DANet's `MultiEvalModule` or
//! mmsegmentation's, implemented once in `segtool_spec::protocol`) on any [`Engine`], on
//! ndarray, without tch. The training crate's evaluation runs the same implementation on
//! tch tensors, so the two agree step for step: for every scale the normalised batch is
//! resized (bilinear, `align_corners=true`), run whole or in `crop` x `crop` windows
//! placed as the protocol says (padded with zero pixels, i.e. `-mean/std`), flips and
//! windows combined (mmseg: logits averaged; DANet: `exp` scores averaged), and the
//! scores resized back and summed over scales.

use image::RgbImage;
use ndarray::{concatenate, s, Array2, Array4, ArrayView2, ArrayView4, Axis};
use segtool_spec::protocol::{self, Stitch};
use segtool_spec::ModelSpec;

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::postprocess::{argmax, resize_bilinear};
use crate::preprocess::{normalise_batch, zero_pixel};

pub use segtool_spec::protocol::{
    window_starts, windows, Protocol, ProtocolOptions, Tiling, Window, MULTI_SCALES,
};

/// The protocol's options: `segtool_spec`'s [`ProtocolOptions`] builder, the one
/// training's evaluation takes too.
pub type AccuracyOptions = ProtocolOptions;

/// [`ProtocolOptions::validate`] as this crate's error.
fn validate(opts: &ProtocolOptions) -> Result<()> {
    opts.validate().map_err(|why| RuntimeError::InputShape {
        expected: "a valid evaluation protocol".into(),
        got: why,
    })
}

/// Fused scores `(N, K, H, W)` of normalised `images` `(N, 3, H, W)` under `opts`: summed
/// logits (mmseg) or summed `exp` scores (DANet).
pub fn predict(
    engine: &mut dyn Engine,
    images: ArrayView4<f32>,
    spec: &ModelSpec,
    opts: &AccuracyOptions,
) -> Result<Array4<f32>> {
    validate(opts)?;
    let mut backend = EngineStitch {
        engine,
        zero: zero_pixel(spec),
    };
    protocol::predict(&mut backend, &images.to_owned(), opts)
}

/// Masks `(H, W)` and fused scores `(N, K, H, W)` of same-size images.
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

/// `x` `(N, 3, h, w)` in the top-left corner of an `h` x `w` canvas of zero pixels
/// (`-mean/std` after normalisation); `x` itself when it already has that size.
pub fn pad_to(x: ArrayView4<f32>, h: usize, w: usize, spec: &ModelSpec) -> Array4<f32> {
    pad_with(x, h, w, zero_pixel(spec))
}

fn pad_with(x: ArrayView4<f32>, h: usize, w: usize, zero: [f32; 3]) -> Array4<f32> {
    let (n, c, xh, xw) = x.dim();
    if (xh, xw) == (h, w) {
        return x.to_owned();
    }
    let mut canvas = Array4::from_shape_fn((n, c, h, w), |(_, ch, _, _)| zero[ch]);
    canvas.slice_mut(s![.., .., ..xh, ..xw]).assign(&x);
    canvas
}

/// The protocol's primitives on ndarray, running `engine`.
struct EngineStitch<'a> {
    engine: &'a mut dyn Engine,
    zero: [f32; 3],
}

fn region(
    win: Window,
) -> ndarray::SliceInfo<[ndarray::SliceInfoElem; 4], ndarray::Ix4, ndarray::Ix4> {
    s![.., .., win.y..win.y + win.h, win.x..win.x + win.w]
}

impl Stitch for EngineStitch<'_> {
    type Map = Array4<f32>;
    type Error = RuntimeError;

    fn dims(&self, x: &Array4<f32>) -> [usize; 4] {
        let (n, c, h, w) = x.dim();
        [n, c, h, w]
    }

    fn run(&mut self, images: &Array4<f32>) -> Result<Array4<f32>> {
        crate::engine::run_logits(&mut *self.engine, images.view())
    }

    fn resize(&mut self, x: &Array4<f32>, h: usize, w: usize) -> Array4<f32> {
        resize_bilinear(x.view(), h, w, true)
    }

    fn crop_padded(&mut self, x: &Array4<f32>, win: Window, h: usize, w: usize) -> Array4<f32> {
        pad_with(x.slice(region(win)), h, w, self.zero)
    }

    fn crop(&mut self, x: &Array4<f32>, win: Window) -> Array4<f32> {
        x.slice(region(win)).to_owned()
    }

    fn cat(&mut self, parts: &[&Array4<f32>]) -> Array4<f32> {
        let views: Vec<_> = parts.iter().map(|p| p.view()).collect();
        concatenate(Axis(0), &views).expect("same sizes")
    }

    fn narrow_batch(&mut self, x: &Array4<f32>, start: usize, len: usize) -> Array4<f32> {
        x.slice(s![start..start + len, .., .., ..]).to_owned()
    }

    fn flip_w(&mut self, x: &Array4<f32>) -> Array4<f32> {
        // A copy in standard layout: `to_owned` of a reversed view may keep its strides.
        x.slice(s![.., .., .., ..;-1])
            .as_standard_layout()
            .into_owned()
    }

    fn add(&mut self, a: Array4<f32>, b: &Array4<f32>) -> Array4<f32> {
        a + b
    }

    fn mul(&mut self, a: Array4<f32>, by: f32) -> Array4<f32> {
        a * by
    }

    fn exp(&mut self, a: Array4<f32>) -> Array4<f32> {
        a.mapv_into(f32::exp)
    }

    fn zeros(&mut self, _like: &Array4<f32>, [n, k, h, w]: [usize; 4]) -> Array4<f32> {
        Array4::zeros((n, k, h, w))
    }

    fn add_region(&mut self, sum: &mut Array4<f32>, part: &Array4<f32>, y: usize, x: usize) {
        let (_, _, h, w) = part.dim();
        let mut target = sum.slice_mut(region(Window { y, x, h, w }));
        target += part;
    }

    fn divide(&mut self, mut sum: Array4<f32>, counts: &[f32]) -> Array4<f32> {
        let (_, _, h, w) = sum.dim();
        let counts = ArrayView2::from_shape((h, w), counts).expect("one count per pixel");
        for mut img in sum.outer_iter_mut() {
            for mut plane in img.outer_iter_mut() {
                plane /= &counts;
            }
        }
        sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_contract::{EngineInput, EngineOutput};
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
        fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
            let EngineInput::NchwF32(input) = input else {
                unreachable!("a plain probe")
            };
            self.runs.push(input.shape().to_vec());
            let (n, _, h, w) = input.dim();
            Ok(EngineOutput::Logits(Array4::from_shape_fn(
                (n, 2, h, w),
                |(i, k, y, x)| input[[i, k, y, x]] + if k == 1 { (y * w + x) as f32 } else { 0.0 },
            )))
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
