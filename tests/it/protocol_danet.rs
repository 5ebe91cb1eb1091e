#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `--protocol danet` (DANet's `MultiEvalModule`) in the training crate's evaluation
//! (tch) and the runtime's accuracy mode (ONNX Runtime and tract on the export) against
//! a PyTorch transcription of `MultiEvalModule` (tests/reference/multi_eval_ref.py) on the
//! independent float64 reference DANet.
//!
//! Tolerance: 1e-4 relative per score. The scores are `exp` of (summed) logits, so their
//! relative error is the logits' absolute error: float32 against float64 on this model
//! measures ~1e-6 (the noise floor), a wrong window, pad value, flip rule or resize shows
//! as 1e-2 and more.

use crate::common;

use std::path::Path;

use common::*;
use segtool_runtime::pipeline::accuracy::{self, AccuracyOptions, Protocol};
use segtool_runtime::expert::normalise_batch;
use segtool_runtime::{
    expert::{Engine, OrtEngine, TractEngine},
    OrtOptions,
};
use segtool_train::eval::{sliding, EvalOptions};
use tch::{Kind, Tensor};

/// One case: `--base-size`, scales, flip. Crop 32, stride int(32 * 2/3) = 21.
struct Case {
    base_size: usize,
    scales: &'static [f64],
    flip: bool,
}

const CROP: usize = 32;

fn reference_scores(ckpt: &Path, input: &Path, dir: &Path, case: &Case) -> Tensor {
    let out = dir.join("scores.safetensors");
    let scales: Vec<String> = case.scales.iter().map(|s| s.to_string()).collect();
    let mut cmd = python();
    cmd.arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/multi_eval_ref.py"))
        .args([ckpt, input, &out])
        .args(["--crop", &CROP.to_string()])
        .args(["--base-size", &case.base_size.to_string()])
        .args(["--scales", &scales.join(",")]);
    if case.flip {
        cmd.arg("--flip");
    }
    let run = cmd.output().unwrap();
    assert!(
        run.status.success(),
        "multi_eval_ref.py failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut tensors = Tensor::read_safetensors(&out).unwrap();
    tensors.remove(0).1
}

/// Largest `|a - b| / |b|` and whether the argmax over classes agrees everywhere.
fn compare(ours: &Tensor, reference: &Tensor) -> (f64, bool) {
    assert_eq!(ours.size(), reference.size());
    let ours = ours.to_kind(Kind::Double);
    let rel = ((&ours - reference).abs() / reference.abs())
        .max()
        .double_value(&[]);
    let same = ours.argmax(1, false).eq_tensor(&reference.argmax(1, false));
    (rel, same.all().int64_value(&[]) == 1)
}

#[test]
fn danet_protocol_matches_a_transcription_of_multi_eval_module() {
    let dir = tempfile::tempdir().unwrap();
    let (spec, model, ckpt) = tiny_checkpoint(dir.path(), 41);
    let onnx = dir.path().join("m.onnx");
    segtool_export::export_onnx(&ckpt, &onnx, &Default::default()).unwrap();
    // 26 x 45: the short side is below the crop (padded first), the long side needs two
    // windows, the last cut at the edge.
    let img = test_image(3, 45, 26);
    let tensor = segtool_train::data::images_to_tensor(&[&img], &spec, tch::Device::Cpu);
    let input = dir.path().join("input.safetensors");
    Tensor::write_safetensors(&[("image", &tensor)], &input).unwrap();
    let logits = tch::no_grad(|| model.forward_all(&tensor, false).fused);
    let magnitude = logits.abs().max().double_value(&[]);
    eprintln!(
        "logit max |value| {magnitude:.2}, std {:.2}",
        logits.std(true).double_value(&[])
    );
    assert!(
        (0.5..40.0).contains(&magnitude),
        "logits of {magnitude} make a weak reference (one-hot or overflowing exp)"
    );
    let ndarray_input = normalise_batch(std::slice::from_ref(&img), &spec).unwrap();

    let cases = [
        // Single scale with flip; base 50 resizes to 29 x 50: padded to 32 rows, windows at
        // 0 and 21 (the second cut to 29 columns and padded).
        Case {
            base_size: 50,
            scales: &[1.0],
            flip: true,
        },
        // Two scales: 0.5 -> 13 x 23 fits one crop (padded, run once); 1.25 -> 33 x 57,
        // 2 x 3 windows, cut at both edges.
        Case {
            base_size: 45,
            scales: &[0.5, 1.25],
            flip: false,
        },
    ];
    for case in &cases {
        let reference = reference_scores(&ckpt, &input, dir.path(), case);
        let stride = Protocol::Danet.default_stride(CROP);
        let train_opts = EvalOptions::new()
            .protocol(Protocol::Danet)
            .base_size(Some(case.base_size))
            .sliding(CROP, stride)
            .flip(case.flip)
            .scales(case.scales.to_vec())
            .batch_size(2);
        let (rel, same) = compare(&sliding::predict(&model, &tensor, &train_opts), &reference);
        eprintln!(
            "tch, scales {:?} flip {}: max rel {rel:.2e}",
            case.scales, case.flip
        );
        assert!(
            rel < 1e-4 && same,
            "tch: max rel {rel:.3e}, labels same {same}"
        );

        let opts = AccuracyOptions::new()
            .protocol(Protocol::Danet)
            .base_size(Some(case.base_size))
            .sliding(CROP, stride)
            .flip(case.flip)
            .scales(case.scales.to_vec())
            .batch_size(3);
        let engines: Vec<Box<dyn Engine>> = vec![
            Box::new(OrtEngine::open(&onnx, &OrtOptions::new().with_intra_threads(1)).unwrap()),
            Box::new(TractEngine::open(&onnx).unwrap()),
        ];
        for mut engine in engines {
            let ours =
                accuracy::predict(engine.as_mut(), ndarray_input.view(), &spec, &opts).unwrap();
            let (n, k, h, w) = ours.dim();
            let flat: Vec<f32> = ours.as_standard_layout().iter().copied().collect();
            let ours = Tensor::from_slice(&flat).view([n as i64, k as i64, h as i64, w as i64]);
            let (rel, same) = compare(&ours, &reference);
            eprintln!("{}: max rel {rel:.2e}", engine.name());
            assert!(
                rel < 1e-4 && same,
                "{}: max rel {rel:.3e}, labels same {same}",
                engine.name()
            );
        }
    }
}

#[test]
fn the_two_protocols_differ_where_they_should() {
    // Same model and windows: mmseg's summed logits and DANet's exp scores rank classes
    // alike only by chance, and the window placement differs at the edge; a protocol
    // switch that did nothing would give equal maps.
    let dir = tempfile::tempdir().unwrap();
    let (spec, model, _) = tiny_checkpoint(dir.path(), 43);
    let img = test_image(5, 45, 37);
    let tensor = segtool_train::data::images_to_tensor(&[&img], &spec, tch::Device::Cpu);
    let base = EvalOptions::new().sliding(32, 21).flip(true);
    let mmseg = sliding::predict(&model, &tensor, &base.clone());
    let danet = sliding::predict(&model, &tensor, &base.protocol(Protocol::Danet));
    assert!(
        danet.min().double_value(&[]) > 0.0,
        "exp scores are positive"
    );
    let diff = (danet.log() - mmseg * 2.0).abs().max().double_value(&[]);
    assert!(
        diff > 1e-3,
        "log(danet) == 2 * mmseg everywhere: windows did not change"
    );
}
