//! QAT: the INT8 file is the trained model. A tiny DANet trained briefly in float, then
//! fine-tuned a few iterations with fake quantisation for each calibration layout,
//! exported from its QAT checkpoint without images; on held-out images the tch
//! fake-quant model (eval mode) and the INT8 file in ONNX Runtime give the same labels on
//! at least 99.9% of the pixels, with the logits within a stated bound.

use crate::common;

use std::sync::Arc;

use common::spec;
use segtool_calibration::qdq::{Layout, WeightRange};
use segtool_calibration::session::OrtModel;
use segtool_core::shapes::{generate, ShapesConfig};
use segtool_model_spec::qat::QAT_METADATA_KEY;
use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::checkpoint::{self, CheckpointInfo};
use segtool_train::data::{images_to_tensor, masks_to_tensor};
use segtool_train::qat::{FakeQuant, QatOptions, RangeLearning};
use segtool_train::{Checkpoint, TrainConfig, Trainer};
use tch::{nn::ModuleT, Device, Kind, Tensor};

/// Labels that must agree between tch's fake-quant model and ONNX Runtime's INT8 run.
const MIN_AGREEMENT: f64 = 0.999;
/// Bound on |logit difference| (the logits are float: conv8's output is not quantised;
/// this is a few steps of the quantised features feeding it).
const MAX_LOGIT_DIFF: f32 = 0.25;

const SIZE: u32 = 48;

fn serial() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    tch::set_num_threads(1);
    guard
}

/// Batches of `batch` shapes images (and masks) from `offset`.
fn batches(spec: &ModelSpec, offset: u64, count: usize, batch: usize) -> Vec<(Tensor, Tensor)> {
    let cfg = ShapesConfig::square(SIZE, 3);
    let samples: Vec<_> = (0..count as u64)
        .map(|i| generate(&cfg, offset + i))
        .collect();
    samples
        .chunks(batch)
        .map(|c| {
            let images: Vec<_> = c.iter().map(|s| &s.image).collect();
            let masks: Vec<_> = c.iter().map(|s| &s.mask).collect();
            (
                images_to_tensor(&images, spec, Device::Cpu),
                masks_to_tensor(&masks, Device::Cpu),
            )
        })
        .collect()
}

