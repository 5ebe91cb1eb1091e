//! What this build of segtool-train and this machine can do, for `segtool doctor`: the
//! libtorch it links (version, the CUDA and cuDNN versions it was built with), the CUDA
//! devices visible now (name, memory, compute capability) or why there are none, NCCL
//! (built into the c10d shim? header and library versions) and the gloo shim (a one-rank
//! process group that all-reduces a tensor), and the NVIDIA driver against the CUDA build
//! ([`driver`]). Every field comes from a check that ran in this process; nothing is
//! printed. [`TrainEnvReport::to_json`] gives the stable keys documented there.

use std::ffi::{c_char, c_int, CStr};
use std::time::Duration;

use serde_json::{json, Value};

pub mod driver;

pub use crate::device::{cuda_devices, CudaDevice};
use crate::shim::take_string;

extern "C" {
    fn segtool_env_torch_version() -> *const c_char;
    fn segtool_env_torch_config() -> *mut c_char;
    fn segtool_env_torch_cuda_versions(cudart: *mut i64, cudnn: *mut i64, hooks: *mut c_int);
    fn segtool_env_nccl_version(compiled: *mut c_int, runtime: *mut c_int) -> c_int;
    fn segtool_env_set_allow_tf32(allow: c_int) -> *mut c_char;
    fn segtool_env_cuda_peak_allocated(device: c_int, reset: c_int, peak: *mut i64) -> *mut c_char;
}

/// libtorch as linked.
#[derive(Clone, Debug, PartialEq)]
pub struct Libtorch {
    /// The headers' `TORCH_VERSION` ("2.13.0").
    pub version: String,
    /// The folder the binaries' rpath names (torch-sys's `DEP_TCH_LIBTORCH_LIB`).
    pub lib_dir: String,
    /// libtorch_cuda's hooks are registered (a CUDA build of libtorch is loaded).
    pub cuda_build: bool,
    /// The CUDA runtime it was built with ("13.0"); `None`: a CPU-only libtorch.
    pub cuda_version: Option<String>,
    /// The cuDNN it was built with ("9.20.0").
    pub cudnn_version: Option<String>,
    /// `at::show_config()`.
    pub config: String,
}

/// CUDA as seen by libtorch now.
#[derive(Clone, Debug, PartialEq)]
pub struct Cuda {
    pub available: bool,
    pub devices: Vec<CudaDevice>,
    /// Why there is no device (the CUDA runtime's own words), when there is none.
    pub reason: Option<String>,
    /// cuDNN usable (needs a device).
    pub cudnn_available: bool,
}

/// NCCL in the c10d shim.
#[derive(Clone, Debug, PartialEq)]
pub struct Nccl {
    /// ProcessGroupNCCL compiled into the shim (`-DUSE_C10D_NCCL`).
    pub built: bool,
    /// `NCCL_VERSION_CODE` of the headers compiled against ("2.29.7").
    pub header_version: Option<String>,
    /// `ncclGetVersion` of the library loaded now.
    pub library_version: Option<String>,
    /// The library folder linked with an rpath.
    pub library_dir: Option<String>,
    /// `--dist-backend nccl` can run here: built and at least one CUDA device.
    pub usable: bool,
    /// Why not, when not.
    pub reason: Option<String>,
}

/// The gloo backend of the c10d shim.
#[derive(Clone, Debug, PartialEq)]
pub struct Gloo {
    /// Where the build found gloo's headers (Debian libgloo-dev).
    pub headers: String,
    /// A one-rank gloo process group on 127.0.0.1 all-reduced a tensor correctly.
    pub all_reduce_ok: bool,
    /// What happened: the time it took, or the error.
    pub detail: String,
}

/// Everything [`env_report`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainEnvReport {
    pub libtorch: Libtorch,
    pub cuda: Cuda,
    pub nccl: Nccl,
    pub gloo: Gloo,
    /// Not in [`TrainEnvReport::to_json`]: doctor puts [`driver::Driver::to_json`] at its
    /// top level (the driver is the machine's, not libtorch's).
    pub driver: driver::Driver,
}

