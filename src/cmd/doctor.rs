//! `segtool doctor [--json]`: what this build and this machine can do. Each line is a
//! check that ran now (segtool_train::env_report, segtool_runtime::expert::env_report); the GPU
//! summary says which GPU features are therefore off. Always exits 0.
//!
//! JSON (stable keys; see the two reports' `to_json` for their own):
//! - `segtool_version` (string)
//! - `train`: segtool_train's report (`libtorch`, `cuda`, `nccl`, `gloo`), or `null` in a
//!   build without the `train` feature
//! - `runtime`: segtool_runtime's report (`onnxruntime`, `tensorrt_library`, `tract`)
//! - `driver`: the NVIDIA driver against libtorch's CUDA build (`present`, `release`,
//!   `cuda_version`, `required_cuda`, `suits_build`, `advice`; see
//!   segtool_train::env_report::driver), or `null` without the `train` feature
//! - `gpu`: `available` (bool: libtorch sees a CUDA device, or ONNX Runtime's CUDA provider
//!   registers), `device_count` (int), `features` (array of `name` string, `on` bool,
//!   `why_off` string|null), for `cuda_training`, `fp16_amp`, `nccl`, `ort_cuda`,
//!   `ort_tensorrt`, `multi_gpu_infer`

use anyhow::Result;
use serde_json::{json, Value};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Print the report as JSON (stable keys; book/src/gpu.md).
    #[arg(long)]
    pub json: bool,
}

struct Feature {
    name: &'static str,
    what: &'static str,
    why_off: Option<String>,
}

