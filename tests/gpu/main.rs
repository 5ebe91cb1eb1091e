//! The GPU tier: `make test-gpu` (run by nothing in CI). A test harness of its own
//! (`harness = false`), so that a check whose hardware is absent is reported as what it
//! is: each check prints `PASSED (<what it measured>)`, `FAILED: <why>` or
//! `SKIPPED: <reason>`, and the run ends with `N passed, N failed, N skipped`. A skip is
//! never counted as a pass. With `SEGTOOL_GPU_REQUIRE=1` a skip fails the run (for a box
//! that is supposed to have everything).
//!
//! Without `SEGTOOL_GPU_TESTS=1` (which `make test-gpu` sets) nothing runs: `cargo test
//! --workspace` builds this target, so it keeps compiling, and says it ran no check.
//! Arguments that do not start with `-` filter the checks by substring, as libtest does.
//!
//! The checks, with their tolerances (fp32 comparisons run with TF32 off):
//! - `cuda_train_step_matches_cpu`: 3 SGD steps of the tiny DANet from the same weights on
//!   CUDA and on the CPU: every variable within 1e-4 absolute, losses within 1e-5 relative.
//! - `fp16_amp_loss_scaling_on_cuda`: fp16 autocast with dynamic loss scaling; a forced
//!   overflow (initial scale f32::MAX) skips step 0 leaving the weights bit-identical and
//!   backs the scale off; the following steps apply and stay finite.
//! - `pam_sdpa_memory_on_cuda_768`: PAM at a 768 crop (N = 96 x 96, C = 512), forward and
//!   backward, batch 2: peak CUDA memory of the explicit N x N form against SDPA; SDPA
//!   must not exceed the explicit form (+5%) and the outputs agree within 1e-3 relative.
//! - `nccl_ddp_syncbn_matches_one_process`: one rank per visible GPU (NCCL, SyncBN, DDP),
//!   2 images each, against one process on cuda:0 with the global batch and plain BN: 5
//!   steps, every variable within 1e-4, ranks identical.
//! - `ort_cuda_matches_cpu`: ONNX Runtime's CUDA provider (strict) against its CPU provider
//!   on a tiny DANet export: logits within 1e-2 x max|logit| (ONNX Runtime's CUDA provider
//!   uses TF32 by default), argmax agreement >= 99.5%.
//! - `ort_tensorrt_fp32_fp16_int8_match_cpu`: the TensorRT provider on the `tensorrt`
//!   export (ONNX Attention): fp32 as above; fp16 within 5e-2 x max|logit|, agreement
//!   >= 98%; INT8 with `segtool calibrate --trt-cache`'s calibration cache, agreement
//!   >= 90%.
//! - `tensorrt_engine_cache_reuse`: two sessions on one engine cache: the second builds in
//!   under half the first's time and adds no engine file.
//! - `infer_devices_all_gpus`: `segtool infer --devices 0,..,N-1 --strict` uses every GPU
//!   and gives the labels of a CPU run (agreement >= 99.5%).

#[path = "../common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use common::{p, segtool, test_image};
use segtool_core::{BackboneSpec, ModelSpec};
use segtool_runtime::{
    Engine, OrtEngine, OrtOptions, Provider, Segmentation, Segmenter, TensorRtOptions,
};
use segtool_train::amp::{Amp, GradScalerConfig, Precision};
use segtool_train::dist::{sync_bn, Backend as DistBackend, Ddp, DistEnv, LaunchConfig, Launcher};
use segtool_train::env_report::{cuda_devices, cuda_peak_allocated, set_cuda_allow_tf32};
use segtool_train::model::attention::{AttentionImpl, Pam};
use segtool_train::{TrainConfig, Trainer};
use tch::{nn, Device, Kind, Tensor};

enum Outcome {
    Passed(String),
    Skipped(String),
}
use Outcome::{Passed, Skipped};

type Check = fn() -> Result<Outcome>;

const CHECKS: &[(&str, Check)] = &[
    ("cuda_train_step_matches_cpu", cuda_train_step_matches_cpu),
    (
        "fp16_amp_loss_scaling_on_cuda",
        fp16_amp_loss_scaling_on_cuda,
    ),
    ("pam_sdpa_memory_on_cuda_768", pam_sdpa_memory_on_cuda_768),
    (
        "nccl_ddp_syncbn_matches_one_process",
        nccl_ddp_syncbn_matches_one_process,
    ),
    ("ort_cuda_matches_cpu", ort_cuda_matches_cpu),
    (
        "ort_tensorrt_fp32_fp16_int8_match_cpu",
        ort_tensorrt_fp32_fp16_int8_match_cpu,
    ),
    ("tensorrt_engine_cache_reuse", tensorrt_engine_cache_reuse),
    ("infer_devices_all_gpus", infer_devices_all_gpus),
];

