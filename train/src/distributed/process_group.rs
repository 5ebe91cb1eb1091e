//! A safe wrapper over the c10d shim (csrc/c10d_shim.cpp): a TCPStore rendezvous and a
//! ProcessGroupGloo or ProcessGroupNCCL, with blocking collectives that each wait at most
//! a timeout. A group has one device (CPU for gloo, the rank's GPU for NCCL); the shim
//! refuses any collective tensor elsewhere, for both backends.

use std::ffi::{c_char, c_int, CString};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use tch::{Device, Tensor};
use torch_sys::C_tensor;

use crate::shim::check;

#[repr(C)]
struct RawGroup {
    _private: [u8; 0],
}

extern "C" {
    fn segtool_c10d_has_nccl() -> c_int;
    fn segtool_c10d_group_new(
        master_addr: *const c_char,
        port: u16,
        world: c_int,
        rank: c_int,
        timeout_ms: i64,
        backend: *const c_char,
        cuda_device: c_int,
        out: *mut *mut RawGroup,
    ) -> *mut c_char;
    fn segtool_c10d_group_free(g: *mut RawGroup);
    fn segtool_c10d_all_reduce(
        g: *mut RawGroup,
        t: *mut C_tensor,
        op: c_int,
        timeout_ms: i64,
    ) -> *mut c_char;
    fn segtool_c10d_broadcast(
        g: *mut RawGroup,
        t: *mut C_tensor,
        root: c_int,
        timeout_ms: i64,
    ) -> *mut c_char;
    fn segtool_c10d_all_gather(
        g: *mut RawGroup,
        input: *mut C_tensor,
        outputs: *const *mut C_tensor,
        n_outputs: usize,
        timeout_ms: i64,
    ) -> *mut c_char;
    fn segtool_c10d_barrier(g: *mut RawGroup, timeout_ms: i64) -> *mut c_char;
    #[cfg(test)]
    fn segtool_c10d_meta_tensor(n: i64, out: *mut *mut C_tensor) -> *mut c_char;
    fn segtool_c10d_sync_batch_norm(
        g: *mut RawGroup,
        input: *mut C_tensor,
        weight: *mut C_tensor,
        bias: *mut C_tensor,
        running_mean: *mut C_tensor,
        running_var: *mut C_tensor,
        momentum: f64,
        eps: f64,
        timeout_ms: i64,
        out: *mut *mut C_tensor,
    ) -> *mut c_char;
}

fn ptr(t: &Tensor) -> *mut C_tensor {
    t.as_ptr() as *mut C_tensor
}

/// The collective communication library behind a [`ProcessGroup`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// gloo over TCP: CPU tensors.
    Gloo,
    /// NCCL: CUDA tensors. Built in by default (not with `SEGTOOL_NO_NCCL=1` or a CPU-only
    /// libtorch); needs a CUDA device at run time.
    Nccl,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Gloo => "gloo",
            Backend::Nccl => "nccl",
        }
    }

    /// Whether this build has this backend (NCCL also needs a CUDA device to run).
    pub fn available(self) -> bool {
        match self {
            Backend::Gloo => true,
            Backend::Nccl => unsafe { segtool_c10d_has_nccl() != 0 },
        }
    }
}

impl std::str::FromStr for Backend {
    type Err = anyhow::Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "gloo" => Ok(Backend::Gloo),
            "nccl" => Ok(Backend::Nccl),
            other => bail!("unknown distributed backend {other:?} (gloo, nccl)"),
        }
    }
}

/// Reduction of [`ProcessGroup::all_reduce`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum, then divided by the world size (floating-point tensors only).
    Avg,
    Max,
}

/// Where and how to rendezvous.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    pub master_addr: String,
    pub master_port: u16,
    pub world_size: usize,
    pub rank: usize,
    /// For the rendezvous and for every collective.
    pub timeout: Duration,
    pub backend: Backend,
    /// Where every collective's tensors live: the CPU for gloo, this rank's GPU for NCCL
    /// (the group binds to it: it becomes the current CUDA device before NCCL starts).
    pub device: Device,
}

impl GroupOptions {
    /// The same options on `device` (the device the model trains on).
    pub fn on_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }
}

/// A c10d process group (TCPStore rendezvous + ProcessGroupGloo). Collectives block until
/// every rank has joined them, or fail after the timeout, or as soon as a peer is gone.
/// Every rank must call the same collectives in the same order with matching shapes.
pub struct ProcessGroup {
    raw: *mut RawGroup,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    device: Device,
}

// The shim serialises nothing itself, but c10d's process groups are thread-safe: work is
// queued to the backend's own threads.
unsafe impl Send for ProcessGroup {}
unsafe impl Sync for ProcessGroup {}

impl std::fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .finish()
    }
}

