//! Mixed-precision training, as `torch.autocast` + `torch.amp.GradScaler`:
//!
//! * [`autocast`]: runs a closure with libtorch's autocast on for one device type and a
//!   lower-precision dtype (fp16 or bf16), restoring the previous state after, and
//!   [`full_precision`]: a region with autocast off (DANet's attention energies and
//!   softmax; see model/attention.rs). tch 0.26 only switches CUDA autocast on, without
//!   a dtype, so both go through the C++ shim (csrc/c10d_shim.cpp).
//! * [`GradScaler`]: dynamic loss scaling for fp16: the loss is multiplied by the scale
//!   before backward; the gradients are unscaled (`_amp_foreach_non_finite_check_and_
//!   unscale_`) before clipping; a step whose gradients hold inf/NaN is skipped and the
//!   scale multiplied by `backoff_factor`; after `growth_interval` good steps in a row it
//!   is multiplied by `growth_factor` (`_amp_update_scale_`).
//! * [`Amp`]: what the trainer holds: the precision, its device, the scaler (fp16 only),
//!   and the count of skipped steps, optionally logged to the run's metrics.jsonl.
//!
//! Parameters, gradients and optimiser state stay fp32 in every mode.

use std::ffi::{c_char, c_int};
use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tch::{nn, Device, Kind, Tensor};
use torch_sys::C_tensor;

pub use segtool_core::config::Precision;

use crate::shim::check;

extern "C" {
    fn segtool_autocast_is_enabled(device: c_int) -> c_int;
    fn segtool_autocast_set(
        device: c_int,
        enabled: c_int,
        dtype: c_int,
        prev_enabled: *mut c_int,
        prev_dtype: *mut c_int,
    ) -> *mut c_char;
    fn segtool_autocast_increment_nesting() -> c_int;
    fn segtool_autocast_decrement_nesting() -> c_int;
    fn segtool_amp_unscale(
        grads: *const *mut C_tensor,
        n: usize,
        found_inf: *mut C_tensor,
        inv_scale: *mut C_tensor,
    ) -> *mut c_char;
}

/// c10::ScalarType codes.
const SCALAR_HALF: c_int = 5;
const SCALAR_BFLOAT16: c_int = 15;

const CPU: c_int = 0;
const CUDA: c_int = 1;

fn device_code(device: Device) -> c_int {
    if device.is_cuda() {
        CUDA
    } else {
        CPU
    }
}

/// Whether autocast is on for `device`'s type in this thread.
pub fn autocast_enabled(device: Device) -> bool {
    unsafe { segtool_autocast_is_enabled(device_code(device)) != 0 }
}

/// Restores one device type's autocast state (and the nesting depth) when dropped, so a
/// panic inside the region leaves no autocast behind.
struct Restore {
    saved: Vec<(c_int, c_int, c_int)>,
    nested: bool,
}

impl Restore {
    fn set(&mut self, device: c_int, enabled: bool, dtype: c_int) -> Result<()> {
        let (mut prev_enabled, mut prev_dtype) = (0, 0);
        check(unsafe {
            segtool_autocast_set(
                device,
                c_int::from(enabled),
                dtype,
                &mut prev_enabled,
                &mut prev_dtype,
            )
        })?;
        self.saved.push((device, prev_enabled, prev_dtype));
        Ok(())
    }
}

impl Drop for Restore {
    fn drop(&mut self) {
        if self.nested {
            unsafe { segtool_autocast_decrement_nesting() };
        }
        for &(device, enabled, dtype) in self.saved.iter().rev() {
            let (mut e, mut d) = (0, 0);
            let err = unsafe { segtool_autocast_set(device, enabled, dtype, &mut e, &mut d) };
            let _ = check(err);
        }
    }
}

/// Runs `f` under autocast on `device`'s type with `dtype` (`Kind::Half` or
/// `Kind::BFloat16`): matmuls and convolutions in that dtype, precision-sensitive ops in
/// fp32, as `with torch.autocast(device_type, dtype)`.
pub fn autocast<T>(device: Device, dtype: Kind, f: impl FnOnce() -> T) -> Result<T> {
    let code = match dtype {
        Kind::Half => SCALAR_HALF,
        Kind::BFloat16 => SCALAR_BFLOAT16,
        other => bail!("autocast to {other:?}: only Half and BFloat16"),
    };
    let mut restore = Restore {
        saved: Vec::new(),
        nested: false,
    };
    restore.set(device_code(device), true, code)?;
    unsafe { segtool_autocast_increment_nesting() };
    restore.nested = true;
    Ok(f())
}

