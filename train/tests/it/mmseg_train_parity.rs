//! One training step of segtool's mmseg presets against mmsegmentation's own (1.2.2, built
//! from its registry and its config files by tests/reference/mmseg_train_step.py): the
//! same weights (a random, well-conditioned ResNetV1c-50 DANet in mmseg's file format,
//! imported with segtool's mmseg importer into the model the preset builds), the same
//! batch (2 x 64 x 64, ~10% ignored pixels and an ignored block), `model.dropout = 0`,
//! BatchNorm on batch statistics (SyncBN on one process is plain BN, as in mmseg on one
//! GPU). Checked: every loss term mmseg reports (CE of pam_cam, pam, cam with
//! `avg_non_ignore=False`, 0.4 x the aux head's), every parameter's gradient, the SGD
//! update at iteration 0, the BN running statistics after it, and PolyLR's rates.
//!
//! Tolerances (measured values are printed; see also the noise floor in each message):
//! - float64 (our model and mmseg's both in float64): loss terms 1e-12 relative; gradients
//!   max|ours - mmseg| / max|mmseg| per tensor below 1e-10; SGD updates L2-relative 1e-8;
//!   running statistics 1e-10 absolute. This is the exactness check: the same maths, op for op.
//! - float32 (our model in float32 against mmseg's float64): loss terms 1e-5 relative;
//!   gradients (and the SGD updates of the parameters the reference keeps) per-tensor
//!   L2-relative below [`FP32_GRAD_BOUND`]. mmseg's own float32 step
//!   against its float64 one (the noise floor, computed by the reference script) lies at
//!   ~1e-7 for the losses and, for the gradients, up to a few 1e-3 per tensor (ReLUs whose
//!   input is within rounding of 0 flip in either framework on 8x8 feature maps).
//! - `decode_head.pam.key_project.bias` (our `head.sa.key_conv.bias`): its gradient vanishes
//!   identically (softmax ignores a per-row constant), so it is checked absolutely.

use crate::common;

use std::collections::HashMap;
use std::path::Path;

use common::python;
use segtool_core::config::RunConfig;
use segtool_train::import::{
    from_mmseg, import_into, read_state_dict, ImportMode, MmsegOverrides, StateDict,
};
use segtool_train::trainer::StepStats;
use segtool_train::{presets, DaNet, TrainConfig, Trainer};
use tch::{nn, Device, Kind, Tensor};

/// Per-tensor L2-relative bound on float32 gradients against mmseg's float64 ones.
const FP32_GRAD_BOUND: f64 = 2e-2;

type Tensors = HashMap<String, Tensor>;

fn read(path: &Path) -> Tensors {
    Tensor::read_safetensors(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .collect()
}

fn scalar(t: &Tensors, key: &str) -> f64 {
    t.get(key)
        .unwrap_or_else(|| panic!("reference lacks {key}"))
        .double_value(&[0])
}

/// mmseg name -> segtool name, as segtool's importer renames: every tensor of the file is
/// replaced by one filled with its index, run through the importer, and read back.
fn name_map(state: &StateDict) -> HashMap<String, String> {
    let tagged = StateDict {
        tensors: state
            .tensors
            .iter()
            .enumerate()
            .map(|(i, (n, t))| {
                (
                    n.clone(),
                    Tensor::full(t.size(), i as f64, (Kind::Double, Device::Cpu)),
                )
            })
            .collect(),
        skipped: 0,
        root: state.root.clone(),
        values: state.values.clone(),
    };
    let renamed = from_mmseg(tagged, "tagged.pth", &MmsegOverrides::default()).unwrap();
    renamed
        .state
        .tensors
        .iter()
        .map(|(ours, t)| {
            let i = t.flatten(0, -1).double_value(&[0]) as usize;
            (state.tensors[i].0.clone(), ours.clone())
        })
        .collect()
}

fn shallow(state: &StateDict) -> StateDict {
    StateDict {
        tensors: state
            .tensors
            .iter()
            .map(|(n, t)| (n.clone(), t.shallow_clone()))
            .collect(),
        skipped: state.skipped,
        root: state.root.clone(),
        values: state.values.clone(),
    }
}

/// mmseg's own float32 error on `key` (NaN when the reference skipped the float32 run).
fn noise_floor(t: &Tensors, key: &str) -> f64 {
    t.get(&format!("noise/{key}"))
        .map_or(f64::NAN, |v| v.double_value(&[0]))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-30)
}