/// `22907` -> `"2.29.7"` (NCCL >= 2.9: major*10000 + minor*100 + patch).
fn nccl_version(code: c_int) -> String {
    let code = code.max(0);
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// `13000` -> `"13.0"` (CUDART_VERSION, and cuDriverGetVersion: major*1000 + minor*10).
pub fn cudart_version(code: i64) -> String {
    format!("{}.{}", code / 1000, (code % 1000) / 10)
}

/// `92000` -> `"9.20.0"` (cuDNN 9: major*10000 + minor*100 + patch).
fn cudnn_version(code: i64) -> String {
    if code >= 10000 {
        format!("{}.{}.{}", code / 10000, (code % 10000) / 100, code % 100)
    } else {
        format!("{}.{}.{}", code / 1000, (code % 1000) / 100, code % 100)
    }
}

/// The CUDA caching allocator's peak allocated bytes on `device` since the last reset
/// (`torch.cuda.max_memory_allocated`); `reset` starts a new peak after reading.
pub fn cuda_peak_allocated(device: usize, reset: bool) -> anyhow::Result<u64> {
    let mut peak = 0i64;
    let device = c_int::try_from(device)?;
    if let Some(err) = take_string(unsafe {
        segtool_env_cuda_peak_allocated(device, c_int::from(reset), &mut peak)
    }) {
        anyhow::bail!("{err}");
    }
    Ok(peak.max(0) as u64)
}

/// Allows or forbids TF32 in cuDNN convolutions and cuBLAS matmuls (libtorch's defaults:
/// cuDNN allowed, cuBLAS not). Full fp32 makes CUDA results comparable with the CPU's.
pub fn set_cuda_allow_tf32(allow: bool) -> anyhow::Result<()> {
    if let Some(err) = take_string(unsafe { segtool_env_set_allow_tf32(c_int::from(allow)) }) {
        anyhow::bail!("{err}");
    }
    Ok(())
}

/// libtorch's build-time CUDART_VERSION, cuDNN version and "CUDA hooks registered".
fn torch_cuda_versions() -> (i64, i64, c_int) {
    let (mut cudart, mut cudnn, mut hooks) = (0i64, 0i64, 0 as c_int);
    unsafe { segtool_env_torch_cuda_versions(&mut cudart, &mut cudnn, &mut hooks) };
    (cudart, cudnn, hooks)
}

/// The NVIDIA driver against the CUDA runtime libtorch was built with (cheap: a `dlopen`).
pub fn driver_report() -> driver::Driver {
    let cudart = torch_cuda_versions().0;
    driver::assess(driver::probe(), (cudart > 0).then_some(cudart))
}

/// The libtorch this build links (cheap: no device or process-group checks).
pub fn libtorch() -> Libtorch {
    let version = unsafe { CStr::from_ptr(segtool_env_torch_version()) }
        .to_string_lossy()
        .into_owned();
    let (cudart, cudnn, hooks) = torch_cuda_versions();
    Libtorch {
        version,
        lib_dir: env!("SEGTOOL_TORCH_LIB_DIR").to_string(),
        cuda_build: hooks != 0 && cudart > 0,
        cuda_version: (cudart > 0).then(|| cudart_version(cudart)),
        cudnn_version: (cudnn > 0).then(|| cudnn_version(cudnn)),
        config: take_string(unsafe { segtool_env_torch_config() }).unwrap_or_default(),
    }
}

fn gloo_check() -> (bool, String) {
    use crate::distributed::{launch::free_port, Backend, GroupOptions, ProcessGroup, ReduceOp};
    let start = std::time::Instant::now();
    let run = || -> anyhow::Result<()> {
        let group = ProcessGroup::new(&GroupOptions {
            master_addr: "127.0.0.1".into(),
            master_port: free_port()?,
            world_size: 1,
            rank: 0,
            timeout: Duration::from_secs(10),
            backend: Backend::Gloo,
            device: tch::Device::Cpu,
        })?;
        let mut t = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.0]);
        group.all_reduce(&mut t, ReduceOp::Sum)?;
        let got: Vec<f32> = Vec::<f32>::try_from(&t)?;
        anyhow::ensure!(got == [1.0, 2.0, 3.0], "all_reduce gave {got:?}");
        Ok(())
    };
    match run() {
        Ok(()) => (
            true,
            format!(
                "1-rank process group on 127.0.0.1: all_reduce correct in {:.0} ms",
                start.elapsed().as_secs_f64() * 1e3
            ),
        ),
        Err(e) => (false, format!("{e:#}")),
    }
}

