//! Accuracy mode: the evaluation protocol (DANet's `MultiEvalModule` or
//! mmsegmentation's test pipeline, implemented once in `segtool_model_spec::protocol`) on any
//! [`Engine`], on ndarray, without tch. The training crate's evaluation runs the same
//! implementation on tch tensors, so the two agree step for step. DANet: for every scale
//! the normalised batch is resized (bilinear, `align_corners=true`), run whole or in
//! `crop` x `crop` windows (padded with zero pixels, i.e. `-mean/std`), flips and windows
//! combined as `exp` scores, and the scores resized back and summed over scales. mmseg
//! ([`segment`]): the uint8 images resized as `cv2.resize`, `whole` or unpadded
//! edge-aligned `slide` windows, logits resized back with the model's `align_corners`,
//! TTA as the mean softmax (see `segtool_model_spec::protocol::mmseg`).

use image::RgbImage;
use ndarray::{concatenate, s, Array4, ArrayView2, ArrayView4, Axis};
use segtool_model_spec::protocol::{self, Stitch};
use segtool_model_spec::ModelSpec;

use crate::card::CardSource;
use crate::card::{ChannelOrder, Dtype, Layout, OutputKind, ResolvedCard};
use crate::segmentation::class_map::{ClassMap, MAX_CLASSES};
use crate::engines::Engine;
use crate::error::{Result, RuntimeError};
use crate::segmentation::postprocess::{argmax, resize_bilinear, softmax};
use crate::normalise::{normalise_batch, zero_pixel};

pub use segtool_model_spec::protocol::{
    window_starts, windows, Protocol, ProtocolOptions, Tiling, Window, MULTI_SCALES,
};

/// The protocol's options: `segtool_model_spec`'s [`ProtocolOptions`] builder, the one
/// training's evaluation takes too.
pub type AccuracyOptions = ProtocolOptions;

/// Why accuracy mode cannot run the model `card` describes, if it cannot. The protocol
/// feeds the graph windows of float32 RGB normalised as the spec says, sized by its own
/// scales and crops, and combines the scores it gets back: the card must take float32
/// NCHW RGB input without steps of its own that the protocol would replace (a resize,
/// crop or padding; a fixed-size graph's own size aside, which the crop must then match)
/// and answer logits.
pub(crate) fn refusal(card: &ResolvedCard) -> Option<String> {
    let (i, o) = (&card.card.input, &card.card.output);
    let plain = i.dtype == Dtype::Float32
        && i.layout == Layout::Nchw
        && i.channels == ChannelOrder::Rgb
        && i.mean.len() == 3
        && o.kind == OutputKind::Logits;
    if !plain {
        let channels = match i.mean.len() {
            1 => "grey".to_string(),
            _ => format!("{:?}", i.channels).to_uppercase(),
        };
        return Some(format!(
            "it needs float32 normalised RGB input and logits output; the model's card says \
             {:?} {:?} {channels} input and {} output (a segtool export: export it without \
             --preprocess / --argmax)",
            i.dtype, i.layout, o.kind
        ));
    }
    let from_graph = card.source_of("input.size") == Some(&CardSource::Graph);
    let steps = [
        ("input.size", i.size.is_some() && !from_graph),
        ("input.shortest_edge", i.shortest_edge.is_some()),
        ("input.keep_ratio", i.keep_ratio.is_some()),
        ("input.min_short_side", i.min_short_side.is_some()),
        ("input.center_crop", i.center_crop.is_some()),
        ("input.size_divisor", i.size_divisor.is_some()),
        ("input.pad_size", i.pad_size.is_some()),
    ];
    steps.iter().find(|(_, set)| *set).map(|(field, _)| {
        format!(
            "the model's card prepares images by steps of its own ({field}), which the \
             evaluation protocol's resizes and windows would replace"
        )
    })
}

/// [`ProtocolOptions::validate`] as this crate's error.
fn validate(opts: &ProtocolOptions) -> Result<()> {
    opts.validate().map_err(|why| RuntimeError::InputShape {
        expected: "a valid evaluation protocol".into(),
        got: why,
    })
}