/// The step of `preset` against mmseg's `mmseg_config`: in float64, and with `full` also
/// in float32 (against mmseg's float64, with its float32 noise floor) and PolyLR's rates.
fn check_step(preset: &str, mmseg_config: &str, full: bool) {
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let status = python()
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/mmseg_train_step.py"))
        .arg(mmseg_config)
        .arg(dir.path())
        .args((!full).then_some("--quick"))
        .status()
        .expect("python runs (scripts/setup.sh installs the venv with requirements-mmseg.txt)");
    assert!(
        status.success(),
        "mmseg reference failed for {mmseg_config}"
    );
    eprintln!("mmseg reference: {:.1} s", started.elapsed().as_secs_f64());
    let reference = read(&dir.path().join("ref64.safetensors"));
    let inputs = read(&dir.path().join("inputs.safetensors"));
    let file = dir.path().join(format!("{mmseg_config}.pth"));

    let mut cfg = RunConfig::preset(preset).unwrap();
    cfg.apply_override("model.dropout=0").unwrap();
    cfg.validate().unwrap();
    let state = read_state_dict(&file).unwrap();
    let names = name_map(&state);
    let initial: HashMap<&str, Tensor> = state
        .tensors
        .iter()
        .map(|(n, t)| (n.as_str(), t.to_kind(Kind::Double)))
        .collect();
    let imported = from_mmseg(
        shallow(&state),
        &file.file_name().unwrap().to_string_lossy(),
        &MmsegOverrides::default(),
    )
    .unwrap();
    // The preset's architecture is the one the file holds.
    let spec = presets::model_spec(&cfg, imported.spec.classes.clone(), None).unwrap();
    assert_eq!(spec.backbone, imported.spec.backbone, "{preset}: backbone");
    assert_eq!(spec.inter_channels(), imported.spec.inter_channels());
    assert_eq!(spec.qk_channels(), imported.spec.qk_channels());
    assert_eq!(spec.aux_head, imported.spec.aux_head, "{preset}: aux head");

    let image = inputs["image"].shallow_clone();
    let target = inputs["target"].to_kind(Kind::Int64);
    let runs: &[bool] = if full { &[true, false] } else { &[true] };
    for &f64_run in runs {
        let what = format!("{preset} {}", if f64_run { "f64" } else { "f32" });
        let mut vs = nn::VarStore::new(Device::Cpu);
        let model = DaNet::new(&vs.root(), &spec);
        let state = from_mmseg(shallow(&state), "x.pth", &MmsegOverrides::default())
            .unwrap()
            .state;
        import_into(&mut vs, state, ImportMode::Full)
            .unwrap()
            .ensure_complete(ImportMode::Full)
            .unwrap();
        let image = if f64_run {
            vs.double();
            image.to_kind(Kind::Double)
        } else {
            image.shallow_clone()
        };
        let config = TrainConfig {
            progress: false,
            ..TrainConfig::from_run_config(&cfg, cfg.optim.iterations as usize, Device::Cpu)
        };
        let mut trainer = Trainer::from_parts(vs, model, config).unwrap();
        let step_started = std::time::Instant::now();
        let stats = trainer.step_accumulated(&[(&image, &target)], 0).unwrap();
        eprintln!(
            "{what}: step {:.1} s (import + step since start {:.1} s)",
            step_started.elapsed().as_secs_f64(),
            started.elapsed().as_secs_f64()
        );

        check_losses(&what, &stats, &reference, f64_run);
        check_gradients(&what, &trainer, &names, &reference, &initial, f64_run);
    }

    if full {
        check_poly_lr(&dir.path().join("lr.safetensors"), &cfg);
    }
}

/// The step's loss terms against mmseg's.
fn check_losses(what: &str, stats: &StepStats, reference: &Tensors, f64_run: bool) {
    let loss_tol = if f64_run { 1e-12 } else { 1e-5 };
    let ours = [
        ("loss/total", stats.loss),
        ("loss/decode.pam_cam.loss_ce", stats.loss_terms[0]),
        ("loss/decode.pam.loss_ce", stats.loss_terms[1]),
        ("loss/decode.cam.loss_ce", stats.loss_terms[2]),
        ("loss/aux.loss_ce", stats.loss_aux.expect("an aux term")),
    ];
    for (key, value) in ours {
        let (r, noise) = (scalar(&reference, key), noise_floor(&reference, key));
        let err = rel(value, r);
        eprintln!("{what} {key}: ours {value:.9} mmseg {r:.9} rel {err:.2e} (mmseg f32 noise {noise:.1e})");
        assert!(
            err < loss_tol,
            "{what} {key}: relative error {err:.3e} exceeds {loss_tol:e}"
        );
    }
}

