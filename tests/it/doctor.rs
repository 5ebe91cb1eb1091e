//! `segtool doctor`: its JSON keys and their types, the plain "no GPU" text where libtorch
//! sees no CUDA device, and the error of `segtool train --dist-backend nccl` on a machine
//! without one (NCCL is built in, the device is what is missing). On a machine without an
//! NVIDIA driver (no /proc/driver/nvidia, no device), the driver is reported absent.
#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]

use crate::common;

use common::segtool;
use serde_json::Value;

fn doctor_json() -> Value {
    let out = segtool(&["doctor", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("doctor --json prints JSON")
}

fn get<'a>(v: &'a Value, path: &str) -> &'a Value {
    path.split('.').fold(v, |v, k| {
        v.get(k)
            .unwrap_or_else(|| panic!("doctor --json has no key {path} (at {k}): {v}"))
    })
}

fn is_str_or_null(v: &Value) -> bool {
    v.is_string() || v.is_null()
}

/// No NVIDIA kernel module and no device: this development machine.
fn no_nvidia_driver() -> bool {
    !std::path::Path::new("/proc/driver/nvidia").exists() && tch::Cuda::device_count() == 0
}

#[test]
fn doctor_json_has_its_keys_with_their_types() {
    let r = doctor_json();
    assert!(get(&r, "segtool_version").is_string());
    for key in ["version", "lib_dir"] {
        assert!(
            get(&r, &format!("train.libtorch.{key}")).is_string(),
            "{key}"
        );
    }
    assert!(get(&r, "train.libtorch.cuda_build").is_boolean());
    for key in ["cuda_version", "cudnn_version"] {
        assert!(is_str_or_null(get(&r, &format!("train.libtorch.{key}"))));
    }
    assert_eq!(get(&r, "train.libtorch.version"), "2.13.0");

    let cuda_available = get(&r, "train.cuda.available").as_bool().unwrap();
    let count = get(&r, "train.cuda.device_count").as_u64().unwrap();
    check_cuda(&r, cuda_available, count);
    // NCCL is compiled into every default build; usable only with a GPU.
    assert_eq!(get(&r, "train.nccl.built"), true);
    for key in ["header_version", "library_version", "library_dir"] {
        assert!(get(&r, &format!("train.nccl.{key}")).is_string(), "{key}");
    }
    assert_eq!(
        get(&r, "train.nccl.header_version"),
        get(&r, "train.nccl.library_version")
    );
    assert_eq!(
        get(&r, "train.nccl.usable").as_bool().unwrap(),
        cuda_available
    );
    assert!(is_str_or_null(get(&r, "train.nccl.reason")));

    assert!(get(&r, "train.gloo.headers").is_string());
    assert_eq!(
        get(&r, "train.gloo.all_reduce_ok"),
        true,
        "{}",
        get(&r, "train.gloo.detail")
    );
    assert!(get(&r, "train.gloo.detail").is_string());

    let ort_cuda = check_runtime(&r);
    check_driver(&r, cuda_available);
    assert_eq!(
        get(&r, "gpu.available").as_bool().unwrap(),
        cuda_available || ort_cuda
    );
    assert_eq!(get(&r, "gpu.device_count").as_u64().unwrap(), count);
    let features = get(&r, "gpu.features").as_array().unwrap();
    let names: Vec<&str> = features
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "cuda_training",
            "fp16_amp",
            "nccl",
            "ort_cuda",
            "ort_tensorrt",
            "multi_gpu_infer"
        ]
    );
    for f in features {
        let on = f["on"].as_bool().unwrap();
        assert_eq!(f["why_off"].is_null(), on, "{f}");
    }
    if !cuda_available {
        assert!(features[..3].iter().all(|f| f["on"] == false));
    }
}

/// libtorch's CUDA devices, as tch sees them in this process.
fn check_cuda(r: &Value, cuda_available: bool, count: u64) {
    let devices = get(r, "train.cuda.devices").as_array().unwrap();
    assert_eq!(devices.len() as u64, count);
    for d in devices {
        assert!(d["index"].is_u64() && d["name"].is_string());
        assert!(d["memory_bytes"].is_u64() && d["compute_capability"].is_string());
    }
    assert!(is_str_or_null(get(r, "train.cuda.reason")));
    assert!(get(r, "train.cuda.cudnn_available").is_boolean());
    // libtorch decides: the report agrees with tch in this process.
    let tch_devices = tch::Cuda::device_count();
    assert_eq!(count as i64, tch_devices);
    assert_eq!(cuda_available, tch_devices > 0);
    if !cuda_available {
        assert!(
            get(r, "train.cuda.reason").is_string(),
            "a reason for no GPU"
        );
    }
}

