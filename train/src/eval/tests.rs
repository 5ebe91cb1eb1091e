use segtool_core::dataset::ShapesDataset;
use segtool_core::shapes::ShapesConfig;
use segtool_model_spec::{BackboneSpec, ModelSpec};
use tch::nn;

use super::sliding::{self, forward_flip, window_counts, window_starts, windows};
use super::*;
use crate::progress::Silent;

/// [`evaluate_with`] on the CPU, reporting and visiting nothing.
fn quiet(
    model: &DaNet,
    dataset: &dyn SegDataset,
    opts: &EvalOptions,
    indices: Option<&[usize]>,
) -> Result<EvalResult> {
    evaluate_with(
        model,
        dataset,
        opts,
        Device::Cpu,
        indices,
        &Silent,
        |_, _| Ok(()),
    )
}

/// A tiny randomly initialised DANet (5 classes) and a seeded input batch.
fn setup(h: i64, w: i64) -> (nn::VarStore, DaNet, Tensor) {
    tch::set_num_threads(1);
    tch::manual_seed(7);
    let classes = (0..5).map(|c| format!("c{c}")).collect();
    let spec = ModelSpec::new("tiny", BackboneSpec::tiny(), classes);
    let vs = nn::VarStore::new(Device::Cpu);
    let model = DaNet::new(&vs.root(), &spec);
    let x = Tensor::randn([1, 3, h, w], (Kind::Float, Device::Cpu));
    (vs, model, x)
}

fn max_diff(a: &Tensor, b: &Tensor) -> f64 {
    assert_eq!(a.size(), b.size());
    (a - b).abs().max().double_value(&[])
}

fn f(model: &DaNet, x: &Tensor) -> Tensor {
    predict_logits(model, x)
}

#[test]
fn windows_cover_awkward_sizes() {
    assert_eq!(window_starts(100, 32, 21), vec![0, 21, 42, 63, 68]);
    assert_eq!(window_starts(37, 32, 21), vec![0, 5]);
    assert_eq!(window_starts(20, 32, 21), vec![0]);
    for (h, w, crop, stride) in [
        (100, 37, 32, 21),
        (37, 100, 32, 21),
        (65, 64, 32, 32),
        (5, 90, 16, 1),
    ] {
        let all = windows(h, w, crop, stride);
        for win in &all {
            assert!(
                win.y + win.h <= h && win.x + win.w <= w,
                "{win:?} outside {h}x{w}"
            );
        }
        let counts = window_counts(&all, h as i64, w as i64, Device::Cpu);
        assert!(
            counts.min().double_value(&[]) >= 1.0,
            "{h}x{w} has an uncovered pixel"
        );
    }
}

#[test]
fn one_window_sliding_equals_whole() {
    let (_vs, model, x) = setup(40, 40);
    for flip in [false, true] {
        let whole = sliding::predict(&model, &x, &EvalOptions::new().flip(flip));
        let slid = sliding::predict(&model, &x, &EvalOptions::new().sliding(40, 24).flip(flip));
        assert!(max_diff(&whole, &slid) < 1e-5, "flip {flip}");
    }
}

fn softmax(t: &Tensor) -> Tensor {
    t.softmax(1, Kind::Float)
}

#[test]
fn flip_averages_mirrored_logits() {
    let (_vs, model, x) = setup(24, 40);
    let expected = (f(&model, &x) + f(&model, &x.flip([3])).flip([3])) / 2.0;
    let got = tch::no_grad(|| forward_flip(&model, &x, true));
    assert!(max_diff(&expected, &got) < 1e-5);
    // mmseg's TTA: the mean of the two passes' softmax (SegTTAModel.merge_preds).
    let expected = (softmax(&f(&model, &x)) + softmax(&f(&model, &x.flip([3])).flip([3]))) / 2.0;
    let got = sliding::predict(&model, &x, &EvalOptions::new().flip(true));
    assert!(max_diff(&expected, &got) < 1e-6);
}

#[test]
fn overlapping_windows_are_averaged() {
    let (_vs, model, x) = setup(24, 40);
    // Windows at x = 0 and x = 16; columns 16..24 are covered twice.
    let left = f(&model, &x.narrow(3, 0, 24));
    let right = f(&model, &x.narrow(3, 16, 24));
    let zeros = |w| Tensor::zeros([1, 5, 24, w], (Kind::Float, Device::Cpu));
    let sum = Tensor::cat(&[&left, &zeros(16)], 3) + Tensor::cat(&[&zeros(16), &right], 3);
    let counts = Tensor::ones([1, 1, 24, 40], (Kind::Float, Device::Cpu));
    let _ = counts.narrow(3, 16, 8).fill_(2.0);
    let expected = sum / counts;
    let opts = EvalOptions::new().sliding(24, 16).batch_size(2);
    assert!(max_diff(&expected, &sliding::predict(&model, &x, &opts)) < 1e-5);
}