/// Runs `f` with autocast off (CPU and CUDA), as `torch.autocast(..., enabled=False)`:
/// inputs upcast by the caller stay fp32. Without autocast on, just `f()`.
pub fn full_precision<T>(f: impl FnOnce() -> T) -> T {
    let on: Vec<c_int> = [CPU, CUDA]
        .into_iter()
        .filter(|&d| unsafe { segtool_autocast_is_enabled(d) } != 0)
        .collect();
    if on.is_empty() {
        return f();
    }
    let mut restore = Restore {
        saved: Vec::new(),
        nested: false,
    };
    for d in on {
        // Setting autocast off only fails on an invalid dtype code, which this is not.
        restore
            .set(d, false, SCALAR_BFLOAT16)
            .expect("switching autocast off");
    }
    f()
}

/// `t` in fp32 when it is fp16 or bf16, else itself (fp32 and fp64 stay).
pub fn at_least_fp32(t: &Tensor) -> Tensor {
    match t.kind() {
        Kind::Half | Kind::BFloat16 => t.to_kind(Kind::Float),
        _ => t.shallow_clone(),
    }
}

/// GradScaler's constants (PyTorch's defaults).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GradScalerConfig {
    pub init_scale: f64,
    pub growth_factor: f64,
    pub backoff_factor: f64,
    /// Consecutive steps with finite gradients before the scale grows.
    pub growth_interval: i64,
}

impl Default for GradScalerConfig {
    fn default() -> Self {
        Self {
            init_scale: 65536.0,
            growth_factor: 2.0,
            backoff_factor: 0.5,
            growth_interval: 2000,
        }
    }
}

/// Dynamic loss scaling: [`GradScaler::scale_loss`] before backward,
/// [`GradScaler::unscale`] after it (and after any gradient all-reduce), the optimiser
/// step only when that found no inf/NaN, then [`GradScaler::update`].
pub struct GradScaler {
    config: GradScalerConfig,
    /// (1,) fp32 on the training device.
    scale: Tensor,
    /// (1,) int32: good steps in a row.
    growth_tracker: Tensor,
}

impl std::fmt::Debug for GradScaler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradScaler")
            .field("scale", &self.scale())
            .field("growth_tracker", &self.growth_tracker())
            .finish()
    }
}

impl GradScaler {
    pub fn new(config: GradScalerConfig, device: Device) -> Self {
        Self {
            config,
            scale: Tensor::full([1], config.init_scale, (Kind::Float, device)),
            growth_tracker: Tensor::zeros([1], (Kind::Int, device)),
        }
    }

    pub fn config(&self) -> GradScalerConfig {
        self.config
    }

    /// The current loss scale.
    pub fn scale(&self) -> f64 {
        self.scale.double_value(&[0])
    }

    /// Good steps in a row since the last growth or backoff.
    pub fn growth_tracker(&self) -> i64 {
        self.growth_tracker.int64_value(&[0])
    }

    /// `loss * scale` (in fp32), the tensor to call backward on.
    pub fn scale_loss(&self, loss: &Tensor) -> Tensor {
        loss.to_kind(Kind::Float) * &self.scale
    }

    /// Divides every defined gradient in `grads` by the scale, in place; returns the
    /// (1,) found-inf flag: 1 when any gradient element was inf or NaN. Gradients are
    /// grouped by (device, dtype) as PyTorch's unscale_ does.
    pub fn unscale(&self, grads: &[Tensor]) -> Result<Tensor> {
        let found_inf = Tensor::zeros([1], (Kind::Float, self.scale.device()));
        let inv_scale = self
            .scale
            .to_kind(Kind::Double)
            .reciprocal()
            .to_kind(Kind::Float);
        let mut groups: Vec<((Kind, Device), Vec<*mut C_tensor>)> = Vec::new();
        for g in grads.iter().filter(|g| g.defined()) {
            let key = (g.kind(), g.device());
            let ptr = g.as_ptr() as *mut C_tensor;
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, v)) => v.push(ptr),
                None => groups.push((key, vec![ptr])),
            }
        }
        for ((_, device), ptrs) in &groups {
            let (found, inv) = if *device == self.scale.device() {
                (found_inf.shallow_clone(), inv_scale.shallow_clone())
            } else {
                (
                    Tensor::zeros([1], (Kind::Float, *device)),
                    inv_scale.to_device(*device),
                )
            };
            check(unsafe {
                segtool_amp_unscale(
                    ptrs.as_ptr(),
                    ptrs.len(),
                    found.as_ptr() as *mut C_tensor,
                    inv.as_ptr() as *mut C_tensor,
                )
            })?;
            if *device != self.scale.device() {
                let mut total = found_inf.shallow_clone();
                let _ = total.g_add_(&found.to_device(self.scale.device()));
            }
        }
        Ok(found_inf.clamp_max(1.0))
    }

    /// After a step: backoff on `found_inf`, else count the good step and grow the scale
    /// after `growth_interval` of them.
    pub fn update(&mut self, found_inf: &Tensor) {
        let c = self.config;
        let found = found_inf
            .to_device(self.scale.device())
            .to_kind(Kind::Float);
        let _ = self.scale.internal_amp_update_scale_(
            &self.growth_tracker,
            &found,
            c.growth_factor,
            c.backoff_factor,
            c.growth_interval,
        );
    }

    /// (scale, growth tracker), for a checkpoint.
    pub fn state(&self) -> (f64, i64) {
        (self.scale(), self.growth_tracker())
    }

    pub fn load_state(&mut self, scale: f64, growth_tracker: i64) {
        let _ = self.scale.fill_(scale);
        let _ = self.growth_tracker.fill_(growth_tracker);
    }
}

