//! SGD and the learning-rate schedule, written out rather than taken from tch's
//! `nn::Optimizer`: a resumable run must save and restore the momentum buffers, and
//! libtorch's C++ optimiser does not expose them through tch.
//!
//! The update is PyTorch's `torch.optim.SGD` (dampening 0), per parameter:
//! `d = g + wd * p; buf = d` on the first step, else `buf = m * buf + d`;
//! `d = d + m * buf` with Nesterov, else `d = buf`; `p -= lr * d`.

use std::collections::BTreeMap;

use segtool_core::config::PolyForm;
use tch::{nn, Tensor};

use crate::model::DaNet;

/// Learning rate per iteration: poly decay `(base_lr - min_lr) * (1 - it / total)^power +
/// min_lr` (mmengine's `PolyLR` with `eta_min = min_lr`, in closed form; DANet's with
/// `min_lr = 0`), with an optional linear warm-up (mmsegmentation's): during the first
/// `warmup_iters` the poly value is scaled from `warmup_ratio` up to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LrSchedule {
    pub base_lr: f64,
    pub total_iters: usize,
    pub power: f64,
    pub warmup_iters: usize,
    pub warmup_ratio: f64,
    /// The floor the decay ends at, for every parameter group alike (mmengine's `eta_min`).
    pub min_lr: f64,
    /// DANet's `it / total_iters`, or mmengine's `it / (total_iters - 1)` (its PolyLR's
    /// `total_iters = end - begin - 1`: `min_lr` at the last iteration).
    pub form: PolyForm,
}

impl LrSchedule {
    /// Backbone learning rate at iteration `it` (0-based).
    pub fn at(&self, it: usize) -> f64 {
        self.warmed(it, self.base_lr)
    }

    /// Learning rate at iteration `it` of a parameter group whose base rate is
    /// `base_lr * mult` (the head's `head_lr_mult`); it decays to the same `min_lr`, as an
    /// mmengine scheduler's `eta_min` applies to every group. With `min_lr = 0` this is
    /// exactly `at(it) * mult`.
    pub fn scaled_at(&self, it: usize, mult: f64) -> f64 {
        if self.min_lr == 0.0 {
            self.at(it) * mult
        } else {
            self.warmed(it, self.base_lr * mult)
        }
    }

    /// Poly decay from `base` to `min_lr`, times the warm-up factor.
    fn warmed(&self, it: usize, base: f64) -> f64 {
        let total = match self.form {
            PolyForm::Danet => self.total_iters,
            PolyForm::Mmengine => self.total_iters.saturating_sub(1),
        };
        let progress = (it as f64 / total.max(1) as f64).min(1.0);
        let factor = (1.0 - progress).max(0.0).powf(self.power);
        let poly = if self.min_lr == 0.0 {
            base * factor
        } else {
            (base - self.min_lr) * factor + self.min_lr
        };
        if it < self.warmup_iters {
            let k = (1.0 - it as f64 / self.warmup_iters as f64) * (1.0 - self.warmup_ratio);
            poly * (1.0 - k)
        } else {
            poly
        }
    }
}

/// SGD's hyperparameters besides the learning rate (which the schedule sets per step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdConfig {
    pub momentum: f64,
    /// L2 penalty added to the gradient (PyTorch's `weight_decay`).
    pub weight_decay: f64,
    pub nesterov: bool,
}

impl Default for SgdConfig {
    /// The published recipe: momentum 0.9, weight decay 1e-4, no Nesterov.
    fn default() -> Self {
        Self {
            momentum: 0.9,
            weight_decay: 1e-4,
            nesterov: false,
        }
    }
}

struct Param {
    tensor: Tensor,
    group: usize,
    momentum: Option<Tensor>,
}

/// SGD over the trainable variables of a VarStore, in two groups (backbone, head) whose
/// learning rates are set per step.
pub struct Sgd {
    config: SgdConfig,
    /// By variable name, so the state saves and loads by name.
    params: BTreeMap<String, Param>,
}

/// Prefix of momentum buffers in a checkpoint: `optimizer.momentum.<variable name>`.
pub const MOMENTUM_PREFIX: &str = "optimizer.momentum.";

impl Sgd {
    pub fn new(vs: &nn::VarStore, config: SgdConfig) -> Self {
        let params = vs
            .variables()
            .into_iter()
            .filter(|(_, t)| t.requires_grad())
            .map(|(name, tensor)| {
                let group = if name.starts_with("head.") {
                    DaNet::HEAD_GROUP
                } else {
                    DaNet::BACKBONE_GROUP
                };
                let param = Param {
                    tensor,
                    group,
                    momentum: None,
                };
                (name, param)
            })
            .collect();
        Self { config, params }
    }

    pub fn zero_grad(&mut self) {
        for p in self.params.values_mut() {
            let mut grad = p.tensor.grad();
            if grad.defined() {
                let _ = grad.zero_();
            }
        }
    }

    /// Global L2 norm of all gradients (parameters without one are skipped).
    pub fn grad_norm(&self) -> f64 {
        let squares: Vec<Tensor> = self
            .params
            .values()
            .map(|p| p.tensor.grad())
            .filter(|g| g.defined())
            .map(|g| g.detach().pow_tensor_scalar(2).sum(tch::Kind::Float))
            .collect();
        if squares.is_empty() {
            return 0.0;
        }
        Tensor::stack(&squares, 0)
            .sum(tch::Kind::Float)
            .sqrt()
            .double_value(&[])
    }

