//! DANet's head: conv5a -> PAM -> conv51 and conv5c -> CAM -> conv52, summed, with a
//! classifier on each branch and on the sum.

use tch::nn::{self, ModuleT};
use tch::Tensor;

use std::sync::Arc;

use super::{batch_norm, bn_t, conv_1x1, conv_no_bias, AttentionImpl, Bn, Cam, Conv, Pam};
use crate::distributed::ProcessGroup;
use crate::qat::FakeQuant;

/// 3x3 conv, BN, ReLU, named `.0` and `.1` as PyTorch's `nn.Sequential`.
#[derive(Debug)]
struct ConvBnRelu {
    conv: Conv,
    bn: Bn,
}

impl ConvBnRelu {
    fn new(p: nn::Path, in_ch: i64, out_ch: i64) -> Self {
        Self {
            conv: conv_no_bias(&p / "0", in_ch, out_ch, 3, 1, 1, 1),
            bn: batch_norm(&p / "1", out_ch),
        }
    }

    /// With fake quantisation: the conv `{name}.0` reads `input`, its ReLU is `name`.
    fn forward_q(
        &self,
        xs: &Tensor,
        train: bool,
        q: &FakeQuant,
        name: &str,
        input: &str,
    ) -> Tensor {
        let node = format!("{name}.0");
        let y = q.conv(&node, input, xs, &self.conv, Some(&self.bn), train);
        q.read(name, &node, &y).relu()
    }

    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        // dist: SyncBN when the model has a group (DaNet::set_sync_bn), else plain BN.
        bn_t(&xs.apply(&self.conv), &self.bn, train).relu()
    }
}

/// Dropout2d then a 1x1 classifier, named `.1` as in PyTorch's Sequential.
#[derive(Debug)]
struct Classifier {
    conv: Conv,
}

impl Classifier {
    fn new(p: nn::Path, in_ch: i64, classes: i64) -> Self {
        Self {
            conv: conv_1x1(&p / "1", in_ch, classes),
        }
    }

    fn forward_t(&self, xs: &Tensor, dropout: Option<f64>) -> Tensor {
        match dropout {
            Some(p) if p > 0.0 => xs.feature_dropout(p, true).apply(&self.conv),
            _ => xs.apply(&self.conv),
        }
    }
}

#[derive(Debug)]
pub struct DaNetHead {
    conv5a: ConvBnRelu,
    conv5c: ConvBnRelu,
    pub sa: Pam,
    pub sc: Cam,
    conv51: ConvBnRelu,
    conv52: ConvBnRelu,
    conv6: Classifier,
    conv7: Classifier,
    conv8: Classifier,
    /// Dropout2d in training (on by default); tests turn it off to compare gradients
    /// with a reference that cannot share our random masks.
    pub dropout: bool,
    /// Dropout2d's probability (DANet and mmsegmentation: 0.1; 0 disables it).
    pub dropout_ratio: f64,
}

/// Dropout2d's default probability before each classifier (DANet, mmsegmentation).
pub const DEFAULT_DROPOUT: f64 = 0.1;

impl DaNetHead {
    /// DANet's head on `in_ch` features: `in_ch / 4` channels, `in_ch / 32` for PAM's
    /// query and key.
    pub fn new(p: &nn::Path, in_ch: i64, classes: i64) -> Self {
        Self::with_attention(
            p,
            [in_ch, in_ch / 4, in_ch / 32],
            classes,
            AttentionImpl::Explicit,
        )
    }

