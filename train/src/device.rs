//! The `--device` flag's values (`cpu`, `cuda`, `cuda:N`) as tch devices, checked against
//! what libtorch sees.

use std::ffi::{c_char, c_int};

use anyhow::{bail, Result};
use tch::Device;

use crate::dist::DistEnv;

extern "C" {
    fn segtool_cuda_set_device(index: c_int) -> *mut c_char;
}

/// Makes `device` this thread's current CUDA device (`torch.cuda.set_device`); nothing
/// for the CPU. A distributed run calls it before anything touches the GPU, so that no
/// rank creates a CUDA context on GPU 0 as well as its own, and NCCL binds to it.
pub fn make_current(device: Device) -> Result<()> {
    let Device::Cuda(index) = device else {
        return Ok(());
    };
    let index = c_int::try_from(index)?;
    crate::dist::process_group::check(unsafe { segtool_cuda_set_device(index) })
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

/// The device of this process: in a distributed run, `cuda` is the local rank's GPU
/// ([`local_cuda_device`]; [`make_current`] makes it current, as
/// `torch.cuda.set_device(local_rank)`); otherwise [`parse_device`].
pub fn device_for(s: &str, dist: Option<&DistEnv>) -> Result<Device> {
    match dist {
        Some(env) if s == "cuda" => local_cuda_device(env.local_rank),
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
