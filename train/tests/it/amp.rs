//! Mixed precision (segtool_train::amp) on the CPU: GradScaler's skip/backoff/growth on
//! forced inf/NaN gradients, the fp16-needs-CUDA refusal, CPU bf16 autocast regions,
//! attention energies kept in fp32 under autocast, and a short bf16 training run against
//! fp32. (fp16 autocast itself needs CUDA; nothing here runs it.)

use crate::common;

use common::spec;
use rand::{Rng, SeedableRng};
use segtool_model_spec::BackboneSpec;
use segtool_train::amp::{self, Amp, GradScalerConfig, Precision};
use segtool_train::model::{AttentionImpl, Cam, Pam};
use segtool_train::optim::{Sgd, SgdConfig};
use segtool_train::{TrainConfig, Trainer};
use tch::{nn, Device, Kind, Tensor};

const CPU: Device = Device::Cpu;

/// libtorch's RNG is global and the tests run in parallel: the tests that draw from it
/// (weights, inputs) hold this, so each sees the same numbers every run.
static RNG: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn rng_lock() -> std::sync::MutexGuard<'static, ()> {
    RNG.lock().unwrap_or_else(|e| e.into_inner())
}

fn values(t: &Tensor) -> Vec<f64> {
    Vec::<f64>::try_from(t.to_kind(Kind::Double).reshape([-1])).unwrap()
}

#[test]
fn fp16_on_cpu_is_refused() {
    let err = Amp::new(Precision::Fp16, CPU).unwrap_err().to_string();
    assert!(
        err.contains("fp16 autocast needs CUDA; use bf16 on CPU"),
        "{err}"
    );
    assert!(Amp::new(Precision::Bf16, CPU).unwrap().scaler().is_none());
    assert!(Amp::new(Precision::Fp32, CPU).unwrap().dtype().is_none());
}

/// GradScaler on one 3-element parameter: good steps apply exactly the unscaled
/// gradient; an inf (then a NaN) gradient skips the step (weights and momentum intact),
/// halves the scale, resets the growth count and is counted and logged; after
/// `growth_interval` good steps in a row the scale doubles.
#[test]
fn scaler_skips_inf_and_nan_steps_backs_off_and_grows() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("metrics.jsonl");
    let vs = nn::VarStore::new(CPU);
    let w = vs
        .root()
        .var_copy("w", &Tensor::from_slice(&[1.0f32, 2.0, 3.0]));
    let mut sgd = Sgd::new(
        &vs,
        SgdConfig {
            momentum: 0.0,
            weight_decay: 0.0,
            nesterov: false,
        },
    );
    let mut amp = Amp::new(Precision::Bf16, CPU)
        .unwrap()
        .force_scaler(GradScalerConfig {
            init_scale: 1024.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 3,
        });
    amp.log = Some(log.clone());
    // One step; the third gradient element is `third`. Returns (skipped, grad after
    // unscaling).
    let mut step = |amp: &mut Amp, third: f32, it: usize| -> (bool, Vec<f64>) {
        sgd.zero_grad();
        let loss = (&w * Tensor::from_slice(&[1.0f32, 1.0, third])).sum(Kind::Float);
        amp.scale_loss(&loss).backward();
        let found = amp.unscale(&vs).unwrap().expect("a scaler");
        let grad = values(&w.grad());
        if found.double_value(&[0]) == 0.0 {
            sgd.step([0.5, 0.5]);
        }
        (amp.finish_step(Some(&found), it).unwrap(), grad)
    };
    let scale = |amp: &Amp| amp.scaler().unwrap().state();

    let (skipped, grad) = step(&mut amp, 1.0, 0);
    assert!(!skipped);
    assert_eq!(grad, [1.0, 1.0, 1.0], "unscaled before the step");
    assert_eq!(values(&w), [0.5, 1.5, 2.5]);
    assert_eq!(scale(&amp), (1024.0, 1));

    let before = values(&w);
    let (skipped, _) = step(&mut amp, f32::INFINITY, 1);
    assert!(skipped);
    assert_eq!(values(&w), before, "weights unchanged on a skipped step");
    assert_eq!(
        scale(&amp),
        (512.0, 0),
        "backoff halves and resets the count"
    );
    assert_eq!(amp.skipped_steps, 1);

    let (skipped, _) = step(&mut amp, f32::NAN, 2);
    assert!(skipped);
    assert_eq!(values(&w), before);
    assert_eq!(scale(&amp), (256.0, 0));
    assert_eq!(amp.skipped_steps, 2);

    // growth_interval = 3 good steps: 256 -> 512 on the third, count back to 0.
    for (k, it) in (3..6).enumerate() {
        let (skipped, grad) = step(&mut amp, 1.0, it);
        assert!(!skipped);
        assert_eq!(grad, [1.0, 1.0, 1.0]);
        let expect = if k == 2 {
            (512.0, 0)
        } else {
            (256.0, k as i64 + 1)
        };
        assert_eq!(scale(&amp), expect, "after good step {}", k + 1);
    }
    assert_eq!(values(&w), [-1.0, 0.0, 1.0]);
    assert_eq!(amp.skipped_steps, 2);

    let lines: Vec<serde_json::Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["kind"], "amp_skip");
    assert_eq!(lines[0]["iteration"], 2);
    assert_eq!(lines[0]["loss_scale"], 512.0);
    assert_eq!(lines[1]["iteration"], 3);
    assert_eq!(lines[1]["skipped_steps"], 2);
    assert_eq!(lines[1]["loss_scale"], 256.0);
}

