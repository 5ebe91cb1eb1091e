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
use segtool_train::dist::{Backend as DistBackend, Ddp, DistEnv, LaunchConfig, Launcher};
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

// The checks, after the `gate!` macro they use (macros are scoped by text order).
mod ort;
mod train;

use ort::*;
use train::*;