const CHILD_VAR: &str = "SEGTOOL_GPU_CHILD";
const OUT_VAR: &str = "SEGTOOL_GPU_OUT";

fn main() {
    if let Ok(scenario) = std::env::var(CHILD_VAR) {
        let out = PathBuf::from(std::env::var(OUT_VAR).expect("output folder"));
        let result = match scenario.as_str() {
            "ddp" => ddp_rank(&out),
            other => Err(anyhow::anyhow!("unknown child scenario {other}")),
        };
        match result {
            Ok(()) => std::process::exit(0),
            Err(e) => {
                eprintln!("rank error: {e:#}");
                std::process::exit(3)
            }
        }
    }
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let selected: Vec<&(&str, Check)> = CHECKS
        .iter()
        .filter(|(name, _)| filters.is_empty() || filters.iter().any(|f| name.contains(f)))
        .collect();
    if std::env::var("SEGTOOL_GPU_TESTS").as_deref() != Ok("1") {
        println!(
            "GPU tier not requested: none of its {} checks ran (`make test-gpu` runs them, \
             with SEGTOOL_GPU_TESTS=1)",
            selected.len()
        );
        return;
    }
    println!("\nrunning {} GPU checks", selected.len());
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for (name, check) in selected {
        let start = Instant::now();
        let outcome = std::panic::catch_unwind(check);
        let secs = start.elapsed().as_secs_f64();
        match outcome {
            Ok(Ok(Passed(what))) => {
                passed += 1;
                println!("test {name} ... PASSED in {secs:.1} s ({what})");
            }
            Ok(Ok(Skipped(reason))) => {
                skipped += 1;
                println!("test {name} ... SKIPPED: {reason}");
            }
            Ok(Err(e)) => {
                failed += 1;
                println!("test {name} ... FAILED in {secs:.1} s: {e:#}");
            }
            Err(panic) => {
                failed += 1;
                let msg = panic
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                println!("test {name} ... FAILED in {secs:.1} s: panicked: {msg}");
            }
        }
    }
    println!("\n{passed} passed, {failed} failed, {skipped} skipped");
    let require = std::env::var("SEGTOOL_GPU_REQUIRE").as_deref() == Ok("1");
    if failed > 0 || (require && skipped > 0) {
        std::process::exit(1);
    }
}

// --- gates ------------------------------------------------------------------------------

/// The CUDA devices libtorch sees, or the skip reason.
fn gpus() -> std::result::Result<usize, Outcome> {
    match cuda_devices() {
        Ok(d) if !d.is_empty() => Ok(d.len()),
        Ok(_) => Err(Skipped("no CUDA device visible to libtorch".into())),
        Err(why) => Err(Skipped(format!(
            "no CUDA device visible to libtorch ({why})"
        ))),
    }
}

macro_rules! gate {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(outcome) => return Ok(outcome),
        }
    };
}

/// Opens `model` with `provider` and no CPU fallback, or says why not (the skip reason).
fn strict_engine(model: &Path, provider: Provider) -> std::result::Result<OrtEngine, Outcome> {
    let name = provider.to_string();
    let options = OrtOptions::new().with_provider(provider).strict(true);
    OrtEngine::open(model, &options).map_err(|e| {
        let e = e.to_string();
        let e = e
            .split_once(" unavailable: ")
            .map_or(e.as_str(), |(_, why)| why);
        Skipped(format!(
            "ONNX Runtime's {name} provider does not register ({e}); the GPU packages come \
             with SEGTOOL_GPU=1 (README, GPU section)"
        ))
    })
}

// --- training ---------------------------------------------------------------------------

fn tiny_spec(classes: usize) -> ModelSpec {
    ModelSpec::new(
        "tiny",
        BackboneSpec::tiny(),
        (0..classes).map(|c| format!("c{c}")).collect(),
    )
}