/// Fused scores `(N, K, H, W)` of normalised `images` `(N, 3, H, W)` under `opts`: summed
/// `exp` scores (DANet), logits or mean softmax (mmseg; from floats its input resizes are
/// float bilinear, not `cv2.resize`'s uint8 one: [`segment`] has the exact pipeline).
pub fn predict(
    engine: &mut dyn Engine,
    images: ArrayView4<f32>,
    spec: &ModelSpec,
    opts: &AccuracyOptions,
) -> Result<Array4<f32>> {
    validate(opts)?;
    let mut backend = EngineStitch::new(engine, spec);
    protocol::predict(&mut backend, &images.to_owned(), opts)
}

/// Fused scores `(N, K, H, W)` of same-size images under `opts`, from their pixels: the
/// protocol exactly (mmseg: `cv2.resize`'s uint8 resize and mmseg's normalisation).
pub fn predict_images(
    engine: &mut dyn Engine,
    imgs: &[RgbImage],
    spec: &ModelSpec,
    opts: &AccuracyOptions,
) -> Result<Array4<f32>> {
    validate(opts)?;
    let refs: Vec<&RgbImage> = imgs.iter().collect();
    let mut backend = EngineStitch::new(engine, spec);
    protocol::predict_images(&mut backend, &refs, opts)
}

