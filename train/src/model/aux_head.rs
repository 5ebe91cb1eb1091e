//! The auxiliary FCN head on layer3 (mmsegmentation's `auxiliary_head`, PyTorch-Encoding's
//! `auxlayer`): 3x3 conv, BN, ReLU, Dropout2d, 1x1 classifier. Training only: its logits
//! add `loss_weight x CE` to the loss and are exported only when asked.
//!
//! Variable names mirror PyTorch-Encoding's `FCNHead` Sequential `auxlayer.conv5.{0,1,4}`
//! (indices 2 and 3 are the parameter-free ReLU and Dropout2d).

use std::sync::Arc;

use segtool_model_spec::spec::AuxHeadSpec;
use tch::nn;
use tch::Tensor;

use super::{batch_norm, bn_t, conv_1x1, conv_no_bias, Bn, Conv};
use crate::distributed::ProcessGroup;

#[derive(Debug)]
pub struct AuxHead {
    conv: Conv,
    bn: Bn,
    classifier: Conv,
    /// The backbone stage it reads (1-based).
    pub in_layer: usize,
}

impl AuxHead {
    /// Under `p` (`auxlayer`), reading `in_ch` channels of layer `spec.in_layer`.
    pub fn new(p: &nn::Path, spec: &AuxHeadSpec, in_ch: i64, classes: i64) -> Self {
        let s = p / "conv5";
        Self {
            conv: conv_no_bias(&s / "0", in_ch, spec.channels, 3, 1, 1, 1),
            bn: batch_norm(&s / "1", spec.channels),
            classifier: conv_1x1(&s / "4", spec.channels, classes),
            in_layer: spec.in_layer,
        }
    }

    /// Logits at feature resolution; `dropout`: Dropout2d's probability in training.
    pub fn forward_t(&self, x: &Tensor, train: bool, dropout: Option<f64>) -> Tensor {
        let x = bn_t(&x.apply(&self.conv), &self.bn, train).relu();
        match dropout {
            Some(p) if train && p > 0.0 => x.feature_dropout(p, true),
            _ => x,
        }
        .apply(&self.classifier)
    }

    /// dist: its BatchNorm synchronises over `group` in training (`None`: plain).
    pub fn set_sync_bn(&mut self, group: Option<Arc<ProcessGroup>>) {
        self.bn.group = group;
    }
}