/// `n` images 3x32x32 and masks of 5 classes, the same in every process.
fn data(n: i64) -> (Tensor, Tensor) {
    tch::manual_seed(7);
    let images = Tensor::randn([n, 3, 32, 32], (Kind::Float, Device::Cpu));
    let masks = Tensor::randint(5, [n, 32, 32], (Kind::Int64, Device::Cpu));
    (images, masks)
}

fn sorted_vars(vs: &nn::VarStore) -> Vec<(String, Tensor)> {
    let mut v: Vec<_> = vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.to_device(Device::Cpu).to_kind(Kind::Double)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn max_diff(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> Result<(f64, String)> {
    ensure!(a.len() == b.len(), "{} vs {} variables", a.len(), b.len());
    let mut worst = (0.0, String::new());
    for ((na, ta), (nb, tb)) in a.iter().zip(b) {
        ensure!(na == nb, "variable {na} vs {nb}");
        let d = (ta - tb).abs().max().double_value(&[]);
        if d > worst.0 {
            worst = (d, na.clone());
        }
    }
    Ok(worst)
}

fn trainer(device: Device, batch: usize) -> Result<Trainer> {
    let cfg = TrainConfig {
        iterations: 10,
        batch_size: batch,
        lr: 0.01,
        progress: false,
        seed: 3,
        device,
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(&tiny_spec(5), cfg)?;
    t.model.head.dropout = false;
    Ok(t)
}

fn cuda_train_step_matches_cpu() -> Result<Outcome> {
    gate!(gpus());
    set_cuda_allow_tf32(false)?;
    let mut cpu = trainer(Device::Cpu, 4)?;
    let mut gpu = trainer(Device::Cuda(0), 4)?;
    gpu.vs.copy(&cpu.vs)?;
    let (images, masks) = data(4);
    let (gi, gm) = (
        images.to_device(Device::Cuda(0)),
        masks.to_device(Device::Cuda(0)),
    );
    let mut worst_loss: f64 = 0.0;
    for it in 0..3 {
        let lc = cpu.step(&images, &masks, it)?;
        let lg = gpu.step(&gi, &gm, it)?;
        worst_loss = worst_loss.max((lc - lg).abs() / lc.abs());
    }
    let (d, name) = max_diff(&sorted_vars(&cpu.vs), &sorted_vars(&gpu.vs))?;
    ensure!(
        d < 1e-4,
        "CUDA and CPU variables differ by {d:.3e} at {name}"
    );
    ensure!(
        worst_loss < 1e-5,
        "losses differ by {worst_loss:.3e} (relative)"
    );
    Ok(Passed(format!(
        "3 steps: max |Δvariable| {d:.2e} ({name}), loss Δ {worst_loss:.2e} relative"
    )))
}

fn fp16_amp_loss_scaling_on_cuda() -> Result<Outcome> {
    gate!(gpus());
    let cfg = TrainConfig {
        iterations: 10,
        batch_size: 2,
        lr: 0.01,
        progress: false,
        seed: 3,
        device: Device::Cuda(0),
        // Gradients well above 1: times a scale of f32::MAX they overflow in fp16.
        loss_weights: [1000.0; 3],
        grad_clip_norm: Some(10.0),
        ..TrainConfig::default()
    };
    let mut t = Trainer::new(&tiny_spec(5), cfg)?;
    t.model.head.dropout = false;
    let amp = Amp::new(Precision::Fp16, Device::Cuda(0))?.force_scaler(GradScalerConfig {
        init_scale: f32::MAX as f64,
        backoff_factor: 2f64.powi(-111),
        ..GradScalerConfig::default()
    });
    t.enable_amp(amp);
    let (images, masks) = data(2);
    let (images, masks) = (
        images.to_device(Device::Cuda(0)),
        masks.to_device(Device::Cuda(0)),
    );
    let before = sorted_vars(&t.vs);
    let s0 = t.step_accumulated(&[(&images, &masks)], 0)?;
    ensure!(s0.skipped, "step 0 with scale f32::MAX was applied: {s0:?}");
    ensure!(s0.loss.is_finite(), "the unscaled loss is finite: {s0:?}");
    let scale = s0.loss_scale.context("a loss scale")?;
    ensure!(scale < f32::MAX as f64, "the scale backed off: {scale}");
    let trainable: Vec<String> =
        t.vs.variables()
            .into_iter()
            .filter(|(_, v)| v.requires_grad())
            .map(|(n, _)| n)
            .collect();
    let after = sorted_vars(&t.vs);
    for ((n, a), (_, b)) in before.iter().zip(&after) {
        if trainable.contains(n) {
            ensure!(a.equal(b), "{n} changed on a skipped step");
        }
    }
    let mut losses = Vec::new();
    for it in 1..6 {
        let s = t.step_accumulated(&[(&images, &masks)], it)?;
        ensure!(!s.skipped, "step {it} skipped again: {s:?}");
        ensure!(s.loss.is_finite(), "step {it}: loss {}", s.loss);
        losses.push(s.loss);
    }
    let (d, _) = max_diff(&after, &sorted_vars(&t.vs))?;
    ensure!(d > 0.0, "the applied steps moved no weight");
    Ok(Passed(format!(
        "step 0 skipped (scale -> {scale:.3e}), steps 1-5 applied, losses {losses:.3?}"
    )))
}

fn pam_sdpa_memory_on_cuda_768() -> Result<Outcome> {
    gate!(gpus());
    set_cuda_allow_tf32(false)?;
    let dev = Device::Cuda(0);
    // 768 crop, output stride 8: 96 x 96 positions; the head's inter channels 512.
    let (b, c, side) = (2i64, 512i64, 96i64);
    let n = side * side;
    let vs = nn::VarStore::new(dev);
    let mut pam = Pam::new(&vs.root(), c, c / 8);
    tch::no_grad(|| {
        let _ = pam.gamma.fill_(0.5);
    });
    tch::manual_seed(1);
    let x = Tensor::randn([b, c, side, side], (Kind::Float, dev)).set_requires_grad(true);
    let mut run = |attention: AttentionImpl| -> Result<(u64, Tensor)> {
        pam.attention = attention;
        tch::Cuda::synchronize(0);
        cuda_peak_allocated(0, true)?;
        let y = pam.forward(&x);
        y.sum(Kind::Float).backward();
        tch::Cuda::synchronize(0);
        let peak = cuda_peak_allocated(0, true)?;
        Ok((peak, y.detach().to_device(Device::Cpu)))
    };
    let (explicit, y_explicit) = run(AttentionImpl::Explicit)?;
    let (sdpa, y_sdpa) = run(AttentionImpl::Sdpa)?;
    let energy = (b * n * n * 4) as u64;
    let mib = |v: u64| v as f64 / (1u64 << 20) as f64;
    ensure!(
        explicit >= energy,
        "the explicit form's peak {:.0} MiB is below its N x N energies ({:.0} MiB): \
         the measurement is off",
        mib(explicit),
        mib(energy)
    );
    let scale = y_explicit.abs().max().double_value(&[]);
    let diff = (&y_explicit - &y_sdpa).abs().max().double_value(&[]);
    ensure!(
        diff <= 1e-3 * scale,
        "SDPA and explicit PAM differ by {diff:.3e} (max |y| {scale:.3})"
    );
    ensure!(
        (sdpa as f64) <= explicit as f64 * 1.05,
        "SDPA peak {:.0} MiB above the explicit form's {:.0} MiB",
        mib(sdpa),
        mib(explicit)
    );
    Ok(Passed(format!(
        "peak explicit {:.0} MiB, SDPA {:.0} MiB ({:.2}x), energies alone {:.0} MiB, \
         outputs within {diff:.1e}",
        mib(explicit),
        mib(sdpa),
        explicit as f64 / sdpa.max(1) as f64,
        mib(energy)
    )))
}

const DDP_STEPS: usize = 5;

/// One rank of `nccl_ddp_syncbn_matches_one_process` (this binary, re-executed by the
/// launcher), or the single-process reference when no distributed environment is set.
fn ddp_rank(out: &Path) -> Result<()> {
    set_cuda_allow_tf32(false)?;
    let dist = DistEnv::from_env()?;
    let (rank, world, local) = dist
        .as_ref()
        .map_or((0, 1, 0), |e| (e.rank, e.world_size, e.local_rank));
    let global: usize = std::env::var("SEGTOOL_GPU_GLOBAL_BATCH")?.parse()?;
    let dev = Device::Cuda(local);
    let mut t = trainer(dev, global / world)?;
    let _guard = match &dist {
        Some(env) => {
            let group = Arc::new(segtool_train::dist::ProcessGroup::new(
                &env.group_options(DistBackend::Nccl, Duration::from_secs(120)),
            )?);
            let guard = sync_bn::install(group.clone());
            t.enable_ddp(Ddp::new(group, 0.02))?;
            Some(guard)
        }
        None => None,
    };
    let (images, masks) = data(global as i64);
    let per = (global / world) as i64;
    let mine = (
        images.narrow(0, rank as i64 * per, per).to_device(dev),
        masks.narrow(0, rank as i64 * per, per).to_device(dev),
    );
    let mut losses = Vec::new();
    for it in 0..DDP_STEPS {
        losses.push(t.step_accumulated(&[(&mine.0, &mine.1)], it)?.loss);
    }
    let name = if dist.is_some() {
        format!("rank{rank}")
    } else {
        "single".into()
    };
    t.vs.save(out.join(format!("{name}.safetensors")))?;
    std::fs::write(
        out.join(format!("{name}.losses")),
        serde_json::to_string(&losses)?,
    )?;
    Ok(())
}

fn child(out: &Path, global: usize) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("this test binary"));
    cmd.env(CHILD_VAR, "ddp")
        .env(OUT_VAR, out)
        .env("SEGTOOL_GPU_GLOBAL_BATCH", global.to_string());
    cmd
}

fn nccl_ddp_syncbn_matches_one_process() -> Result<Outcome> {
    let n = gate!(gpus());
    if !DistBackend::Nccl.available() {
        return Ok(Skipped(
            "this build has no NCCL (SEGTOOL_NO_NCCL=1?)".into(),
        ));
    }
    let dir = tempfile::tempdir()?;
    let global = 2 * n;
    let launcher = Launcher::new(LaunchConfig {
        nproc_per_node: n,
        ..LaunchConfig::default()
    })?;
    launcher.run(|_env| {
        let mut cmd = child(dir.path(), global);
        for var in [
            "MASTER_ADDR",
            "MASTER_PORT",
            "WORLD_SIZE",
            "RANK",
            "LOCAL_RANK",
        ] {
            cmd.env_remove(var);
        }
        cmd
    })?;
    let mut single = child(dir.path(), global);
    for var in [
        "MASTER_ADDR",
        "MASTER_PORT",
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
    ] {
        single.env_remove(var);
    }
    let status = single.status()?;
    ensure!(
        status.success(),
        "single-process reference failed: {status}"
    );
    let read = |name: &str| -> Result<Vec<(String, Tensor)>> {
        let mut v = Tensor::read_safetensors(dir.path().join(format!("{name}.safetensors")))?;
        v.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(v.into_iter()
            .map(|(n, t)| (n, t.to_kind(Kind::Double)))
            .collect())
    };
    let reference = read("single")?;
    let rank0 = read("rank0")?;
    for r in 1..n {
        let (d, name) = max_diff(&rank0, &read(&format!("rank{r}"))?)?;
        ensure!(
            d == 0.0,
            "rank {r} diverged from rank 0 by {d:.3e} at {name}"
        );
    }
    let (d, name) = max_diff(&reference, &rank0)?;
    ensure!(
        d < 1e-4,
        "NCCL DDP + SyncBN over {n} GPU(s) differs from one process by {d:.3e} at {name}"
    );
    Ok(Passed(format!(
        "{n} rank(s) x 2 images vs 1 process x {global}: max |Δ| {d:.2e} ({name}) after \
         {DDP_STEPS} steps{}",
        if n == 1 {
            " (one GPU: the NCCL path runs, the split is trivial)"
        } else {
            ""
        }
    )))
}

// --- ONNX Runtime / TensorRT ------------------------------------------------------------

const SIDE: u32 = 64;

/// The tiny DANet exported for `target` (static 64x64 input), in `dir`.
fn export(dir: &Path, target: &str) -> Result<PathBuf> {
    let (_, _, ckpt) = common::tiny_checkpoint(dir, 5);
    let onnx = dir.join(format!("m.{target}.onnx"));
    let side = format!("{SIDE}x{SIDE}");
    let out = segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&onnx),
        "--target",
        target,
        "--input-size",
        &side,
    ]);
    ensure!(
        out.status.success(),
        "segtool export --target {target}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(onnx)
}