    /// `widths`: channels in, of the branches (`inter`), of PAM's query and key.
    pub fn with_attention(
        p: &nn::Path,
        widths: [i64; 3],
        classes: i64,
        attention: AttentionImpl,
    ) -> Self {
        let [in_ch, inter, qk] = widths;
        Self {
            conv5a: ConvBnRelu::new(p / "conv5a", in_ch, inter),
            conv5c: ConvBnRelu::new(p / "conv5c", in_ch, inter),
            sa: Pam::with_attention(&(p / "sa"), inter, qk, attention),
            sc: Cam::with_attention(&(p / "sc"), attention),
            conv51: ConvBnRelu::new(p / "conv51", inter, inter),
            conv52: ConvBnRelu::new(p / "conv52", inter, inter),
            conv6: Classifier::new(p / "conv6", inter, classes),
            conv7: Classifier::new(p / "conv7", inter, classes),
            conv8: Classifier::new(p / "conv8", inter, classes),
            dropout: true,
            dropout_ratio: DEFAULT_DROPOUT,
        }
    }

    /// Switches PAM and CAM together (same parameters either way).
    pub fn set_attention(&mut self, attention: AttentionImpl) {
        self.sa.attention = attention;
        self.sc.attention = attention;
    }

    /// dist: the head's BatchNorms synchronise over `group` in training (`None`: plain).
    pub fn set_sync_bn(&mut self, group: Option<Arc<ProcessGroup>>) {
        for c in [
            &mut self.conv5a,
            &mut self.conv5c,
            &mut self.conv51,
            &mut self.conv52,
        ] {
            c.bn.group = group.clone();
        }
    }

    /// (fused, position-only, channel-only) logits at feature resolution.
    pub fn forward_t(&self, x: &Tensor, train: bool) -> (Tensor, Tensor, Tensor) {
        let sa_feat = self
            .conv51
            .forward_t(&self.sa.forward(&self.conv5a.forward_t(x, train)), train);
        let sc_feat = self
            .conv52
            .forward_t(&self.sc.forward(&self.conv5c.forward_t(x, train)), train);
        let feat_sum = &sa_feat + &sc_feat;
        let dropout = (train && self.dropout).then_some(self.dropout_ratio);
        (
            self.conv8.forward_t(&feat_sum, dropout),
            self.conv6.forward_t(&sa_feat, dropout),
            self.conv7.forward_t(&sc_feat, dropout),
        )
    }
}

impl DaNetHead {
    /// [`DaNetHead::forward_t`] with fake quantisation `q` (QAT) on layer4's output, the
    /// exported tensor `input`. The branch classifiers (conv6, conv7) serve the training
    /// losses only (not exported) and stay float.
    pub(crate) fn forward_quantised(
        &self,
        x: &Tensor,
        train: bool,
        q: &FakeQuant,
        input: &str,
    ) -> (Tensor, Tensor, Tensor) {
        let sa = self.conv5a.forward_q(x, train, q, "head.conv5a", input);
        let sa = self.sa.forward_quantised(&sa, Some(q));
        let sa_feat = self
            .conv51
            .forward_q(&sa, train, q, "head.conv51", "head.sa");
        let sc = self.conv5c.forward_q(x, train, q, "head.conv5c", input);
        let sc = self.sc.forward_quantised(&sc, Some(q));
        let sc_feat = self
            .conv52
            .forward_q(&sc, train, q, "head.conv52", "head.sc");
        let feat_sum = q.read("head.feat_sum", "head.conv51", &sa_feat)
            + q.read("head.feat_sum", "head.conv52", &sc_feat);
        let dropout = (train && self.dropout).then_some(self.dropout_ratio);
        let xq = q.read("head.conv8.1", "head.feat_sum", &feat_sum);
        let xq = match dropout {
            Some(p) if p > 0.0 => xq.feature_dropout(p, true),
            _ => xq,
        };
        // conv8 after the read: its input is already quantised (the read is idempotent).
        let fused = q.conv(
            "head.conv8.1",
            "head.feat_sum",
            &xq,
            &self.conv8.conv,
            None,
            train,
        );
        (
            fused,
            self.conv6.forward_t(&sa_feat, dropout),
            self.conv7.forward_t(&sc_feat, dropout),
        )
    }
}

impl ModuleT for DaNetHead {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        DaNetHead::forward_t(self, xs, train).0
    }
}