/// The trainer's mixed-precision state. Build with [`Amp::new`], give to
/// [`crate::Trainer::enable_amp`].
#[derive(Debug)]
pub struct Amp {
    precision: Precision,
    device: Device,
    scaler: Option<GradScaler>,
    /// Optimiser steps skipped for inf/NaN gradients.
    pub skipped_steps: usize,
    /// When set, each skipped step appends a `{"kind":"amp_skip",...}` line here (the
    /// run's metrics.jsonl).
    pub log: Option<PathBuf>,
}

impl Amp {
    /// `precision` on `device`, with GradScaler's defaults for fp16. fp16 needs CUDA.
    pub fn new(precision: Precision, device: Device) -> Result<Self> {
        Self::with_scaler(precision, device, GradScalerConfig::default())
    }

    /// [`Amp::new`] with given scaler constants (used by fp16 only).
    pub fn with_scaler(
        precision: Precision,
        device: Device,
        scaler: GradScalerConfig,
    ) -> Result<Self> {
        if precision == Precision::Fp16 && !device.is_cuda() {
            bail!("fp16 autocast needs CUDA; use bf16 on CPU (optim.precision = \"bf16\")");
        }
        let scaler = (precision == Precision::Fp16).then(|| GradScaler::new(scaler, device));
        Ok(Self {
            precision,
            device,
            scaler,
            skipped_steps: 0,
            log: None,
        })
    }

    /// Loss scaling with `scaler` whatever the precision (tests, and bf16 runs that want
    /// the skip-on-overflow behaviour).
    pub fn force_scaler(mut self, scaler: GradScalerConfig) -> Self {
        self.scaler = Some(GradScaler::new(scaler, self.device));
        self
    }

    pub fn precision(&self) -> Precision {
        self.precision
    }

    pub fn device(&self) -> Device {
        self.device
    }

    pub fn scaler(&self) -> Option<&GradScaler> {
        self.scaler.as_ref()
    }

    pub fn scaler_mut(&mut self) -> Option<&mut GradScaler> {
        self.scaler.as_mut()
    }

    /// The autocast dtype; `None` for fp32.
    pub fn dtype(&self) -> Option<Kind> {
        match self.precision {
            Precision::Fp32 => None,
            Precision::Fp16 => Some(Kind::Half),
            Precision::Bf16 => Some(Kind::BFloat16),
        }
    }

    /// Runs a forward pass under this precision's autocast (plain `f()` for fp32).
    pub fn forward<T>(&self, f: impl FnOnce() -> T) -> Result<T> {
        match self.dtype() {
            None => Ok(f()),
            Some(dtype) => autocast(self.device, dtype, f),
        }
    }

    /// The tensor to call backward on: `loss` times the loss scale, or `loss`.
    pub fn scale_loss(&self, loss: &Tensor) -> Tensor {
        match &self.scaler {
            Some(s) => s.scale_loss(loss),
            None => loss.shallow_clone(),
        }
    }

    /// Unscales the trainable variables' gradients; `Some(found_inf)` with a scaler.
    pub fn unscale(&self, vs: &nn::VarStore) -> Result<Option<Tensor>> {
        let Some(scaler) = &self.scaler else {
            return Ok(None);
        };
        let grads: Vec<Tensor> = vs
            .trainable_variables()
            .iter()
            .map(Tensor::grad)
            .filter(Tensor::defined)
            .collect();
        scaler.unscale(&grads).map(Some)
    }

    /// After the (possibly skipped) step of iteration `it`: updates the scale, counts and
    /// logs a skip. Returns whether the step was skipped.
    pub fn finish_step(&mut self, found_inf: Option<&Tensor>, it: usize) -> Result<bool> {
        let (Some(found), Some(scaler)) = (found_inf, self.scaler.as_mut()) else {
            return Ok(false);
        };
        let skipped = found.double_value(&[0]) != 0.0;
        scaler.update(found);
        if skipped {
            self.skipped_steps += 1;
            if let Some(path) = &self.log {
                let line = serde_json::json!({
                    "kind": "amp_skip",
                    "iteration": it + 1,
                    "skipped_steps": self.skipped_steps,
                    "loss_scale": scaler.scale(),
                });
                let mut file = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                writeln!(file, "{line}")
                    .with_context(|| format!("appending to {}", path.display()))?;
            }
        }
        Ok(skipped)
    }
}
