#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! Runtime accuracy mode (`segtool_runtime::pipeline::accuracy`: sliding windows, flip,
//! multi-scale on ndarray) through ONNX Runtime and tract, against the training crate's
//! evaluation protocol (`segtool_train::eval::sliding::predict`) on the tch model the
//! export came from; and `segtool export --triton` writing a Triton repository.

use crate::common;

use std::process::Command;

use common::*;
use segtool_runtime::pipeline::accuracy::{self, AccuracyOptions};
use segtool_runtime::expert::normalise_batch;
use segtool_runtime::{
    expert::{Engine, OrtEngine, TractEngine},
    OrtOptions,
};
use segtool_train::eval::{sliding, EvalOptions};

fn images() -> Vec<image::RgbImage> {
    (0..2u32)
        .map(|k| {
            image::RgbImage::from_fn(45, 37, |x, y| {
                image::Rgb([
                    (x * 5 + k * 60) as u8,
                    (y * 6 + x) as u8,
                    ((x * y + 31 * k) % 251) as u8,
                ])
            })
        })
        .collect()
}

fn argmax_agreement(a: &[f32], b: &[f32], classes: usize, plane: usize) -> f64 {
    let argmax = |v: &[f32], img: usize, px: usize| {
        (0..classes)
            .max_by(|&p, &q| {
                let (vp, vq) = (
                    v[(img * classes + p) * plane + px],
                    v[(img * classes + q) * plane + px],
                );
                vp.total_cmp(&vq).then(q.cmp(&p))
            })
            .unwrap()
    };
    let images = a.len() / (classes * plane);
    let mut agree = 0usize;
    for img in 0..images {
        for px in 0..plane {
            agree += (argmax(a, img, px) == argmax(b, img, px)) as usize;
        }
    }
    agree as f64 / (images * plane) as f64
}

#[test]
fn accuracy_mode_matches_training_protocol_in_ort_and_tract() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, model, ckpt) = tiny_checkpoint(dir.path(), 23);
    let onnx = dir.path().join("m.onnx");
    segtool_export::export_onnx(&ckpt, &onnx, &Default::default()).unwrap();
    let imgs = images();
    let tensor = segtool_train::data::images_to_tensor(
        &imgs.iter().collect::<Vec<_>>(),
        &spec,
        tch::Device::Cpu,
    );
    let input = normalise_batch(&imgs, &spec).unwrap();
    let scales = vec![0.75, 1.0, 1.25];
    // (train options, runtime options): sliding with windows smaller and larger than the
    // scaled image (padding), flip, three scales; and whole images at two scales.
    let protocols = [
        (
            EvalOptions::new()
                .sliding(32, 20)
                .flip(true)
                .scales(scales.clone())
                .batch_size(2),
            AccuracyOptions::new()
                .sliding(32, 20)
                .flip(true)
                .scales(scales.clone())
                .batch_size(2),
        ),
        (
            EvalOptions::new().flip(true).scales(vec![0.5, 1.5]),
            AccuracyOptions::new().flip(true).scales(vec![0.5, 1.5]),
        ),
    ];
    let classes = spec.num_classes();
    let plane = 37 * 45;
    for (train_opts, opts) in &protocols {
        let reference = sliding::predict(&model, &tensor, train_opts);
        assert_eq!(reference.size(), [2, classes as i64, 37, 45]);
        let reference = Vec::<f32>::try_from(&reference.contiguous().view(-1)).unwrap();
        let scale = reference.iter().fold(0f32, |m, v| m.max(v.abs()));
        let engines: Vec<Box<dyn Engine>> = vec![
            Box::new(OrtEngine::open(&onnx, &OrtOptions::new().with_intra_threads(1)).unwrap()),
            Box::new(TractEngine::open(&onnx).unwrap()),
        ];
        for mut engine in engines {
            let ours = accuracy::predict(engine.as_mut(), input.view(), &spec, opts).unwrap();
            assert_eq!(ours.dim(), (2, classes, 37, 45));
            let ours = ours
                .as_standard_layout()
                .iter()
                .copied()
                .collect::<Vec<_>>();
            let diff = ours
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let agreement = argmax_agreement(&ours, &reference, classes, plane);
            eprintln!(
                "{} {:?}: max |logit - tch| {diff:.3e} (max |logit| {scale:.2}), argmax \
                 agreement {:.4}%",
                engine.name(),
                opts.tiling,
                agreement * 100.0
            );
            assert!(diff < 1e-4, "{}: max abs logit diff {diff}", engine.name());
            assert!(
                agreement >= 0.999,
                "{}: agreement {agreement}",
                engine.name()
            );
        }
    }
}

#[test]
fn export_writes_triton_repository() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, ckpt) = tiny_checkpoint(dir.path(), 5);
    let onnx = dir.path().join("danet.onnx");
    let repo = dir.path().join("repo");
    let out = Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(["export", "--checkpoint"])
        .arg(&ckpt)
        .arg("--onnx")
        .arg(&onnx)
        .arg("--triton")
        .arg(&repo)
        .args(["--triton-max-batch", "4", "--triton-gpus", "0,1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(repo.join("danet/config.pbtxt")).unwrap();
    for want in [
        "name: \"danet\"",
        "platform: \"onnxruntime_onnx\"",
        "max_batch_size: 4",
        "name: \"image\"\n    data_type: TYPE_FP32\n    dims: [ 3, -1, -1 ]",
        "name: \"logits\"\n    data_type: TYPE_FP32\n    dims: [ 5, -1, -1 ]",
        "preferred_batch_size: [ 2, 4 ]",
        "kind: KIND_GPU\n    gpus: [ 0 ]",
        "kind: KIND_GPU\n    gpus: [ 1 ]",
    ] {
        assert!(config.contains(want), "{want:?} missing from\n{config}");
    }
    assert_eq!(
        std::fs::read(repo.join("danet/1/model.onnx")).unwrap(),
        std::fs::read(&onnx).unwrap()
    );
    // Static batch export: no batching; CPU instances without --triton-gpus.
    let out = Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(["export", "--checkpoint"])
        .arg(&ckpt)
        .arg("--onnx")
        .arg(dir.path().join("static.onnx"))
        .args(["--batch", "1", "--input-size", "64x96", "--triton"])
        .arg(&repo)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let config = std::fs::read_to_string(repo.join("static/config.pbtxt")).unwrap();
    assert!(config.contains("max_batch_size: 0"), "{config}");
    assert!(config.contains("dims: [ 1, 3, 64, 96 ]"), "{config}");
    assert!(config.contains("kind: KIND_CPU"), "{config}");
    assert!(!config.contains("dynamic_batching"), "{config}");
}