#[test]
fn cpu_bf16_autocast_region_and_full_precision_inside_it() {
    let a = Tensor::randn([8, 8], (Kind::Float, CPU));
    assert!(!amp::autocast_enabled(CPU));
    let (inside, fp32_inside, nested_on) = amp::autocast(CPU, Kind::BFloat16, || {
        let inside = a.matmul(&a).kind();
        let fp32 = amp::full_precision(|| {
            assert!(!amp::autocast_enabled(CPU));
            a.matmul(&a).kind()
        });
        (inside, fp32, amp::autocast_enabled(CPU))
    })
    .unwrap();
    assert_eq!(inside, Kind::BFloat16);
    assert_eq!(fp32_inside, Kind::Float);
    assert!(
        nested_on,
        "autocast back on after the full-precision region"
    );
    assert!(!amp::autocast_enabled(CPU), "restored after the region");
    assert_eq!(a.matmul(&a).kind(), Kind::Float);
    assert!(amp::autocast(CPU, Kind::Float, || ()).is_err());
}

/// PAM and CAM (both implementations) under bf16 autocast against fp32, gamma = 1.
/// CAM's energies are sums of N = 256 products of values ~3 (|E| ~ 2e3): in bf16 (8-bit
/// mantissa) they would be off by ~8, which changes the softmax completely (see
/// `bf16_energies_would_be_far_off`); in fp32 the only bf16 error left is in the matmuls
/// around them. PAM's query/key/value convolutions run in bf16 (as under torch.autocast),
/// so its energies carry their rounding. Measured max error / max attention output:
/// PAM 1.5% (both), CAM explicit 0.4%, CAM SDPA 0 (all fp32); bound 3%.
#[test]
fn attention_energies_stay_fp32_under_bf16_autocast() {
    let _rng = rng_lock();
    tch::manual_seed(5);
    let vs = nn::VarStore::new(CPU);
    let mut pam = Pam::new(&(vs.root() / "pam"), 32, 4);
    let mut cam = Cam::new(&(vs.root() / "cam"));
    tch::no_grad(|| {
        let _ = pam.gamma.fill_(1.0);
        let _ = cam.gamma.fill_(1.0);
    });
    let x3 = Tensor::randn([2, 32, 16, 16], (Kind::Float, CPU)) * 3.0;
    let x1 = &x3 / 3.0;
    for attention in [AttentionImpl::Explicit, AttentionImpl::Sdpa] {
        pam.attention = attention;
        cam.attention = attention;
        for name in ["pam", "cam"] {
            let x = if name == "pam" { &x1 } else { &x3 };
            let f = |t: &Tensor| match name {
                "pam" => pam.forward(t),
                _ => cam.forward(t),
            };
            let reference = tch::no_grad(|| f(x));
            let mixed = tch::no_grad(|| amp::autocast(CPU, Kind::BFloat16, || f(x)).unwrap());
            let attended = &reference - x; // what attention added (gamma = 1)
            let err = (&mixed.to_kind(Kind::Float) - &reference)
                .abs()
                .max()
                .double_value(&[]);
            let size = attended.abs().max().double_value(&[]);
            eprintln!(
                "{name} {attention:?}: max |bf16 - fp32| {err:.3e}, max |attention| {size:.3}"
            );
            assert!(mixed.isfinite().all().int64_value(&[]) == 1);
            assert!(err < 0.03 * size, "{name} {attention:?}: {err} vs {size}");
        }
    }
}

/// CAM's softmax with the energies in bf16, for the record: how far that would be off.
#[test]
fn bf16_energies_would_be_far_off() {
    let _rng = rng_lock();
    tch::manual_seed(5);
    let x = Tensor::randn([2, 32, 256], (Kind::Float, CPU)) * 3.0;
    let cam = |x: &Tensor| {
        let e = x.bmm(&x.permute([0, 2, 1]));
        let e = e.amax([-1].as_slice(), true) - &e;
        e.to_kind(Kind::Float).softmax(-1, Kind::Float)
    };
    let reference = cam(&x);
    let bf16 = cam(&x.to_kind(Kind::BFloat16));
    let err = (&bf16 - &reference).abs().max().double_value(&[]);
    eprintln!("CAM attention with bf16 energies: max |diff| {err:.3}");
    assert!(err > 0.05, "{err}");
}