fn images() -> Vec<image::RgbImage> {
    (0..4).map(|s| test_image(s, SIDE, SIDE)).collect()
}

fn segment(engine: OrtEngine, model: &Path) -> Result<Vec<Segmentation>> {
    let spec = segtool_runtime::load_spec(model)?;
    let mut seg = Segmenter::from_engine(Box::new(engine), spec).with_logits(true);
    Ok(seg.segment_batch(&images())?)
}

/// (max |logit difference| / max |reference logit|, argmax agreement).
fn compare(reference: &[Segmentation], other: &[Segmentation]) -> Result<(f64, f64)> {
    let (mut diff, mut scale) = (0.0f64, 0.0f64);
    for (a, b) in reference.iter().zip(other) {
        let (a, b) = (
            a.logits.as_ref().context("reference logits")?,
            b.logits.as_ref().context("logits")?,
        );
        ensure!(a.dim() == b.dim(), "{:?} vs {:?}", a.dim(), b.dim());
        for (x, y) in a.iter().zip(b.iter()) {
            diff = diff.max((x - y).abs() as f64);
            scale = scale.max(x.abs() as f64);
        }
    }
    Ok((diff / scale.max(1e-12), common::agreement(reference, other)))
}

fn cpu_reference(model: &Path) -> Result<Vec<Segmentation>> {
    let engine = OrtEngine::open(model, &OrtOptions::new().with_provider(Provider::Cpu))?;
    segment(engine, model)
}