    /// `torch.nn.utils.clip_grad_norm_`: scales every gradient by `max / (norm + 1e-6)`
    /// when the global norm exceeds `max`. Returns the norm before clipping.
    pub fn clip_grad_norm(&mut self, max: f64) -> f64 {
        let norm = self.grad_norm();
        let scale = max / (norm + 1e-6);
        if scale < 1.0 {
            for p in self.params.values() {
                let mut grad = p.tensor.grad();
                if grad.defined() {
                    let _ = grad.g_mul_scalar_(scale);
                }
            }
        }
        norm
    }

    /// One update with `lr[group]` per parameter group.
    pub fn step(&mut self, lr: [f64; 2]) {
        let SgdConfig {
            momentum,
            weight_decay,
            nesterov,
        } = self.config;
        tch::no_grad(|| {
            for p in self.params.values_mut() {
                let grad = p.tensor.grad();
                if !grad.defined() {
                    continue; // as PyTorch: no gradient, no decay, no momentum update
                }
                let mut d = if weight_decay != 0.0 {
                    &grad + &p.tensor * weight_decay
                } else {
                    grad.copy()
                };
                if momentum != 0.0 {
                    let buf = match p.momentum.as_mut() {
                        Some(buf) => {
                            let _ = buf.g_mul_scalar_(momentum).g_add_(&d);
                            buf
                        }
                        None => p.momentum.insert(d.copy()),
                    };
                    d = if nesterov {
                        d + &*buf * momentum
                    } else {
                        buf.shallow_clone()
                    };
                }
                let _ = p.tensor.g_add_(&(d * -lr[p.group]));
            }
        });
    }

    /// Momentum buffers by checkpoint name ([`MOMENTUM_PREFIX`] + variable name).
    pub fn state(&self) -> Vec<(String, Tensor)> {
        self.params
            .iter()
            .filter_map(|(name, p)| {
                let buf = p.momentum.as_ref()?;
                Some((format!("{MOMENTUM_PREFIX}{name}"), buf.shallow_clone()))
            })
            .collect()
    }

    /// Restores momentum buffers; `lookup` returns the saved tensor for a checkpoint
    /// name, or `None` for a parameter that had taken no step yet.
    pub fn load_state(
        &mut self,
        mut lookup: impl FnMut(&str) -> anyhow::Result<Option<Tensor>>,
    ) -> anyhow::Result<()> {
        for (name, p) in self.params.iter_mut() {
            p.momentum = match lookup(&format!("{MOMENTUM_PREFIX}{name}"))? {
                Some(t) => {
                    if t.size() != p.tensor.size() {
                        anyhow::bail!(
                            "momentum buffer of `{name}` has shape {:?}, parameter {:?}",
                            t.size(),
                            p.tensor.size()
                        );
                    }
                    Some(t.to_device(p.tensor.device()).to_kind(p.tensor.kind()))
                }
                None => None,
            };
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poly_with_warmup() {
        let s = LrSchedule {
            base_lr: 0.01,
            total_iters: 100,
            power: 0.9,
            warmup_iters: 10,
            warmup_ratio: 0.1,
            min_lr: 0.0,
            form: PolyForm::Danet,
        };
        assert!((s.at(0) - 0.001).abs() < 1e-12);
        let poly = |it: f64| 0.01 * (1.0 - it / 100.0).powf(0.9);
        assert!((s.at(5) - poly(5.0) * 0.55).abs() < 1e-12);
        assert!((s.at(10) - poly(10.0)).abs() < 1e-12);
        assert_eq!(s.at(100), 0.0);
        let no_warmup = LrSchedule {
            warmup_iters: 0,
            ..s
        };
        assert!((no_warmup.at(0) - 0.01).abs() < 1e-15);
    }

    #[test]
    fn poly_with_floor_ends_at_min_lr_for_every_group() {
        let s = LrSchedule {
            base_lr: 0.01,
            total_iters: 80,
            power: 0.9,
            warmup_iters: 0,
            warmup_ratio: 1.0,
            min_lr: 1e-4,
            form: PolyForm::Danet,
        };
        assert_eq!(s.at(0), 0.01);
        assert!((s.at(80) - 1e-4).abs() < 1e-18);
        assert!((s.scaled_at(80, 10.0) - 1e-4).abs() < 1e-18);
        let f = (1.0f64 - 20.0 / 80.0).powf(0.9);
        assert!((s.at(20) - ((0.01 - 1e-4) * f + 1e-4)).abs() < 1e-17);
        assert!((s.scaled_at(20, 10.0) - ((0.1 - 1e-4) * f + 1e-4)).abs() < 1e-17);
        // Without a floor the head is exactly the backbone rate times the multiplier.
        let no_floor = LrSchedule { min_lr: 0.0, ..s };
        for it in [0, 7, 33, 79] {
            assert_eq!(no_floor.scaled_at(it, 10.0), no_floor.at(it) * 10.0);
        }
        // mmengine's PolyLR: total_iters = end - 1, the floor reached at the last iteration.
        let mm = LrSchedule {
            form: PolyForm::Mmengine,
            ..s
        };
        assert_eq!(mm.at(79), 1e-4);
        let f = (1.0f64 - 20.0 / 79.0).powf(0.9);
        assert!((mm.at(20) - ((0.01 - 1e-4) * f + 1e-4)).abs() < 1e-17);
    }
}