/// Masks `(H, W)` and fused scores `(N, K, H, W)` of same-size images.
pub fn segment(
    engine: &mut dyn Engine,
    spec: &ModelSpec,
    imgs: &[RgbImage],
    opts: &AccuracyOptions,
) -> Result<(Vec<ClassMap>, Array4<f32>)> {
    let logits = predict_images(engine, imgs, spec, opts)?;
    if logits.shape()[1] > MAX_CLASSES {
        return Err(RuntimeError::OutputShape {
            expected: format!("at most {MAX_CLASSES} classes"),
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
    spec: &'a ModelSpec,
    zero: [f32; 3],
}

impl<'a> EngineStitch<'a> {
    fn new(engine: &'a mut dyn Engine, spec: &'a ModelSpec) -> Self {
        Self {
            engine,
            spec,
            zero: zero_pixel(spec),
        }
    }
}

fn region(
    win: Window,
) -> ndarray::SliceInfo<[ndarray::SliceInfoElem; 4], ndarray::Ix4, ndarray::Ix4> {
    s![.., .., win.y..win.y + win.h, win.x..win.x + win.w]
}

impl Stitch for EngineStitch<'_> {
    type Map = Array4<f32>;
    type Error = RuntimeError;

    fn spec(&self) -> &ModelSpec {
        self.spec
    }

    fn dims(&self, x: &Array4<f32>) -> [usize; 4] {
        let (n, c, h, w) = x.dim();
        [n, c, h, w]
    }

    fn normalise(&mut self, images: &[&RgbImage]) -> Result<Array4<f32>> {
        let owned: Vec<RgbImage> = images.iter().map(|&img| img.clone()).collect();
        normalise_batch(&owned, self.spec)
    }

    fn upload(&mut self, data: Vec<f32>, [n, c, h, w]: [usize; 4]) -> Array4<f32> {
        Array4::from_shape_vec((n, c, h, w), data).expect("one value per element")
    }

    fn run(&mut self, images: &Array4<f32>) -> Result<Array4<f32>> {
        crate::engines::run_logits(&mut *self.engine, images.view())
    }

    fn resize(&mut self, x: &Array4<f32>, h: usize, w: usize, align_corners: bool) -> Array4<f32> {
        resize_bilinear(x.view(), h, w, align_corners)
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

    fn div(&mut self, a: Array4<f32>, by: f32) -> Array4<f32> {
        a.mapv_into(|v| v / by)
    }

    fn exp(&mut self, a: Array4<f32>) -> Array4<f32> {
        a.mapv_into(f32::exp)
    }

    fn softmax(&mut self, a: Array4<f32>) -> Array4<f32> {
        softmax(a.view())
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
    use crate::engines::io_contract::{EngineInput, EngineOutput};
    use segtool_testkit::tiny_spec;

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
    fn sliding_averages_windows_and_runs_small_images_unpadded() {
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

        // Smaller than the crop: mmseg runs the image itself, unpadded.
        let mut probe = Probe { runs: Vec::new() };
        let out = predict(
            &mut probe,
            x.view(),
            &spec,
            &AccuracyOptions::new().sliding(8, 4),
        );
        assert_eq!(probe.runs, vec![vec![2, 3, 5, 7]]);
        let whole = predict(&mut probe, x.view(), &spec, &AccuracyOptions::new()).unwrap();
        assert_eq!(out.unwrap(), whole);
        // DANet pads it to the crop with zero pixels.
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new()
            .protocol(Protocol::Danet)
            .sliding(8, 4);
        predict(&mut probe, x.view(), &spec, &opts).unwrap();
        assert_eq!(probe.runs, vec![vec![2, 3, 8, 8]]);
        let pad = pad_to(x.view(), 8, 8, &spec);
        assert_eq!(pad[[0, 2, 7, 7]], zero_pixel(&spec)[2]);
        assert!(AccuracyOptions::new().sliding(2, 3).validate().is_err());
    }

    #[test]
    fn tta_averages_softmax_over_flips_and_scales() {
        let spec = tiny_spec(2);
        let x = Array4::from_shape_fn((1, 3, 4, 6), |(_, c, y, x)| (c * 7 + y * 3 + x) as f32);
        let mut probe = Probe { runs: Vec::new() };
        let flip = AccuracyOptions::new().flip(true);
        let out = predict(&mut probe, x.view(), &spec, &flip).unwrap();
        // Two passes (the mirror separately, as mmseg's TTA), mirrored back, softmax mean.
        assert_eq!(probe.runs, vec![vec![1, 3, 4, 6], vec![1, 3, 4, 6]]);
        let mut direct = Probe { runs: Vec::new() };
        let plain = predict(&mut direct, x.view(), &spec, &AccuracyOptions::new()).unwrap();
        let mirrored = x.slice(s![.., .., .., ..;-1]).to_owned();
        let back = predict(&mut direct, mirrored.view(), &spec, &AccuracyOptions::new())
            .unwrap()
            .slice(s![.., .., .., ..;-1])
            .to_owned();
        let want = (softmax(plain.view()) + softmax(back.view())) / 2.0;
        assert!(out.iter().zip(&want).all(|(a, b)| (a - b).abs() < 1e-6));
        // Two scales: one run each at mmcv's keep-ratio size; probabilities sum to 1.
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new().scales(vec![1.0, 2.0]);
        let out = predict(&mut probe, x.view(), &spec, &opts).unwrap();
        assert_eq!(probe.runs, vec![vec![1, 3, 4, 6], vec![1, 3, 8, 12]]);
        let total = &out.index_axis(Axis(1), 0) + &out.index_axis(Axis(1), 1);
        assert!(total.iter().all(|t| (t - 1.0).abs() < 1e-6));
    }

    #[test]
    fn images_follow_the_mmseg_test_pipeline() {
        // A 5x7 image, keep-ratio resized to fit (14, 10): factor min(14/7, 10/5) = 2.
        let spec = tiny_spec(2);
        let img = RgbImage::from_fn(7, 5, |x, y| image::Rgb([(x * 30) as u8, (y * 40) as u8, 9]));
        let mut probe = Probe { runs: Vec::new() };
        let opts = AccuracyOptions::new().resize(Some([14, 10]));
        let (masks, scores) = segment(&mut probe, &spec, &[img], &opts).unwrap();
        assert_eq!(probe.runs, vec![vec![1, 3, 10, 14]]);
        assert_eq!((masks[0].dim(), scores.dim()), ((5, 7), (1, 2, 5, 7)));
        assert!(AccuracyOptions::new()
            .protocol(Protocol::Danet)
            .resize(Some([14, 10]))
            .validate()
            .is_err());
    }
}
