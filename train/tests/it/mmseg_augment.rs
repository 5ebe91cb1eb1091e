//! segtool's mmseg train-pipeline pieces against mmsegmentation / mmcv / OpenCV on fixed
//! inputs (tests/reference/mmseg_augment_ref.py):
//! - `PhotoMetricDistortion` with the same draws: brightness and contrast bit for bit; the
//!   steps through HSV (saturation, hue) within 1 level per channel, because the installed
//!   OpenCV 5.0's 8-bit HSV-to-RGB is a fixed-point approximation of OpenCV 4's float
//!   conversion, which segtool implements (RGB-to-HSV is bit for bit in both); where both
//!   HSV steps run, that difference propagates (max 8 levels, mean < 0.5 asserted);
//! - `cv2.resize` INTER_NEAREST (labels) bit for bit, INTER_LINEAR within 1 level;
//! - `RandomResize(keep_ratio=True)`'s output size (mmcv's `rescale_size` at a given
//!   ratio) exactly.

use crate::common;

use std::collections::HashMap;

use common::python;
use image::{GrayImage, RgbImage};
use segtool_train::data::mmseg_resize_size;
use segtool_train::photometric::{apply_draw, PhotoMetricDraw};
use segtool_train::resize::{bilinear_rgb, nearest_gray};
use tch::Tensor;

fn reference() -> HashMap<String, Tensor> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("aug.safetensors");
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/reference/mmseg_augment_ref.py");
    let status = python()
        .arg(script)
        .arg(&out)
        .status()
        .expect("python runs");
    assert!(status.success(), "reference script failed");
    Tensor::read_safetensors(&out)
        .unwrap()
        .into_iter()
        .collect()
}

fn floats(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(&t.to_kind(tch::Kind::Double).flatten(0, -1)).unwrap()
}

fn rgb(t: &Tensor) -> RgbImage {
    let (h, w) = (t.size()[0] as u32, t.size()[1] as u32);
    let v: Vec<u8> = floats(t).iter().map(|&x| x as u8).collect();
    RgbImage::from_raw(w, h, v).unwrap()
}

fn gray(t: &Tensor) -> GrayImage {
    let (h, w) = (t.size()[0] as u32, t.size()[1] as u32);
    let v: Vec<u8> = floats(t).iter().map(|&x| x as u8).collect();
    GrayImage::from_raw(w, h, v).unwrap()
}

/// (max |a - b| over channels, fraction of values that differ, mean |a - b|).
fn diff(a: &[u8], b: &[u8]) -> (u8, f64, f64) {
    assert_eq!(a.len(), b.len());
    let max = a
        .iter()
        .zip(b)
        .map(|(x, y)| x.abs_diff(*y))
        .max()
        .unwrap_or(0);
    let n = a.iter().zip(b).filter(|(x, y)| x != y).count();
    let sum: f64 = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y) as f64).sum();
    (max, n as f64 / a.len() as f64, sum / a.len() as f64)
}

#[test]
fn mmseg_augmentation_matches_mmseg_and_opencv() {
    let r = reference();
    let input = rgb(&r["photo/input"]);
    for k in 0.. {
        let Some(draw) = r.get(&format!("photo/{k}/draw")) else {
            assert_eq!(k, 7, "photometric cases");
            break;
        };
        let d = floats(draw);
        let on = |i: usize| d[i] != 0.0;
        let draw = PhotoMetricDraw {
            brightness: on(0).then_some(d[1]),
            contrast_first: d[2] == 1.0,
            contrast: on(3).then_some(d[4]),
            saturation: on(5).then_some(d[6]),
            hue: on(7).then_some(d[8] as i32),
        };
        let mut ours = input.clone();
        apply_draw(&mut ours, &draw);
        let theirs = rgb(&r[&format!("photo/{k}/out")]);
        let (max, frac, mean) = diff(ours.as_raw(), theirs.as_raw());
        eprintln!(
            "photometric {k} {draw:?}: max diff {max}, {:.2}% of values differ, mean {mean:.3}",
            100.0 * frac
        );
        let hsv_steps = draw.saturation.is_some() as u8 + draw.hue.is_some() as u8;
        match hsv_steps {
            0 => assert_eq!(max, 0, "case {k}: brightness/contrast must be bit for bit"),
            // One pass through HSV: OpenCV 5's HSV-to-RGB rounding, 1 level at most.
            1 => assert!(max <= 1, "case {k}: {max} levels from mmseg"),
            // Two passes (saturation, then hue from the rounded result) and a contrast
            // gain after them carry a 1-level difference into hue's sector arithmetic:
            // a few levels at a few pixels, the mean stays below half a level.
            _ => assert!(
                max <= 8 && mean < 0.5,
                "case {k}: max {max}, mean {mean:.3}"
            ),
        }
    }

    let src = rgb(&r["resize/input"]);
    let mask = gray(&r["resize/mask"]);
    for k in 0.. {
        let Some(size) = r.get(&format!("resize/{k}/size")) else {
            assert_eq!(k, 6, "resize cases");
            break;
        };
        let s = floats(size);
        let (w, h) = (s[0] as u32, s[1] as u32);
        let ours = bilinear_rgb(&src, w, h);
        let (max, frac, _) = diff(
            ours.as_raw(),
            rgb(&r[&format!("resize/{k}/image")]).as_raw(),
        );
        eprintln!(
            "INTER_LINEAR {}x{} -> {w}x{h}: max diff {max}, {:.2}% differ",
            src.width(),
            src.height(),
            100.0 * frac
        );
        assert!(max <= 1, "bilinear to {w}x{h}: {max} levels from cv2");
        let labels = nearest_gray(&mask, w, h);
        assert_eq!(
            labels,
            gray(&r[&format!("resize/{k}/mask")]),
            "nearest to {w}x{h}"
        );
    }

    let rows = floats(&r["rescale"]);
    for row in rows.chunks(7) {
        let (w, h, long, short) = (row[0] as u32, row[1] as u32, row[2] as u32, row[3] as u32);
        let ours = mmseg_resize_size((w, h), (long, short), row[4]);
        assert_eq!(
            ours,
            (row[5] as u32, row[6] as u32),
            "{w}x{h} to ({long}, {short}) x {}",
            row[4]
        );
    }
}

