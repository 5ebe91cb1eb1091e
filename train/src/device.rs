//! The `--device` flag's values (`cpu`, `cuda`, `cuda:N`) as tch devices, checked against
//! what libtorch sees, and the CUDA devices it sees.

use std::ffi::{c_char, c_int, CStr};

use anyhow::{bail, Result};
use tch::Device;

use crate::shim::{check, take_string};

extern "C" {
    fn segtool_cuda_set_device(index: c_int) -> *mut c_char;
    fn segtool_env_cuda_probe(count: *mut c_int) -> *mut c_char;
    fn segtool_env_cuda_device(
        index: c_int,
        name: *mut c_char,
        name_len: usize,
        total_bytes: *mut u64,
        major: *mut c_int,
        minor: *mut c_int,
    ) -> *mut c_char;
}

/// Makes `device` this thread's current CUDA device (`torch.cuda.set_device`); nothing
/// for the CPU. A distributed run calls it before anything touches the GPU, so that no
/// rank creates a CUDA context on GPU 0 as well as its own, and NCCL binds to it.
pub fn make_current(device: Device) -> Result<()> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    let index = c_int::try_from(index)?;
    check(unsafe { segtool_cuda_set_device(index) })
}

/// `cpu`, `cuda` (GPU 0) or `cuda:N`; an error when libtorch has no such GPU.
pub fn parse_device(s: &str) -> Result<Device> {
    match s {
        "cpu" => Ok(Device::Cpu),
        "cuda" => cuda_device(0),
        other => match other.strip_prefix("cuda:").map(str::parse) {
            Some(Ok(n)) => cuda_device(n),
            _ => bail!("unknown device {other:?} (cpu, cuda, cuda:N)"),
        },
    }
}

/// The device of this process: in a distributed run (`local_rank` given, the
/// [`DistEnv`](crate::distributed::DistEnv)'s), `cuda` is the local rank's GPU
/// ([`local_cuda_device`]; [`make_current`] makes it current, as
/// `torch.cuda.set_device(local_rank)`); otherwise [`parse_device`].
pub fn device_for(s: &str, local_rank: Option<usize>) -> Result<Device> {
    match local_rank {
        Some(local_rank) if s == "cuda" => local_cuda_device(local_rank),
        _ => parse_device(s),
    }
}

/// `--device cuda` in a distributed run: the local rank's GPU, or the only one visible
/// (srun --gpus-per-task=1, CUDA_VISIBLE_DEVICES per rank).
pub fn local_cuda_device(local_rank: usize) -> Result<Device> {
    if !tch::Cuda::is_available() {
        bail!("device cuda requested but libtorch sees no CUDA GPU (use --device cpu)");
    }
    match tch::Cuda::device_count() as usize {
        1 => Ok(Device::Cuda(0)),
        n if local_rank < n => Ok(Device::Cuda(local_rank)),
        n => bail!(
            "local rank {local_rank} needs its own GPU but only {n} are visible \
             (one per task: srun --gpus-per-task=1, or fewer tasks per node)"
        ),
    }
}

fn cuda_device(n: usize) -> Result<Device> {
    if !tch::Cuda::is_available() {
        bail!("device cuda:{n} requested but libtorch sees no CUDA GPU (use --device cpu)");
    }
    if n >= tch::Cuda::device_count() as usize {
        bail!(
            "cuda:{n} requested but only {} GPU(s) visible",
            tch::Cuda::device_count()
        );
    }
    Ok(Device::Cuda(n))
}

/// One CUDA device.
#[derive(Clone, Debug, PartialEq)]
pub struct CudaDevice {
    pub index: usize,
    pub name: String,
    pub memory_bytes: u64,
    /// `"9.0"` for an H100.
    pub compute_capability: String,
}

/// The CUDA devices libtorch sees, or why there are none.
pub fn cuda_devices() -> Result<Vec<CudaDevice>, String> {
    let mut count: c_int = 0;
    if let Some(err) = take_string(unsafe { segtool_env_cuda_probe(&mut count) }) {
        return Err(err.strip_prefix("CUDA: ").unwrap_or(&err).to_string());
    }
    let mut devices = Vec::new();
    for index in 0..count {
        let mut name = vec![0 as c_char; 256];
        let (mut bytes, mut major, mut minor) = (0u64, 0, 0);
        if let Some(err) = take_string(unsafe {
            segtool_env_cuda_device(
                index,
                name.as_mut_ptr(),
                name.len(),
                &mut bytes,
                &mut major,
                &mut minor,
            )
        }) {
            return Err(err);
        }
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        devices.push(CudaDevice {
            index: index as usize,
            name,
            memory_bytes: bytes,
            compute_capability: format!("{major}.{minor}"),
        });
    }
    Ok(devices)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices() {
        assert_eq!(parse_device("cpu").unwrap(), Device::Cpu);
        let err = parse_device("tpu").unwrap_err().to_string();
        assert!(err.contains("unknown device \"tpu\""), "{err}");
        assert!(parse_device("cuda:x").is_err());
    }
}
