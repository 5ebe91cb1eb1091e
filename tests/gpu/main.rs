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
//!   backs the scale off to 2^10; the following steps apply and stay finite.
//! - `pam_sdpa_memory_on_cuda_768`: PAM at a 768 crop (N = 96 x 96, C = 512), forward and
//!   backward, batch 2: peak CUDA memory of the explicit N x N form against SDPA; SDPA
//!   must not exceed the explicit form (+5%) and the outputs agree within 1e-3 relative.
//! - `nccl_ddp_syncbn_matches_one_process`: one rank per visible GPU (NCCL, SyncBN, DDP),
//!   2 images each, against one process on cuda:0 with the global batch and plain BN: 5
//!   steps, every variable within 1e-4, ranks identical. Needs two or more GPUs (one
//!   rank would average nothing): SKIPPED with that reason on a one-GPU machine.
//! - `ort_cuda_matches_cpu`: ONNX Runtime's CUDA provider (strict) against its CPU provider
//!   on a tiny DANet export: logits within 1e-2 x max|logit| (ONNX Runtime's CUDA provider
//!   uses TF32 by default), argmax agreement >= 99.5%; ONNX Runtime's profile shows every
//!   computing node on CUDAExecutionProvider.
//! - `ort_tensorrt_fp32_fp16_int8_match_cpu`: the TensorRT provider on the `tensorrt`
//!   export (ONNX Attention): fp32 as above; fp16 within 5e-2 x max|logit|, agreement
//!   >= 98%; INT8 with `segtool calibrate --trt-cache`'s calibration cache, agreement
//!   >= 90% and logits that differ from TensorRT fp32's by more than 1e-4 x max|logit|
//!   (else the cache was ignored). Each profile shows every computing node on
//!   TensorrtExecutionProvider.
//!
//! Skip or fail (verdict.rs, unit-tested on any machine by tests/it/gpu_verdicts.rs): a check
//! is SKIPPED only when its capability is absent: no CUDA device, or an ONNX Runtime
//! provider that does not register on a trivial model. Once present, every error is
//! FAILED: a TensorRT parser or engine-build failure, out of memory, a failed run.
//! - `tensorrt_engine_cache_reuse`: two sessions on one engine cache: the second builds in
//!   under half the first's time and adds no engine file.
//! - `infer_devices_all_gpus`: `segtool infer --devices 0,..,N-1 --strict` uses every GPU
//!   and gives the labels of a CPU run (agreement >= 99.5%).

#[path = "../it/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use common::{p, segtool, test_image};
use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_runtime::{
    expert::{Engine, OrtEngine},
    OrtOptions, Provider, TensorRtOptions,
};
use segtool_train::amp::{Amp, GradScalerConfig, Precision};
use segtool_train::distributed::{Backend as DistBackend, Ddp, DistEnv, LaunchConfig, Launcher};
use segtool_train::env_report::{cuda_devices, cuda_peak_allocated, set_cuda_allow_tf32};
use segtool_train::model::attention::{AttentionImpl, Pam};
use segtool_train::{TrainConfig, Trainer};
use tch::{nn, Device, Kind, Tensor};

mod verdict;

use verdict::{gated, run_fails, Outcome, Verdict};
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
        let outcome = verdict::verdict(std::panic::catch_unwind(check));
        let secs = start.elapsed().as_secs_f64();
        match outcome {
            Verdict::Passed(what) => {
                passed += 1;
                println!("test {name} ... PASSED in {secs:.1} s ({what})");
            }
            Verdict::Skipped(reason) => {
                skipped += 1;
                println!("test {name} ... SKIPPED: {reason}");
            }
            Verdict::Failed(why) => {
                failed += 1;
                println!("test {name} ... FAILED in {secs:.1} s: {why}");
            }
        }
    }
    println!("\n{passed} passed, {failed} failed, {skipped} skipped");
    let require = std::env::var("SEGTOOL_GPU_REQUIRE").as_deref() == Ok("1");
    if run_fails(failed, skipped, require) {
        std::process::exit(1);
    }
}

// --- gates ------------------------------------------------------------------------------

/// The CUDA devices libtorch sees, or the skip reason (with what `segtool doctor` finds
/// of the driver: an absent one, or one too old for this CUDA build).
fn gpus() -> std::result::Result<usize, Outcome> {
    let why = match cuda_devices() {
        Ok(d) if !d.is_empty() => return Ok(d.len()),
        Ok(_) => "no CUDA device visible to libtorch".to_string(),
        Err(why) => format!("no CUDA device visible to libtorch ({why})"),
    };
    let driver = segtool_train::env_report::driver_report();
    Err(Skipped(match driver.advice {
        Some(advice) => format!("{why}; driver: {advice}"),
        None => why,
    }))
}

macro_rules! gate {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(outcome) => return Ok(outcome),
        }
    };
}

/// Whether `provider`'s kind registers at all, on a trivial model with its plain
/// options (as `segtool doctor` probes it): the only ground for skipping an ONNX Runtime
/// check. Options of the check itself (fp16, a calibration cache, an engine cache) are
/// not part of the probe, so their failures stay failures.
fn provider_registers(provider: &Provider) -> std::result::Result<(), String> {
    let plain = match provider {
        Provider::Cuda { device_id } => Provider::Cuda {
            device_id: *device_id,
        },
        Provider::CudaWith(o) => Provider::Cuda {
            device_id: o.device_id,
        },
        Provider::TensorRt { device_id, .. } => Provider::TensorRt {
            device_id: *device_id,
            fp16: false,
            cache_dir: None,
        },
        Provider::TensorRtWith(o) => Provider::TensorRt {
            device_id: o.device_id,
            fp16: false,
            cache_dir: None,
        },
        Provider::Cpu => return Ok(()),
    };
    segtool_runtime::expert::doctor::provider_registers(plain).map_err(|why| {
        format!(
            "{why}; the GPU packages come with the GPU venv, which `make test-gpu` sets up \
             (book/src/gpu.md)"
        )
    })
}

/// Opens `model` with `provider` and no CPU fallback. Skipped only when the provider does
/// not register at all ([`provider_registers`]); a provider that registers and then fails
/// on this model (parser, engine build, out of memory) is an error: the check FAILS.
fn strict_engine(
    model: &Path,
    provider: Provider,
) -> Result<std::result::Result<OrtEngine, Outcome>> {
    strict_engine_with(
        model,
        OrtOptions::new()
            .with_provider(provider.clone())
            .strict(true),
        &provider,
    )
}

/// [`strict_engine`] with session options of the check's own (profiling, say).
fn strict_engine_with(
    model: &Path,
    options: OrtOptions,
    provider: &Provider,
) -> Result<std::result::Result<OrtEngine, Outcome>> {
    gated(
        || provider_registers(provider),
        &format!("ONNX Runtime's {provider} provider"),
        || OrtEngine::open(model, &options).map_err(anyhow::Error::from),
    )
}

// The checks, after the `gate!` macro they use (macros are scoped by text order).
mod ort;
mod train;

use ort::*;
use train::*;