pub fn run(args: Args) -> Result<()> {
    #[cfg(feature = "train")]
    let train = Some(segtool_train::env_report());
    #[cfg(not(feature = "train"))]
    let train: Option<()> = None;
    let runtime = segtool_runtime::expert::env_report();

    #[cfg(feature = "train")]
    let (torch_devices, cuda_reason, nccl_why) = {
        let t = train.as_ref().expect("train report");
        (
            t.cuda.devices.len(),
            t.cuda.reason.clone(),
            t.nccl.reason.clone(),
        )
    };
    #[cfg(not(feature = "train"))]
    let (torch_devices, cuda_reason, nccl_why): (usize, Option<String>, Option<String>) = (
        0,
        Some("this build has no `train` feature (no libtorch)".into()),
        Some("this build has no `train` feature (no libtorch)".into()),
    );

    let features = gpu_features(&runtime, torch_devices, cuda_reason, nccl_why);
    // multi_gpu_infer is on exactly when ONNX Runtime's CUDA provider registers.
    let ort_cuda = features
        .iter()
        .any(|f| f.name == "ort_cuda" && f.why_off.is_none());
    let gpu_available = torch_devices > 0 || ort_cuda;

    if args.json {
        #[cfg(feature = "train")]
        let (train_json, driver_json) = train
            .as_ref()
            .map(|t| (t.to_json(), t.driver.to_json()))
            .unwrap_or((Value::Null, Value::Null));
        #[cfg(not(feature = "train"))]
        let (train_json, driver_json) = {
            let _ = train;
            (Value::Null, Value::Null)
        };
        let report = json!({
            "segtool_version": env!("CARGO_PKG_VERSION"),
            "train": train_json,
            "runtime": runtime.to_json(),
            "driver": driver_json,
            "gpu": {
                "available": gpu_available,
                "device_count": torch_devices,
                "features": features.iter().map(|f| json!({
                    "name": f.name,
                    "on": f.why_off.is_none(),
                    "why_off": f.why_off,
                })).collect::<Vec<_>>(),
            },
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }

    let line = |label: &str, text: String| println!("{label:<14}{text}");
    println!("segtool {} doctor", env!("CARGO_PKG_VERSION"));
    #[cfg(feature = "train")]
    if let Some(t) = &train {
        print_training(t, &line);
    }
    #[cfg(not(feature = "train"))]
    line("libtorch", "not in this build (no `train` feature)".into());

    print_runtime(&runtime, &line);
    println!();
    if gpu_available {
        println!("GPU: {torch_devices} CUDA device(s) visible to libtorch.");
    } else {
        println!("GPU: none on this machine (no CUDA device, no CUDA provider).");
    }
    let off: Vec<&Feature> = features.iter().filter(|f| f.why_off.is_some()).collect();
    if off.is_empty() {
        println!("Every GPU feature is on.");
    } else {
        println!("Off therefore:");
        for f in off {
            println!("  - {}", f.what);
        }
    }
    Ok(())
}

/// Each GPU feature, and why it is off when it is.
fn gpu_features(
    runtime: &segtool_runtime::expert::env_report::RuntimeEnvReport,
    torch_devices: usize,
    cuda_reason: Option<String>,
    nccl_why: Option<String>,
) -> Vec<Feature> {
    let ort = &runtime.onnxruntime;
    let ep_why =
        |p: &Option<segtool_runtime::expert::env_report::ProviderCheck>| -> Option<String> {
            match p {
                Some(p) if p.registers => None,
                Some(p) => Some(
                    p.reason
                        .clone()
                        .unwrap_or_else(|| "does not register".into()),
                ),
                None if !ort.compiled => Some("this build has no `ort` feature".into()),
                None => Some("no ONNX Runtime library loads".into()),
            }
        };
    let cuda_why = (torch_devices == 0).then(|| {
        format!(
            "libtorch sees no CUDA device ({})",
            cuda_reason.clone().unwrap_or_default()
        )
    });
    let ort_cuda_why = ep_why(&ort.cuda);
    vec![
        Feature {
            name: "cuda_training",
            what: "train/eval on CUDA (--device cuda)",
            why_off: cuda_why.clone(),
        },
        Feature {
            name: "fp16_amp",
            what: "fp16 autocast with loss scaling (optim.precision = \"fp16\")",
            why_off: cuda_why.clone(),
        },
        Feature {
            name: "nccl",
            what: "DDP over NCCL (--dist-backend nccl)",
            why_off: nccl_why,
        },
        Feature {
            name: "ort_cuda",
            what: "ONNX Runtime CUDA provider (--providers cuda)",
            why_off: ort_cuda_why.clone(),
        },
        Feature {
            name: "ort_tensorrt",
            what: "ONNX Runtime TensorRT provider (--providers tensorrt, fp16/INT8 engines)",
            why_off: ep_why(&ort.tensorrt),
        },
        Feature {
            name: "multi_gpu_infer",
            what: "batching over GPUs (infer --devices)",
            why_off: ort_cuda_why.clone(),
        },
    ]
}

/// libtorch, the driver, CUDA devices, cuDNN, NCCL and gloo, a line each.
#[cfg(feature = "train")]
fn print_training(t: &segtool_train::TrainEnvReport, line: &dyn Fn(&str, String)) {
    let l = &t.libtorch;
    let build = match (&l.cuda_version, &l.cudnn_version) {
        (Some(c), Some(d)) => format!("CUDA {c} / cuDNN {d} build"),
        (Some(c), None) => format!("CUDA {c} build, no cuDNN"),
        _ => "CPU-only build".into(),
    };
    line(
        "libtorch",
        format!("{} ({build}) at {}", l.version, l.lib_dir),
    );
    line("driver", driver_line(&t.driver));
    if t.cuda.devices.is_empty() {
        line(
            "CUDA",
            format!(
                "no device: {}",
                t.cuda.reason.as_deref().unwrap_or("none found")
            ),
        );
    } else {
        for d in &t.cuda.devices {
            line(
                &format!("CUDA {}", d.index),
                format!(
                    "{} ({:.1} GiB, compute capability {})",
                    d.name,
                    d.memory_bytes as f64 / (1u64 << 30) as f64,
                    d.compute_capability
                ),
            );
        }
    }
    line(
        "cuDNN",
        if t.cuda.cudnn_available {
            "available".into()
        } else {
            "not usable (needs a CUDA device)".into()
        },
    );
    let n = &t.nccl;
    line(
        "NCCL",
        if n.built {
            format!(
                "built in (headers {}, library {}{}); {}",
                n.header_version.as_deref().unwrap_or("?"),
                n.library_version.as_deref().unwrap_or("not loadable"),
                n.library_dir
                    .as_deref()
                    .map(|d| format!(" from {d}"))
                    .unwrap_or_default(),
                match &n.reason {
                    None => "usable".to_string(),
                    Some(r) => format!("not usable: {r}"),
                }
            )
        } else {
            format!("not built: {}", n.reason.as_deref().unwrap_or(""))
        },
    );
    line(
        "gloo / c10d",
        format!(
            "{}: {} (gloo headers {})",
            if t.gloo.all_reduce_ok { "ok" } else { "FAILED" },
            t.gloo.detail,
            t.gloo.headers
        ),
    );
}

/// ONNX Runtime (library, providers), TensorRT and tract, a line each.
fn print_runtime(
    runtime: &segtool_runtime::expert::env_report::RuntimeEnvReport,
    line: &dyn Fn(&str, String),
) {
    let ort = &runtime.onnxruntime;
    if !ort.compiled {
        line(
            "ONNX Runtime",
            "not in this build (no `ort` feature)".into(),
        );
    } else if let Some(lib) = &ort.library {
        line(
            "ONNX Runtime",
            format!("{} at {lib}", ort.version.as_deref().unwrap_or("?")),
        );
        line("  providers", ort.available_providers.join(", "));
        for (label, p) in [("  CUDA EP", &ort.cuda), ("  TensorRT EP", &ort.tensorrt)] {
            if let Some(p) = p {
                line(
                    label,
                    if p.registers {
                        "registers".to_string()
                    } else {
                        format!(
                            "does not register{}: {}",
                            if p.in_build {
                                ""
                            } else {
                                " (not in this build)"
                            },
                            p.reason.as_deref().unwrap_or("")
                        )
                    },
                );
            }
        }
    } else {
        line(
            "ONNX Runtime",
            format!("no library loads (tried: {})", ort.tried.join("; ")),
        );
    }
    let trt = &runtime.tensorrt_library;
    line(
        "TensorRT",
        if trt.found {
            format!(
                "{} {} at {}",
                trt.soname,
                trt.version.as_deref().unwrap_or("?"),
                trt.path.as_deref().unwrap_or("?")
            )
        } else {
            format!(
                "{} not found: {}",
                trt.soname,
                trt.reason.as_deref().unwrap_or("")
            )
        },
    );
    line(
        "tract",
        if runtime.tract {
            "compiled in (pure Rust, CPU)".into()
        } else {
            "not in this build".into()
        },
    );
}

/// "580.65.06 (supports CUDA 13.0): suits this CUDA 13.0 build", or what is wrong and the fix.
#[cfg(feature = "train")]
fn driver_line(d: &segtool_train::env_report::driver::Driver) -> String {
    use segtool_train::env_report::{
        cudart_version as cuda,
        driver::{Probe, Verdict},
    };
    let Probe::Present {
        cuda_version,
        release,
    } = &d.probe
    else {
        return d.advice.clone().unwrap_or_default();
    };
    let found = format!(
        "{} (supports CUDA {})",
        release.as_deref().unwrap_or("release unknown"),
        cuda_version.map(cuda).as_deref().unwrap_or("?")
    );
    let build = d.required_cuda.map(cuda).unwrap_or_default();
    match (d.verdict, &d.advice) {
        (Verdict::Suits, _) => format!("{found}: suits this CUDA {build} build"),
        (Verdict::TooOld, Some(a)) => format!("{found}: TOO OLD: {a}"),
        (_, Some(a)) => format!("{found}: {a}"),
        (_, None) => found,
    }
}
