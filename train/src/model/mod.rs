//! DANet in tch, one file per layer family. Variable paths mirror DANet v0.5.0's
//! PyTorch state dict (`pretrained.layer1.0.conv1.weight`, `head.sa.gamma`, ...) so
//! checkpoints move between the two unchanged.

pub mod attention;
mod aux_head;
mod cost;
mod danet;
mod head;
mod resnet;

pub use attention::{AttentionImpl, Cam, Pam};
pub use aux_head::AuxHead;
pub use cost::{
    attention_matrix_bytes, feature_size, module_costs, pam_cam_attention_bytes, AttentionBytes,
    ModuleCost,
};
pub use danet::{DaNet, DaNetOutputs};
pub use head::{DaNetHead, DEFAULT_DROPOUT};
pub use resnet::ResNet;

use std::sync::Arc;

use tch::nn;

use crate::distributed::ProcessGroup;

/// A BatchNorm layer and, for SyncBN, the process group it synchronises over (set by
/// [`DaNet::set_sync_bn`]; `None`: plain BatchNorm).
#[derive(Debug)]
pub(crate) struct Bn {
    pub bn: nn::BatchNorm,
    pub group: Option<Arc<ProcessGroup>>,
}

/// BatchNorm as PyTorch's default (eps 1e-5, momentum 0.1), named `weight`, `bias`,
/// `running_mean`, `running_var`.
pub(crate) fn batch_norm(p: nn::Path, channels: i64) -> Bn {
    Bn {
        bn: nn::batch_norm2d(p, channels, Default::default()),
        group: None,
    }
}

/// A BatchNorm layer's forward: synchronised over the ranks when the layer holds a group
/// (distributed training, [`crate::distributed::sync_bn`]), plain BatchNorm otherwise.
pub(crate) fn bn_t(xs: &tch::Tensor, bn: &Bn, train: bool) -> tch::Tensor {
    crate::distributed::sync_bn::batch_norm_t(xs, &bn.bn, bn.group.as_deref(), train)
}

/// Bias-free convolution, as every conv in the backbone and the head's 3x3 convs.
pub(crate) fn conv_no_bias(
    p: nn::Path,
    in_ch: i64,
    out_ch: i64,
    kernel: i64,
    stride: i64,
    padding: i64,
    dilation: i64,
) -> nn::Conv2D {
    let cfg = nn::ConvConfig {
        stride,
        padding,
        dilation,
        bias: false,
        ..Default::default()
    };
    nn::conv2d(p, in_ch, out_ch, kernel, cfg)
}