/// ONNX Runtime's library and providers, TensorRT's library and tract; returns whether
/// ONNX Runtime's CUDA provider registers.
fn check_runtime(r: &Value) -> bool {
    let ort = get(r, "runtime.onnxruntime");
    assert_eq!(ort["compiled"], true);
    assert!(ort["loaded"].is_boolean() && is_str_or_null(&ort["library"]));
    assert!(ort["tried"].is_array() && is_str_or_null(&ort["version"]));
    let providers = ort["available_providers"].as_array().unwrap();
    let mut ort_cuda = false;
    if ort["loaded"] == true {
        // The set-up's wheel is 1.31.1 (CPU or GPU build).
        assert_eq!(ort["version"], "1.31.1");
        assert!(providers.iter().any(|p| p == "CPUExecutionProvider"));
        for ep in ["cuda", "tensorrt"] {
            let p = &ort[ep];
            assert!(p["name"].is_string() && p["in_build"].is_boolean());
            assert!(p["registers"].is_boolean() && is_str_or_null(&p["reason"]));
            if p["registers"] == false {
                assert!(p["reason"].is_string(), "{ep}: a reason");
            }
        }
        ort_cuda = ort["cuda"]["registers"] == true;
    }
    let trt = get(r, "runtime.tensorrt_library");
    assert!(trt["soname"].is_string() && trt["found"].is_boolean());
    for key in ["path", "version", "reason"] {
        assert!(is_str_or_null(&trt[key]), "{key}");
    }
    assert_eq!(get(r, "runtime.tract.compiled"), true);

    ort_cuda
}

/// The NVIDIA driver against the CUDA runtime libtorch was built with.
fn check_driver(r: &Value, cuda_available: bool) {
    let driver = get(r, "driver");
    assert!(driver["present"].is_boolean(), "{driver}");
    for key in ["release", "cuda_version", "required_cuda", "advice"] {
        assert!(is_str_or_null(&driver[key]), "{key}: {driver}");
    }
    assert!(driver["suits_build"].is_boolean() || driver["suits_build"].is_null());
    // The driver is compared with the CUDA runtime libtorch was built with.
    assert_eq!(
        driver["required_cuda"],
        get(r, "train.libtorch.cuda_version").clone()
    );
    if no_nvidia_driver() {
        assert_eq!(driver["present"], false, "{driver}");
        assert_eq!(driver["suits_build"], Value::Null, "{driver}");
        let advice = driver["advice"].as_str().unwrap();
        assert!(
            advice.starts_with("no NVIDIA driver installed (libcuda.so.1"),
            "{advice}"
        );
        assert!(advice.contains("R580 (580.65.06) or later"), "{advice}");
    } else if cuda_available {
        // libtorch reaches a device, so the driver it loaded suits the build.
        assert_eq!(driver["present"], true, "{driver}");
        assert_eq!(driver["suits_build"], true, "{driver}");
    }
}

#[test]
fn doctor_text_says_plainly_what_is_off_without_a_gpu() {
    let out = segtool(&["doctor"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    eprintln!("{text}");
    for label in [
        "libtorch",
        "driver",
        "CUDA",
        "NCCL",
        "gloo / c10d",
        "ONNX Runtime",
        "TensorRT",
        "tract",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(label)),
            "no {label} line"
        );
    }
    assert!(text.contains("2.13.0"));
    if tch::Cuda::device_count() == 0 {
        assert!(text.contains("GPU: none on this machine"), "{text}");
        assert!(text.contains("Off therefore:"), "{text}");
        assert!(text.contains("DDP over NCCL"), "{text}");
        assert!(text.contains("CUDA provider"), "{text}");
    }
    if no_nvidia_driver() {
        let driver = text.lines().find(|l| l.starts_with("driver")).unwrap();
        assert!(driver.contains("no NVIDIA driver installed"), "{driver}");
    }
}

/// NCCL is in the build, so without a GPU `--dist-backend nccl` names the missing CUDA
/// device, not a missing NCCL, and fails before any rendezvous.
#[test]
fn train_with_nccl_without_a_gpu_names_the_missing_device() {
    if tch::Cuda::device_count() > 0 {
        return segtool_testkit::skipped(
            "this machine has a GPU: `make test-gpu` runs NCCL for real",
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let port = segtool_train::distributed::launch::free_port().unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(["train", "--dist-backend", "nccl", "--stop-at", "1"])
        .current_dir(dir.path())
        .env("WORLD_SIZE", "1")
        .env("RANK", "0")
        .env("LOCAL_RANK", "0")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("no CUDA device"), "{stderr}");
    assert!(!stderr.contains("has no NCCL"), "{stderr}");
}