fn ort_cuda_matches_cpu() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "ort")?;
    let engine = gate!(strict_engine(&model, Provider::Cuda { device_id: 0 }));
    ensure!(
        engine.provider() == "cuda:0",
        "provider {}",
        engine.provider()
    );
    let (rel, agree) = compare(&cpu_reference(&model)?, &segment(engine, &model)?)?;
    ensure!(rel <= 1e-2, "CUDA logits off by {rel:.3e} of max |logit|");
    ensure!(agree >= 0.995, "argmax agreement {agree:.4}");
    Ok(Passed(format!(
        "max |Δlogit| {rel:.2e} of max |logit|, argmax agreement {:.2}%",
        agree * 100.0
    )))
}

fn calibration_cache(dir: &Path, model: &Path) -> Result<PathBuf> {
    let calib = dir.join("calib");
    std::fs::create_dir_all(&calib)?;
    for s in 0..8 {
        test_image(100 + s, SIDE, SIDE).save(calib.join(format!("c{s}.png")))?;
    }
    let cache = dir.join("m.calib");
    let out = segtool(&[
        "calibrate",
        "--model",
        p(model),
        "--images",
        p(&calib),
        "--samples",
        "8",
        "-o",
        p(&dir.join("m.int8.onnx")),
        "--trt-cache",
        p(&cache),
        "--latency-runs",
        "1",
        "--quiet",
    ]);
    ensure!(
        out.status.success(),
        "segtool calibrate: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(cache)
}

fn ort_tensorrt_fp32_fp16_int8_match_cpu() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "tensorrt")?;
    let trt = |o: TensorRtOptions| Provider::TensorRtWith(o);
    let fp32 = gate!(strict_engine(&model, trt(TensorRtOptions::new(0))));
    let reference = cpu_reference(&model)?;
    let mut report = Vec::new();
    let (rel, agree) = compare(&reference, &segment(fp32, &model)?)?;
    ensure!(rel <= 1e-2, "TensorRT fp32 logits off by {rel:.3e}");
    ensure!(agree >= 0.995, "TensorRT fp32 agreement {agree:.4}");
    report.push(format!("fp32 {rel:.1e}/{:.2}%", agree * 100.0));

    let fp16 = strict_engine(&model, trt(TensorRtOptions::new(0).with_fp16(true)))
        .map_err(|_| anyhow::anyhow!("the fp32 TensorRT engine built but the fp16 one did not"))?;
    let (rel, agree) = compare(&reference, &segment(fp16, &model)?)?;
    ensure!(rel <= 5e-2, "TensorRT fp16 logits off by {rel:.3e}");
    ensure!(agree >= 0.98, "TensorRT fp16 agreement {agree:.4}");
    report.push(format!("fp16 {rel:.1e}/{:.2}%", agree * 100.0));

    let cache = calibration_cache(dir.path(), &model)?;
    let options = TensorRtOptions::new(0).with_tensorrt_calibration_cache(&cache);
    let int8 = OrtEngine::open(
        &model,
        &OrtOptions::new().with_provider(trt(options)).strict(true),
    )
    .context("TensorRT INT8 with segtool's calibration cache")?;
    let (rel, agree) = compare(&reference, &segment(int8, &model)?)?;
    ensure!(agree >= 0.90, "TensorRT INT8 agreement {agree:.4}");
    report.push(format!("int8 {rel:.1e}/{:.2}%", agree * 100.0));
    Ok(Passed(format!(
        "max |Δlogit| of max |logit| / argmax agreement vs ORT CPU: {}",
        report.join(", ")
    )))
}

fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<std::io::Result<_>>()?;
    v.sort();
    Ok(v)
}

fn tensorrt_engine_cache_reuse() -> Result<Outcome> {
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "tensorrt")?;
    let cache = dir.path().join("trt-cache");
    let options = TensorRtOptions::new(0)
        .with_engine_cache_dir(&cache)
        .with_timing_cache_dir(&cache);
    let input = segtool_runtime::normalise_batch(&images(), &segtool_runtime::load_spec(&model)?)?;
    let session = || -> std::result::Result<(f64, OrtEngine), Outcome> {
        let start = Instant::now();
        let mut engine = strict_engine(&model, Provider::TensorRtWith(options.clone()))?;
        engine
            .run(input.view())
            .map_err(|e| Skipped(format!("a TensorRT run failed: {e}")))?;
        Ok((start.elapsed().as_secs_f64(), engine))
    };
    let (first, engine) = gate!(session());
    drop(engine);
    let built = files_in(&cache)?;
    ensure!(
        !built.is_empty(),
        "no engine was cached in {}",
        cache.display()
    );
    let (second, engine) = match session() {
        Ok(v) => v,
        Err(_) => bail!("the second TensorRT session failed where the first worked"),
    };
    drop(engine);
    let after = files_in(&cache)?;
    ensure!(
        after == built,
        "the second session changed the cache: {built:?} -> {after:?}"
    );
    ensure!(
        second < 0.5 * first,
        "the second session took {second:.2} s against {first:.2} s: the cache was not used"
    );
    Ok(Passed(format!(
        "first session {first:.2} s, second {second:.2} s ({:.0}%), {} cache file(s)",
        100.0 * second / first,
        built.len()
    )))
}