/// Runs every check (a second or so: the gloo check opens a TCPStore on 127.0.0.1).
pub fn env_report() -> TrainEnvReport {
    let libtorch = libtorch();
    let (devices, reason) = match cuda_devices() {
        Ok(d) => (d, None),
        Err(e) => (Vec::new(), Some(e)),
    };
    let available = !devices.is_empty();
    let cuda = Cuda {
        available,
        devices,
        reason,
        cudnn_available: available && tch::Cuda::cudnn_is_available(),
    };

    let (mut compiled, mut runtime) = (0 as c_int, 0 as c_int);
    let built = unsafe { segtool_env_nccl_version(&mut compiled, &mut runtime) } != 0;
    let nccl_reason = if !built {
        Some(
            "this build has no NCCL (SEGTOOL_NO_NCCL=1 or a CPU-only libtorch at build time)"
                .to_string(),
        )
    } else if !available {
        Some("no CUDA device: NCCL needs one GPU per rank".to_string())
    } else {
        None
    };
    let nccl = Nccl {
        built,
        header_version: built.then(|| nccl_version(compiled)),
        library_version: (built && runtime > 0).then(|| nccl_version(runtime)),
        library_dir: option_env!("SEGTOOL_NCCL_LIB_DIR").map(str::to_string),
        usable: built && available,
        reason: nccl_reason,
    };

    let (all_reduce_ok, detail) = gloo_check();
    let gloo = Gloo {
        headers: env!("SEGTOOL_GLOO_INCLUDE").to_string(),
        all_reduce_ok,
        detail,
    };
    TrainEnvReport {
        libtorch,
        cuda,
        nccl,
        gloo,
        driver: driver_report(),
    }
}

impl TrainEnvReport {
    /// Stable keys (values `null` when unknown):
    /// - `libtorch`: `version` (string), `lib_dir` (string), `cuda_build` (bool),
    ///   `cuda_version` (string|null), `cudnn_version` (string|null)
    /// - `cuda`: `available` (bool), `device_count` (int), `devices` (array of `index`
    ///   int, `name` string, `memory_bytes` int, `compute_capability` string),
    ///   `reason` (string|null), `cudnn_available` (bool)
    /// - `nccl`: `built` (bool), `header_version`, `library_version`, `library_dir`
    ///   (string|null), `usable` (bool), `reason` (string|null)
    /// - `gloo`: `headers` (string), `all_reduce_ok` (bool), `detail` (string)
    pub fn to_json(&self) -> Value {
        let l = &self.libtorch;
        let c = &self.cuda;
        let n = &self.nccl;
        let g = &self.gloo;
        json!({
            "libtorch": {
                "version": l.version,
                "lib_dir": l.lib_dir,
                "cuda_build": l.cuda_build,
                "cuda_version": l.cuda_version,
                "cudnn_version": l.cudnn_version,
            },
            "cuda": {
                "available": c.available,
                "device_count": c.devices.len(),
                "devices": c.devices.iter().map(|d| json!({
                    "index": d.index,
                    "name": d.name,
                    "memory_bytes": d.memory_bytes,
                    "compute_capability": d.compute_capability,
                })).collect::<Vec<_>>(),
                "reason": c.reason,
                "cudnn_available": c.cudnn_available,
            },
            "nccl": {
                "built": n.built,
                "header_version": n.header_version,
                "library_version": n.library_version,
                "library_dir": n.library_dir,
                "usable": n.usable,
                "reason": n.reason,
            },
            "gloo": {
                "headers": g.headers,
                "all_reduce_ok": g.all_reduce_ok,
                "detail": g.detail,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_codes() {
        assert_eq!(nccl_version(22907), "2.29.7");
        assert_eq!(cudart_version(13000), "13.0");
        assert_eq!(cudart_version(12080), "12.8");
        assert_eq!(cudnn_version(92000), "9.20.0");
    }
}
