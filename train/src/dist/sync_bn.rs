//! Synchronised BatchNorm: in training, batch statistics over the global batch (every
//! rank's), exactly — the forward all-reduces per-channel (sum, sum of squares, count),
//! the backward all-reduces (sum dy, sum dy * (x - mean)), as `torch.nn.SyncBatchNorm`.
//! The autograd function lives in the C++ shim (tch has no custom autograd functions).
//!
//! The model's BatchNorm layers call [`batch_norm_t`]; it uses SyncBN while a group is
//! installed with [`install`] (process-wide: one model trains per process) and plain
//! BatchNorm otherwise, so single-process runs are unchanged. Evaluation (`train ==
//! false`) always uses the running statistics.

use std::sync::{Arc, RwLock};

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::ProcessGroup;

static GROUP: RwLock<Option<Arc<ProcessGroup>>> = RwLock::new(None);

/// Uninstalls SyncBN when dropped.
#[must_use = "SyncBN is uninstalled when the guard is dropped"]
pub struct SyncBnGuard {
    _private: (),
}

impl Drop for SyncBnGuard {
    fn drop(&mut self) {
        *GROUP.write().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Makes every BatchNorm in training mode synchronise over `group` until the guard drops.
/// A group of one process keeps plain BatchNorm.
pub fn install(group: Arc<ProcessGroup>) -> SyncBnGuard {
    let group = (group.world_size() > 1).then_some(group);
    *GROUP.write().unwrap_or_else(|e| e.into_inner()) = group;
    SyncBnGuard { _private: () }
}

/// Whether SyncBN is installed.
pub fn active() -> bool {
    GROUP.read().unwrap_or_else(|e| e.into_inner()).is_some()
}

/// `xs.apply_t(bn, train)`, synchronised across ranks when SyncBN is installed and
/// `train` is set. Panics when a collective fails (a peer died or timed out): the forward
/// of a module has no error path, and the rank cannot continue anyway.
pub fn batch_norm_t(xs: &Tensor, bn: &nn::BatchNorm, train: bool) -> Tensor {
    if train {
        let group = GROUP.read().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(group) = group {
            // tch keeps a BatchNorm's config private; the model's are PyTorch's defaults
            // (crate::model::batch_norm), which these are.
            let defaults = nn::BatchNormConfig::default();
            return group
                .sync_batch_norm(
                    xs,
                    bn.ws.as_ref(),
                    bn.bs.as_ref(),
                    Some((&bn.running_mean, &bn.running_var)),
                    defaults.momentum,
                    defaults.eps,
                )
                .unwrap_or_else(|e| panic!("rank {}: {e:#}", group.rank()));
        }
    }
    bn.forward_t(xs, train)
}