/// A learnable task: 3 classes from the signs of two input channels, 4 images 32x32.
fn data() -> (Tensor, Tensor) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let n = 4 * 3 * 32 * 32;
    let images: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let images = Tensor::from_slice(&images).reshape([4, 3, 32, 32]);
    let masks = images.select(1, 0).gt(0.0).to_kind(Kind::Int64)
        + images.select(1, 1).gt(0.0).to_kind(Kind::Int64);
    (images, masks)
}

const STEPS: usize = 20;

fn train(amp: Option<Amp>) -> Vec<f64> {
    let cfg = TrainConfig {
        iterations: STEPS,
        batch_size: 4,
        lr: 0.05,
        progress: false,
        seed: 3,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec(BackboneSpec::tiny(), 3), cfg).unwrap();
    trainer.model.head.dropout = false;
    if let Some(amp) = amp {
        trainer.enable_amp(amp);
    }
    let (images, masks) = data();
    (0..STEPS)
        .map(|it| trainer.step(&images, &masks, it).unwrap())
        .collect()
}

/// 20 SGD steps of the tiny DANet on 32x32 inputs: bf16 autocast against fp32 from the
/// same initial weights. Measured: final loss 0.05% apart, at most 0.27% over the 20
/// steps (bound: 5% relative, final and every step).
#[test]
fn bf16_autocast_training_tracks_fp32() {
    let _rng = rng_lock();
    tch::set_num_threads(1);
    let fp32 = train(None);
    let bf16 = train(Some(Amp::new(Precision::Bf16, CPU).unwrap()));
    eprintln!("fp32 losses {fp32:.4?}\nbf16 losses {bf16:.4?}");
    assert!(bf16.iter().all(|l| l.is_finite()));
    assert!(fp32[STEPS - 1] < 0.95 * fp32[0], "training moved: {fp32:?}");
    let rel = |a: f64, b: f64| (a - b).abs() / b.abs();
    let last = rel(bf16[STEPS - 1], fp32[STEPS - 1]);
    let worst = bf16
        .iter()
        .zip(&fp32)
        .map(|(a, b)| rel(*a, *b))
        .fold(0.0, f64::max);
    eprintln!("final loss relative difference {last:.4}, worst over the run {worst:.4}");
    assert!(last < 0.05, "final bf16 loss off by {last}");
    assert!(worst < 0.05, "some bf16 loss off by {worst}");
}

/// The trainer with loss scaling: a scale so large that the scaled loss overflows fp32
/// makes step 0 skip (weights intact, StepStats.skipped, logged); the backoff brings it
/// to ~2^17 and step 1 applies.
#[test]
fn trainer_skips_an_overflowing_step() {
    let _rng = rng_lock();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("metrics.jsonl");
    let cfg = TrainConfig {
        iterations: 5,
        batch_size: 2,
        lr: 0.01,
        progress: false,
        seed: 3,
        grad_clip_norm: Some(10.0),
        // Gradients well above 1: times a scale of f32::MAX they overflow.
        loss_weights: [1000.0; 3],
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec(BackboneSpec::tiny(), 3), cfg).unwrap();
    let mut amp = Amp::new(Precision::Bf16, CPU)
        .unwrap()
        .force_scaler(GradScalerConfig {
            init_scale: f32::MAX as f64,
            backoff_factor: 2f64.powi(-111),
            ..GradScalerConfig::default()
        });
    amp.log = Some(log.clone());
    trainer.enable_amp(amp);
    let (images, masks) = data();
    let (images, masks) = (images.narrow(0, 0, 2), masks.narrow(0, 0, 2));
    let snapshot = |t: &Trainer| -> Vec<(String, Vec<f64>)> {
        let mut v: Vec<_> =
            t.vs.variables()
                .into_iter()
                .map(|(n, t)| (n, values(&t)))
                .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    };
    let params = |t: &Trainer| -> Vec<(String, Vec<f64>)> {
        let trainable: Vec<String> =
            t.vs.variables()
                .into_iter()
                .filter(|(_, t)| t.requires_grad())
                .map(|(n, _)| n)
                .collect();
        snapshot(t)
            .into_iter()
            .filter(|(n, _)| trainable.contains(n))
            .collect()
    };
    let before = params(&trainer);
    let s0 = trainer.step_accumulated(&[(&images, &masks)], 0).unwrap();
    assert!(s0.skipped && s0.loss.is_finite(), "{s0:?}");
    assert_eq!(s0.grad_norm, None, "no clipping on a skipped step");
    let scale = s0.loss_scale.unwrap();
    assert!((scale / 2f64.powi(17) - 1.0).abs() < 1e-6, "{scale}");
    assert_eq!(params(&trainer), before, "parameters unchanged");
    let s1 = trainer.step_accumulated(&[(&images, &masks)], 1).unwrap();
    assert!(!s1.skipped, "{s1:?}");
    assert!(s1.grad_norm.unwrap().is_finite());
    assert_ne!(params(&trainer), before, "step 1 applied");
    assert_eq!(trainer.amp.as_ref().unwrap().skipped_steps, 1);
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let line: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(line["kind"], "amp_skip");
    assert_eq!(line["iteration"], 1);
}