impl ProcessGroup {
    /// Joins the group: rank 0 hosts the TCPStore at `master_addr:master_port`, the
    /// others connect to it; returns once all `world_size` ranks are there.
    pub fn new(opts: &GroupOptions) -> Result<Self> {
        if opts.backend == Backend::Nccl {
            if !Backend::Nccl.available() {
                bail!(
                    "backend nccl requested, but this build of segtool has no NCCL (built with \
                     SEGTOOL_NO_NCCL=1 or against a CPU-only libtorch); use gloo with CPU tensors"
                );
            }
            // Before the rendezvous: a rank without a GPU fails at once, not after its
            // peers have waited for it.
            if let Err(why) = crate::device::cuda_devices() {
                bail!(
                    "backend nccl requested, but there is no CUDA device: NCCL runs collectives \
                     on GPUs and this process sees none ({why}); use --dist-backend gloo with \
                     --device cpu, or check the driver and CUDA_VISIBLE_DEVICES"
                );
            }
        }
        let cuda_device = match (opts.backend, opts.device) {
            (Backend::Gloo, Device::Cpu) => -1,
            (Backend::Nccl, Device::Cuda(n)) => c_int::try_from(n).context("CUDA device")?,
            (Backend::Gloo, other) => bail!(
                "the gloo backend takes CPU tensors, but the group was asked for {other:?}: \
                 use --device cpu with gloo, or the nccl backend for GPUs"
            ),
            (Backend::Nccl, other) => bail!(
                "the nccl backend runs collectives on this rank's GPU, but the group was asked \
                 for {other:?}: use --device cuda with nccl, or gloo for the CPU"
            ),
        };
        let addr = CString::new(opts.master_addr.as_str()).context("master address")?;
        let backend = CString::new(opts.backend.name()).expect("no NUL");
        let world = c_int::try_from(opts.world_size).context("world size")?;
        let rank = c_int::try_from(opts.rank).context("rank")?;
        let mut raw = std::ptr::null_mut();
        check(unsafe {
            segtool_c10d_group_new(
                addr.as_ptr(),
                opts.master_port,
                world,
                rank,
                timeout_ms(opts.timeout),
                backend.as_ptr(),
                cuda_device,
                &mut raw,
            )
        })?;
        Ok(Self {
            raw,
            rank: opts.rank,
            world_size: opts.world_size,
            timeout: opts.timeout,
            device: opts.device,
        })
    }

    /// The device every collective's tensors must be on (the shim refuses others).
    pub fn device(&self) -> Device {
        self.device
    }

    /// `values` as one f64 tensor on the group's device, all-reduced with `op`, read back:
    /// the way scalars (losses, metrics, flags) cross the ranks with either backend.
    pub fn all_reduce_values(&self, values: &[f64], op: ReduceOp) -> Result<Vec<f64>> {
        let mut t = Tensor::from_slice(values).to_device(self.device);
        self.all_reduce(&mut t, op)?;
        Ok(Vec::<f64>::try_from(t.to_device(Device::Cpu))?)
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn world_size(&self) -> usize {
        self.world_size
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// In place: every rank's `tensor` becomes the reduction over all ranks.
    /// The tensor must be contiguous and on [`ProcessGroup::device`].
    pub fn all_reduce(&self, tensor: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_timeout(tensor, op, self.timeout)
    }

    pub fn all_reduce_timeout(
        &self,
        tensor: &mut Tensor,
        op: ReduceOp,
        timeout: Duration,
    ) -> Result<()> {
        let op = match op {
            ReduceOp::Sum => 0,
            ReduceOp::Avg => 1,
            ReduceOp::Max => 2,
        };
        check(unsafe { segtool_c10d_all_reduce(self.raw, ptr(tensor), op, timeout_ms(timeout)) })
    }

    /// In place: every rank's `tensor` becomes rank `root`'s.
    pub fn broadcast(&self, tensor: &mut Tensor, root: usize) -> Result<()> {
        self.broadcast_timeout(tensor, root, self.timeout)
    }

    pub fn broadcast_timeout(
        &self,
        tensor: &mut Tensor,
        root: usize,
        timeout: Duration,
    ) -> Result<()> {
        let root = c_int::try_from(root).context("root rank")?;
        check(unsafe { segtool_c10d_broadcast(self.raw, ptr(tensor), root, timeout_ms(timeout)) })
    }

    /// Every rank's `tensor`, in rank order (each shaped like `tensor`).
    pub fn all_gather(&self, tensor: &Tensor) -> Result<Vec<Tensor>> {
        self.all_gather_timeout(tensor, self.timeout)
    }

    pub fn all_gather_timeout(&self, tensor: &Tensor, timeout: Duration) -> Result<Vec<Tensor>> {
        let input = tensor.contiguous();
        let outputs: Vec<Tensor> = (0..self.world_size).map(|_| input.empty_like()).collect();
        let ptrs: Vec<*mut C_tensor> = outputs.iter().map(ptr).collect();
        check(unsafe {
            segtool_c10d_all_gather(
                self.raw,
                ptr(&input),
                ptrs.as_ptr(),
                ptrs.len(),
                timeout_ms(timeout),
            )
        })?;
        Ok(outputs)
    }

    /// Returns once every rank has reached the barrier.
    pub fn barrier(&self) -> Result<()> {
        self.barrier_timeout(self.timeout)
    }

    pub fn barrier_timeout(&self, timeout: Duration) -> Result<()> {
        check(unsafe { segtool_c10d_barrier(self.raw, timeout_ms(timeout)) })
    }

    /// Training-mode BatchNorm with statistics over every rank's batch; the backward
    /// all-reduces as well. Updates the running statistics in place. The group must
    /// outlive the backward pass of the result (hold it in an `Arc`, as
    /// [`crate::distributed::sync_bn`] does).
    pub(crate) fn sync_batch_norm(
        &self,
        input: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        running: Option<(&Tensor, &Tensor)>,
        momentum: f64,
        eps: f64,
    ) -> Result<Tensor> {
        let opt = |t: Option<&Tensor>| t.map_or(std::ptr::null_mut(), ptr);
        let mut out = std::ptr::null_mut();
        check(unsafe {
            segtool_c10d_sync_batch_norm(
                self.raw,
                ptr(input),
                opt(weight),
                opt(bias),
                opt(running.map(|r| r.0)),
                opt(running.map(|r| r.1)),
                momentum,
                eps,
                timeout_ms(self.timeout),
                &mut out,
            )
        })?;
        // SAFETY: on success the shim set `out` to a heap at::Tensor we now own.
        Ok(unsafe { Tensor::from_ptr(out) })
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        unsafe { segtool_c10d_group_free(self.raw) };
    }
}

fn timeout_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}

#[cfg(test)]
pub(crate) mod tests {
    //! The device rule, checked by the shim for both backends: a collective's tensor on
    //! another device than the group's is refused with a message naming both. A meta
    //! tensor stands in for "another device" on a machine without a GPU.
    use super::*;