#[test]
fn small_image_is_padded_with_zero_pixels_by_danet_only() {
    let (_vs, model, x) = setup(20, 28);
    let padded = sliding::pad_to(&x, 32, 32, &model.spec);
    // A zero pixel normalises to -mean/std.
    let expected = -model.spec.mean[2] as f64 / model.spec.std[2] as f64;
    assert!((padded.double_value(&[0, 2, 31, 31]) - expected).abs() < 1e-6);
    let expected = f(&model, &padded).narrow(2, 0, 20).narrow(3, 0, 28).exp();
    let opts = EvalOptions::new().protocol(Protocol::Danet).sliding(32, 16);
    assert!(max_diff(&expected, &sliding::predict(&model, &x, &opts)) < 1e-4);
    // mmseg's slide_inference cuts the window to the image and runs it unpadded.
    let got = sliding::predict(&model, &x, &EvalOptions::new().sliding(32, 16));
    assert!(max_diff(&f(&model, &x), &got) < 1e-5);
}

#[test]
fn mmseg_scales_average_softmax_resized_back() {
    let (_vs, model, x) = setup(24, 32);
    // From floats, mmseg's input resize is bilinear with half-pixel centres; the logits
    // go back with the model's align_corners (true for this spec).
    let half = x.upsample_bilinear2d([12, 16], false, None, None);
    let back = f(&model, &half).upsample_bilinear2d([24, 32], true, None, None);
    let expected = (softmax(&back) + softmax(&f(&model, &x))) / 2.0;
    let got = sliding::predict(&model, &x, &EvalOptions::new().scales(vec![0.5, 1.0]));
    assert!(max_diff(&expected, &got) < 1e-6);
}

#[test]
fn shard_confusions_merge_to_whole() {
    let (_vs, model, _) = setup(1, 1);
    let dataset = ShapesDataset {
        config: ShapesConfig {
            width: 32,
            height: 24,
            ..Default::default()
        },
        offset: 1 << 32,
        count: 4,
    };
    let opts = EvalOptions::new().sliding(16, 12).flip(true).batch_size(3);
    let mut seen = Vec::new();
    let whole = evaluate_with(
        &model,
        &dataset,
        &opts,
        Device::Cpu,
        None,
        &Silent,
        |i, labels| {
            assert_eq!(labels.size(), vec![24, 32]);
            assert_eq!(labels.kind(), Kind::Uint8);
            seen.push(i);
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, vec![0, 1, 2, 3]);
    let shard = |ix: &[usize]| quiet(&model, &dataset, &opts, Some(ix)).unwrap().confusion;
    let mut merged = shard(&[0, 2]);
    merged.merge(&shard(&[3, 1]));
    assert_eq!(merged, whole.confusion);
    assert_eq!(whole.images, 4);
    let total: u64 = whole.confusion.rows().iter().flatten().sum();
    assert!(total > 0);
    assert!(quiet(&model, &dataset, &opts, Some(&[4])).is_err());
}

#[test]
fn evaluate_is_whole_single_scale() {
    let (_vs, model, _) = setup(1, 1);
    let dataset = ShapesDataset {
        config: ShapesConfig {
            width: 24,
            height: 24,
            ..Default::default()
        },
        offset: 1 << 32,
        count: 3,
    };
    let mut logits = Vec::new();
    let old = evaluate(&model, &dataset, 2, Device::Cpu, &Silent, |i, t| {
        logits.push((i, t.size()))
    })
    .unwrap();
    assert_eq!(
        logits,
        (0..3).map(|i| (i, vec![5, 24, 24])).collect::<Vec<_>>()
    );
    let opts = EvalOptions::new();
    let new = quiet(&model, &dataset, &opts, None).unwrap();
    assert_eq!(old.confusion, new.confusion);
}

#[test]
fn options_are_validated() {
    assert!(EvalOptions::new().sliding(32, 40).validate().is_err());
    assert!(EvalOptions::new().scales(vec![]).validate().is_err());
    assert!(EvalOptions::new().scales(vec![0.0]).validate().is_err());
    assert!(EvalOptions::paper_multi_scale().validate().is_ok());
}