/// mmseg's pipeline through [`Augment`]: a rectangular crop, padding after normalisation
/// (the image left unpadded, the mask padded with ignore, then 0 after normalising), and
/// `cat_max_ratio` redrawing windows dominated by one class.
#[test]
fn crop_padding_and_cat_max_ratio_follow_mmseg() {
    use rand::SeedableRng;
    use segtool_core::dataset::Sample;
    use segtool_model_spec::{BackboneSpec, ModelSpec};
    use segtool_train::data::{images_to_tensor_padded, Augment};

    // 30 x 20 image, crop (h 24, w 16): padded to 24 rows, cut to 16 columns.
    let sample = Sample {
        image: RgbImage::from_fn(30, 20, |x, y| image::Rgb([x as u8 * 8, y as u8 * 9, 77])),
        mask: GrayImage::from_fn(30, 20, |x, _| image::Luma([(x / 10) as u8])),
    };
    let aug = Augment {
        crop_hw: Some((24, 16)),
        pad_after_normalize: true,
        ..Augment::none()
    };
    let out = aug.apply(&sample, &mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
    assert_eq!(out.image.dimensions(), (16, 20), "the image stays unpadded");
    assert_eq!(
        out.mask.dimensions(),
        (16, 24),
        "the mask is padded to the crop"
    );
    assert!(out.mask.rows().skip(20).flatten().all(|p| p.0[0] == 255));
    let spec = ModelSpec::new("t", BackboneSpec::tiny(), vec!["a".into()]);
    let t = images_to_tensor_padded(
        &[&out.image],
        out.mask.dimensions(),
        &spec,
        tch::Device::Cpu,
    );
    assert_eq!(t.size(), [1, 3, 24, 16]);
    assert_eq!(
        t.narrow(2, 20, 4).abs().max().double_value(&[]),
        0.0,
        "0 after normalisation"
    );
    assert!(t.narrow(2, 0, 20).abs().max().double_value(&[]) > 0.5);

    // Class 0 covers 90% of the image: with cat_max_ratio 0.75 every chosen 10 x 10 window
    // holds two classes with the larger below 75% whenever one of the 11 draws does.
    let mask = GrayImage::from_fn(100, 10, |x, _| image::Luma([(x >= 90) as u8]));
    let sample = Sample {
        image: RgbImage::new(100, 10),
        mask,
    };
    let balanced = |m: &GrayImage| {
        let ones = m.pixels().filter(|p| p.0[0] == 1).count() as f64;
        let frac = ones / (m.width() * m.height()) as f64;
        frac > 0.25 && frac < 0.75
    };
    let (mut with, mut without) = (0, 0);
    for seed in 0..200 {
        let pick = |ratio: f64| {
            let aug = Augment {
                crop: Some(10),
                cat_max_ratio: ratio,
                ..Augment::none()
            };
            aug.apply(&sample, &mut rand_chacha::ChaCha8Rng::seed_from_u64(seed))
                .mask
        };
        with += balanced(&pick(0.75)) as usize;
        without += balanced(&pick(1.0)) as usize;
    }
    // One draw is balanced with probability 5/91; eleven draws with 1 - (86/91)^11 = 46%.
    assert!(without < 30, "without the check: {without} of 200 balanced");
    assert!(
        (70..=120).contains(&with),
        "with cat_max_ratio: {with} of 200 balanced"
    );
}
