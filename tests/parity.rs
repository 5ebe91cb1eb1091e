#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! The exported ONNX model, run by ONNX Runtime and by tract, against the tch model it was
//! exported from: logits within 1e-4 (absolute), random weights, BN statistics and
//! non-zero attention gammas, at a size that is not a multiple of the output stride.

mod common;

use common::*;
use segtool_runtime::{EngineKind, Segmenter};

#[test]
fn ort_and_tract_match_tch_logits() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, model, ckpt) = tiny_checkpoint(dir.path(), 11);
    let onnx = dir.path().join("m.onnx");
    segtool_export::export_onnx(&ckpt, &onnx, &Default::default()).unwrap();

    // Random RGB images; the engines normalise them, tch gets the same normalisation.
    let images: Vec<image::RgbImage> = (0..2u32)
        .map(|k| {
            image::RgbImage::from_fn(90, 70, |x, y| {
                image::Rgb([(x * 3 + k * 50) as u8, (y * 5) as u8, ((x * y) % 251) as u8])
            })
        })
        .collect();
    let input = segtool_train::data::images_to_tensor(
        &images.iter().collect::<Vec<_>>(),
        &spec,
        tch::Device::Cpu,
    );
    let reference = tch::no_grad(|| model.forward_all(&input, false).fused);
    let reference = Vec::<f32>::try_from(&reference.contiguous().view(-1)).unwrap();

    for backend in [EngineKind::Ort, EngineKind::Tract] {
        let mut seg = Segmenter::builder(&onnx)
            .engine(backend)
            .open()
            .unwrap()
            .with_logits(true);
        let results = seg.segment_batch(&images).unwrap();
        let ours: Vec<f32> = results
            .iter()
            .flat_map(|r| r.logits.as_ref().unwrap().iter().copied())
            .collect();
        assert_eq!(ours.len(), reference.len());
        let diff = ours
            .iter()
            .zip(&reference)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        eprintln!("{}: max |logit - tch| = {diff:.3e}", seg.engine().name());
        assert!(
            diff < 1e-4,
            "{}: max abs logit diff {diff}",
            seg.engine().name()
        );
    }
}