fn float_checkpoint(spec: &ModelSpec, train: &[(Tensor, Tensor)]) -> Vec<u8> {
    let config = TrainConfig {
        iterations: 40,
        batch_size: 4,
        lr: 0.03,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(spec, config).unwrap();
    for it in 0..40 {
        let (x, y) = &train[it % train.len()];
        trainer.step(x, y, it).unwrap();
    }
    checkpoint::to_bytes(&trainer.vs, spec, &CheckpointInfo::new()).unwrap()
}

/// QAT of the float checkpoint for `layout`: the QAT checkpoint's bytes and the trained
/// fake-quant model.
fn qat(
    float: &[u8],
    layout: Layout,
    ranges: RangeLearning,
    train: &[(Tensor, Tensor)],
) -> (Vec<u8>, Trainer) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("float.safetensors");
    std::fs::write(&path, float).unwrap();
    let ckpt = Checkpoint::read(&path).unwrap();
    let (vs, mut model) = segtool_train::load_model(&ckpt, Device::Cpu).unwrap();
    let options = QatOptions {
        layout,
        weight_range: WeightRange::for_this_cpu(),
        ranges,
        freeze_bn_at: Some(3),
        ..QatOptions::default()
    };
    let fq = Arc::new(FakeQuant::new(&vs, &ckpt.spec, options).unwrap());
    model.set_qat(Some(fq.clone()));
    let calib: Vec<Tensor> = train.iter().map(|(x, _)| x.shallow_clone()).collect();
    fq.calibrate(&calib, |x| {
        let _ = model.forward_t(x, false);
    })
    .unwrap();
    let config = TrainConfig {
        iterations: 6,
        batch_size: 4,
        lr: 0.003,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::from_parts(vs, model, config).unwrap();
    for it in 0..6 {
        let (x, y) = &train[it % train.len()];
        trainer.step(x, y, it).unwrap();
    }
    let fq = trainer.model.qat().unwrap().clone();
    fq.check_coverage().unwrap();
    let mut info = CheckpointInfo::new();
    let (k, v) = fq.metadata(calib.len() * 4);
    assert_eq!(k, QAT_METADATA_KEY);
    info.insert(k, v);
    let bytes = checkpoint::to_bytes(&trainer.vs, &ckpt.spec, &info).unwrap();
    (bytes, trainer)
}

/// (label agreement, max |logit difference|) of tch's fake-quant eval and ORT's INT8 run.
fn compare(trainer: &Trainer, int8: &[u8], val: &[(Tensor, Tensor)]) -> (f64, f32) {
    let mut ort = OrtModel::new(int8, Some(1)).unwrap();
    let (mut same, mut total, mut max_diff) = (0usize, 0usize, 0f32);
    for (x, _) in val {
        let tch_logits = tch::no_grad(|| trainer.model.forward_t(x, false));
        let shape: Vec<usize> = x.size().iter().map(|&d| d as usize).collect();
        let data = Vec::<f32>::try_from(x.contiguous().view(-1)).unwrap();
        let input = ndarray::Array4::from_shape_vec((shape[0], shape[1], shape[2], shape[3]), data)
            .unwrap();
        let out = ort.run(input.view(), &["logits".to_string()]).unwrap();
        let ort_logits = out["logits"].clone();
        let ort_t =
            Tensor::from_slice(ort_logits.as_slice().unwrap()).view(tch_logits.size().as_slice());
        let diff = (&ort_t - &tch_logits).abs().max().double_value(&[]) as f32;
        max_diff = max_diff.max(diff);
        let a = ort_t.argmax(1, false);
        let b = tch_logits.argmax(1, false);
        same += a
            .eq_tensor(&b)
            .to_kind(Kind::Int64)
            .sum(Kind::Int64)
            .int64_value(&[]) as usize;
        total += a.numel();
    }
    (same as f64 / total as f64, max_diff)
}

#[test]
fn qat_int8_file_gives_the_fake_quant_models_labels_in_onnx_runtime() {
    let _serial = serial();
    let spec = spec(BackboneSpec::tiny(), segtool_core::shapes::CLASSES.len());
    let train = batches(&spec, 0, 16, 4);
    let val = batches(&spec, 1000, 8, 4);
    let float = float_checkpoint(&spec, &train);
    for (layout, ranges) in [
        (Layout::OrtCpu, RangeLearning::Ema),
        (Layout::Portable, RangeLearning::Lsq),
        (Layout::OpenVino, RangeLearning::Ema),
    ] {
        let (bytes, mut trainer) = qat(&float, layout, ranges, &train);
        let (int8, record) =
            segtool_calibration::qat::export_qat(&bytes, &segtool_export::ExportOptions::default())
                .unwrap();
        assert_eq!(record.spec.layout, layout.name());
        let (agreement, max_diff) = compare(&trainer, &int8, &val);
        eprintln!(
            "{} ({}): labels agree on {:.4}% of pixels, max |logit diff| {max_diff:.5}",
            layout.name(),
            ranges.name(),
            agreement * 100.0
        );
        assert!(
            agreement >= MIN_AGREEMENT,
            "{}: agreement {agreement}",
            layout.name()
        );
        assert!(
            max_diff <= MAX_LOGIT_DIFF,
            "{}: max logit diff {max_diff}",
            layout.name()
        );
        // The fake quantisation is in the loop: the float forward of the same weights
        // is further from the fake-quant one than ONNX Runtime's INT8 run is.
        let x = &val[0].0;
        let fake = tch::no_grad(|| trainer.model.forward_t(x, false));
        trainer.model.set_qat(None);
        let float = tch::no_grad(|| trainer.model.forward_t(x, false));
        let quant_effect = (&fake - &float).abs().max().double_value(&[]) as f32;
        eprintln!("  float vs fake-quant: max |logit diff| {quant_effect:.5}");
        assert!(
            quant_effect > max_diff,
            "{}: {quant_effect} vs {max_diff}",
            layout.name()
        );
    }
}

#[test]
fn another_layout_is_refused_by_name_on_resume_and_at_export() {
    let _serial = serial();
    let spec = spec(BackboneSpec::tiny(), 3);
    let (vs, _) = common::random_model(&spec, 0);
    let options = QatOptions {
        layout: Layout::OrtCpu,
        ..QatOptions::default()
    };
    let fq = FakeQuant::new(&vs, &spec, options).unwrap();
    fq.check_resume(&fq.spec(4)).unwrap();
    let mut other = fq.spec(4);
    other.layout = "portable".into();
    let err = fq.check_resume(&other).unwrap_err().to_string();
    assert!(
        err.contains("\"portable\"") && err.contains("\"ort-cpu\""),
        "{err}"
    );
    let mut other = fq.spec(4);
    other.weight_range = "other".into();
    let err = fq.check_resume(&other).unwrap_err().to_string();
    assert!(err.contains("weight range"), "{err}");
    let err =
        segtool_calibration::qat::check_target("ort-cpu", segtool_export::ExportTarget::TensorRt)
            .unwrap_err()
            .to_string();
    assert!(err.contains("ort-cpu") && err.contains("TensorRT"), "{err}");
    segtool_calibration::qat::check_target("portable", segtool_export::ExportTarget::TensorRt)
        .unwrap();
}
