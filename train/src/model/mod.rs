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

/// A 2D convolution and its geometry (tch keeps the geometry private): QAT runs it with
/// a fake-quantised, BN-folded weight ([`crate::qat`]).
#[derive(Debug)]
pub(crate) struct Conv {
    pub inner: nn::Conv2D,
    pub stride: i64,
    pub padding: i64,
    pub dilation: i64,
}

impl nn::Module for Conv {
    fn forward(&self, xs: &tch::Tensor) -> tch::Tensor {
        xs.apply(&self.inner)
    }
}

impl Conv {
    /// This convolution with `weight` and `bias` in place of its own.
    pub fn with(
        &self,
        xs: &tch::Tensor,
        weight: &tch::Tensor,
        bias: Option<&tch::Tensor>,
    ) -> tch::Tensor {
        xs.conv2d(
            weight,
            bias,
            [self.stride, self.stride],
            [self.padding, self.padding],
            [self.dilation, self.dilation],
            1,
        )
    }
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
) -> Conv {
    let cfg = nn::ConvConfig {
        stride,
        padding,
        dilation,
        bias: false,
        ..Default::default()
    };
    Conv {
        inner: nn::conv2d(p, in_ch, out_ch, kernel, cfg),
        stride,
        padding,
        dilation,
    }
}

/// A 1x1 convolution with a bias (PAM's projections, the classifiers).
pub(crate) fn conv_1x1(p: nn::Path, in_ch: i64, out_ch: i64) -> Conv {
    Conv {
        inner: nn::conv2d(p, in_ch, out_ch, 1, Default::default()),
        stride: 1,
        padding: 0,
        dilation: 1,
    }
}