fn infer_devices_all_gpus() -> Result<Outcome> {
    let n = gate!(gpus());
    let dir = tempfile::tempdir()?;
    let model = export(dir.path(), "ort")?;
    drop(gate!(strict_engine(
        &model,
        Provider::Cuda { device_id: 0 }
    )));
    let input = dir.path().join("imgs");
    std::fs::create_dir_all(&input)?;
    for s in 0..(4 * n as u32).max(8) {
        test_image(s, SIDE, SIDE).save(input.join(format!("i{s:03}.png")))?;
    }
    let labels = |name: &str, extra: &[&str]| -> Result<(Vec<Vec<u8>>, String)> {
        let out = dir.path().join(name);
        let mut args = vec![
            "infer",
            "--model",
            p(&model),
            "--input",
            p(&input),
            "--out",
            p(&out),
            "--labels",
        ];
        args.extend_from_slice(extra);
        let o = segtool(&args);
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        ensure!(o.status.success(), "segtool {}: {stderr}", args.join(" "));
        let mut files = Vec::new();
        for f in files_in(&out)? {
            if f.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.contains("label"))
            {
                files.push(image::open(&f)?.to_luma8().into_raw());
            }
        }
        ensure!(!files.is_empty(), "no label files in {}", out.display());
        Ok((files, stderr))
    };
    let devices: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    let devices = devices.join(",");
    let (gpu, stderr) = labels("gpu", &["--devices", &devices, "--strict"])?;
    for i in 0..n {
        ensure!(
            stderr.contains(&format!("on cuda:{i}")),
            "no session on cuda:{i}: {stderr}"
        );
    }
    let (cpu, _) = labels("cpu", &["--engine", "ort", "--threads", "1"])?;
    ensure!(
        gpu.len() == cpu.len(),
        "{} vs {} label files",
        gpu.len(),
        cpu.len()
    );
    let (mut same, mut all) = (0usize, 0usize);
    for (a, b) in gpu.iter().zip(&cpu) {
        same += a.iter().zip(b).filter(|(x, y)| x == y).count();
        all += a.len().max(b.len());
    }
    let agree = same as f64 / all.max(1) as f64;
    ensure!(
        agree >= 0.995,
        "--devices labels agree with CPU on {agree:.4}"
    );
    Ok(Passed(format!(
        "{n} GPU session(s), {} images, label agreement with CPU {:.2}%",
        gpu.len(),
        agree * 100.0
    )))
}
