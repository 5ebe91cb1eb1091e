//! Synchronised BatchNorm: in training, batch statistics over the global batch (every
//! rank's), exactly — the forward all-reduces per-channel (sum, sum of squares, count),
//! the backward all-reduces (sum dy, sum dy * (x - mean)), as `torch.nn.SyncBatchNorm`.
//! The autograd function lives in the C++ shim (tch has no custom autograd functions).
//!
//! The group is held by the model: [`crate::DaNet::set_sync_bn`] (or
//! [`crate::Trainer::enable_sync_bn`]) hands it to every BatchNorm layer, whose forward
//! calls [`batch_norm_t`] with it. Layers without a group use plain BatchNorm, so
//! single-process runs are unchanged, and two models in one process do not share a
//! setting. Evaluation (`train == false`) always uses the running statistics.

use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::ProcessGroup;

/// `xs.apply_t(bn, train)`, synchronised across the ranks of `group` when one is given
/// and `train` is set. Panics when a collective fails (a peer died or timed out): the
/// forward of a module has no error path, and the rank cannot continue anyway.
pub fn batch_norm_t(
    xs: &Tensor,
    bn: &nn::BatchNorm,
    group: Option<&ProcessGroup>,
    train: bool,
) -> Tensor {
    if let (true, Some(group)) = (train, group) {
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
    bn.forward_t(xs, train)
}