/// Every gradient and running statistic against mmseg's, and the SGD update of the
/// parameters mmseg recorded.
fn check_gradients(
    what: &str,
    trainer: &Trainer,
    names: &HashMap<String, String>,
    reference: &Tensors,
    initial: &HashMap<&str, Tensor>,
    f64_run: bool,
) {
    let variables = trainer.vs.variables();
    let mut updates = 0;
    let (mut errors, mut noises) = (Vec::new(), Vec::new());
    let (mut worst, mut worst_name, mut worst_noise, mut checked) = (0f64, String::new(), 0f64, 0);
    for (mmseg, ours) in names {
        if mmseg.ends_with("num_batches_tracked") {
            continue; // BN's step counter: mmseg's momentum is fixed, nothing reads it
        }
        let Some(var) = variables.get(ours) else {
            panic!("{what}: {mmseg} imported as {ours}, which the model lacks");
        };
        if let Some(r) = reference.get(&format!("running/{mmseg}")) {
            let d = (var.to_kind(Kind::Double) - r)
                .abs()
                .max()
                .double_value(&[]);
            let tol = if f64_run { 1e-10 } else { 1e-4 };
            assert!(d < tol, "{what} running statistic {ours}: {d:.3e}");
            continue;
        }
        let Some(r) = reference.get(&format!("grad/{mmseg}")) else {
            continue; // num_batches_tracked and the like
        };
        let g = var.grad();
        assert!(g.defined(), "{what}: {ours} has no gradient");
        let g = g.to_kind(Kind::Double);
        let max_ref = r.abs().max().double_value(&[]);
        if mmseg == "decode_head.pam.key_project.bias" {
            let m = g.abs().max().double_value(&[]);
            assert!(
                m < 1e-6 * max_ref.max(1e-3),
                "{what} {ours}: {m:.3e} should vanish"
            );
            continue;
        }
        let (err, bound) = if f64_run {
            let d = (&g - r).abs().max().double_value(&[]);
            (d / max_ref.max(1e-30), 1e-10)
        } else {
            let l2 = (&g - r).norm().double_value(&[]);
            (l2 / r.norm().double_value(&[]).max(1e-30), FP32_GRAD_BOUND)
        };
        let noise = noise_floor(reference, &format!("grad/{mmseg}"));
        if err > worst {
            (worst, worst_name, worst_noise) = (err, ours.clone(), noise);
        }
        errors.push(err);
        noises.push(noise);
        assert!(err < bound, "{what} {ours} ({mmseg}): gradient error {err:.3e} exceeds {bound:e} (mmseg f32 noise {noise:.2e})");
        checked += 1;
        if let Some(new) = reference.get(&format!("new/{mmseg}")) {
            // The SGD update (lr 0.01, wd 5e-4, first step: no momentum history).
            let before = &initial[mmseg.as_str()];
            let (mine, theirs) = (var.to_kind(Kind::Double) - before, new - before);
            let err = (&mine - &theirs).norm().double_value(&[])
                / theirs.norm().double_value(&[]).max(1e-30);
            let tol = if f64_run { 1e-8 } else { FP32_GRAD_BOUND };
            assert!(
                err < tol,
                "{what} {ours}: SGD update L2-relative error {err:.3e}"
            );
            updates += 1;
        }
    }
    let metric = if f64_run {
        "max-relative"
    } else {
        "L2-relative"
    };
    eprintln!("{what}: {checked} gradients, worst {metric} {worst:.2e} ({worst_name}; mmseg's own f32 noise there {worst_noise:.2e}); median {metric} {:.2e}, mmseg's own f32 L2-relative noise median {:.2e} max {:.2e}", median(&mut errors), median(&mut noises), noises.iter().cloned().fold(f64::NAN, f64::max));
    // Every parameter mmseg has, but the vanishing key bias (checked above).
    let expected = reference.keys().filter(|k| k.starts_with("grad/")).count() - 1;
    assert_eq!(checked, expected, "{what}: gradients compared");
    assert_eq!(updates, 7, "{what}: updated parameters compared");
}

/// PolyLR(eta_min=1e-4, power=0.9, end=iterations): mmengine's chainable form stepped per
/// iteration (`lr_file`) against segtool's closed form.
fn check_poly_lr(lr_file: &Path, cfg: &RunConfig) {
    let lrs = read(lr_file);
    let config = TrainConfig::from_run_config(cfg, cfg.optim.iterations as usize, Device::Cpu);
    let iters = Vec::<f64>::try_from(&lrs["iters"]).unwrap();
    let values = Vec::<f64>::try_from(&lrs["lr"]).unwrap();
    for (it, lr) in iters.iter().zip(&values) {
        let ours = config.lr_at(*it as usize);
        assert!(
            rel(ours, *lr) < 1e-9,
            "lr at {it}: ours {ours:e}, mmengine {lr:e}"
        );
        assert!(
            rel(config.head_lr_at(*it as usize), *lr) < 1e-9,
            "head lr at {it}"
        );
    }
}

#[test]
fn cityscapes_512x1024_preset_step_matches_mmseg() {
    check_step(
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        "danet_r50-d8_4xb2-80k_cityscapes-512x1024",
        true,
    );
}

#[test]
fn cityscapes_769x769_preset_step_matches_mmseg_with_align_corners() {
    check_step(
        "mmseg-danet-r50-d8-cityscapes-769x769-40k",
        "danet_r50-d8_4xb2-40k_cityscapes-769x769",
        false,
    );
}