    fn meta(n: i64) -> Tensor {
        let mut out = std::ptr::null_mut();
        check(unsafe { segtool_c10d_meta_tensor(n, &mut out) }).unwrap();
        // SAFETY: on success the shim set `out` to a heap at::Tensor we now own.
        unsafe { Tensor::from_ptr(out) }
    }

    /// A one-rank gloo group on 127.0.0.1 (its all-reduce is the identity): the real shim
    /// path without a second process.
    pub(crate) fn gloo() -> ProcessGroup {
        ProcessGroup::new(&GroupOptions {
            master_addr: "127.0.0.1".into(),
            master_port: super::super::launch::free_port().unwrap(),
            world_size: 1,
            rank: 0,
            timeout: Duration::from_secs(10),
            backend: Backend::Gloo,
            device: Device::Cpu,
        })
        .unwrap()
    }

    #[test]
    fn collectives_refuse_tensors_off_the_group_device() {
        let g = gloo();
        assert_eq!(g.device(), Device::Cpu);
        let mut t = meta(4);
        let errors = [
            g.all_reduce(&mut t, ReduceOp::Sum).unwrap_err(),
            g.broadcast(&mut t, 0).unwrap_err(),
            g.all_gather(&t).unwrap_err(),
            g.sync_batch_norm(&meta(4).view([1, 4]), None, None, None, 0.1, 1e-5)
                .unwrap_err(),
        ];
        for e in errors {
            let e = e.to_string();
            assert!(
                e.contains("is on meta") && e.contains("CPU tensors only"),
                "{e}"
            );
        }
        // On the group's device the same calls work.
        let values = g.all_reduce_values(&[1.5, -2.0], ReduceOp::Avg).unwrap();
        assert_eq!(values, [1.5, -2.0]);
    }

    #[test]
    fn the_backend_and_device_must_agree() {
        let opts = |backend, device| GroupOptions {
            master_addr: "127.0.0.1".into(),
            master_port: 1,
            world_size: 1,
            rank: 0,
            timeout: Duration::from_secs(1),
            backend,
            device,
        };
        let e = ProcessGroup::new(&opts(Backend::Gloo, Device::Cuda(0))).unwrap_err();
        assert!(
            e.to_string().contains("gloo backend takes CPU tensors"),
            "{e}"
        );
        // Without a GPU the missing device is named first; with one, the CPU request.
        let e = ProcessGroup::new(&opts(Backend::Nccl, Device::Cpu))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nccl backend runs collectives on this rank's GPU")
                || e.contains("no CUDA device")
                || e.contains("no NCCL"),
            "{e}"
        );
    }
}
