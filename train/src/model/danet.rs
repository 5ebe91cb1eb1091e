//! The whole network: dilated ResNet (`pretrained.*`) + DANet head (`head.*`), three
//! outputs upsampled to the input size (align_corners as the spec says: true for DANet's
//! code, false for most mmsegmentation configs), and mmsegmentation's auxiliary FCN head
//! (`auxlayer.*`) when the spec has one.

use std::sync::Arc;

use segtool_model_spec::ModelSpec;
use tch::nn::{self, ModuleT};
use tch::Tensor;

use super::{AttentionImpl, AuxHead, DaNetHead, ResNet};
use crate::distributed::ProcessGroup;
use crate::qat::FakeQuant;

/// Optimiser group of the backbone's parameters; the head's are in [`DaNet::HEAD_GROUP`]
/// so that they can train at 10x the learning rate.
pub const BACKBONE_GROUP: usize = 0;

#[derive(Debug)]
pub struct DaNet {
    pub spec: ModelSpec,
    pretrained: ResNet,
    pub head: DaNetHead,
    /// mmsegmentation's auxiliary head on layer3 (training loss only).
    pub aux: Option<AuxHead>,
    sync_bn: bool,
    /// QAT: fake quantisation in the forward ([`crate::qat`]).
    qat: Option<Arc<FakeQuant>>,
}

/// DANet's three outputs at input resolution.
pub struct DaNetOutputs {
    /// conv8 on the summed features: the prediction.
    pub fused: Tensor,
    /// conv6 on the position-attention branch.
    pub position: Tensor,
    /// conv7 on the channel-attention branch.
    pub channel: Tensor,
    /// The auxiliary FCN head's logits, when the model has one.
    pub aux: Option<Tensor>,
}

impl DaNet {
    pub const BACKBONE_GROUP: usize = BACKBONE_GROUP;
    pub const HEAD_GROUP: usize = 1;

    /// DANet with the explicit (paper) attention.
    pub fn new(root: &nn::Path, spec: &ModelSpec) -> Self {
        Self::with_attention(root, spec, AttentionImpl::Explicit)
    }

    /// DANet whose PAM and CAM compute attention with `attention`; the variables (names,
    /// shapes) do not depend on it, so checkpoints load into either.
    pub fn with_attention(root: &nn::Path, spec: &ModelSpec, attention: AttentionImpl) -> Self {
        let pretrained = ResNet::new(
            &(root / "pretrained").set_group(Self::BACKBONE_GROUP),
            &spec.backbone,
        );
        let classes = spec.num_classes() as i64;
        let head = DaNetHead::with_attention(
            &(root / "head").set_group(Self::HEAD_GROUP),
            [
                spec.backbone.out_channels(),
                spec.inter_channels(),
                spec.qk_channels(),
            ],
            classes,
            attention,
        );
        // Trained with the head's learning rate, as PyTorch-Encoding's `auxlayer`.
        let aux = spec.aux_head.as_ref().map(|a| {
            let p = (root / "auxlayer").set_group(Self::HEAD_GROUP);
            AuxHead::new(&p, a, spec.backbone.layer_channels(a.in_layer), classes)
        });
        Self {
            spec: spec.clone(),
            pretrained,
            head,
            aux,
            sync_bn: false,
            qat: None,
        }
    }

    pub fn attention(&self) -> AttentionImpl {
        self.head.sa.attention
    }

    /// Switches both attention modules (e.g. to compare implementations on one model).
    pub fn set_attention(&mut self, attention: AttentionImpl) {
        self.head.set_attention(attention);
    }

    /// Dropout2d before the classifiers in training mode (default on). Off, a training
    /// forward is deterministic: gradient tests compare against a reference this way.
    pub fn set_dropout(&mut self, on: bool) {
        self.head.dropout = on;
    }

    /// Dropout2d's probability before every classifier, the auxiliary head's included
    /// (mmsegmentation's `dropout_ratio`; 0 disables it).
    pub fn set_dropout_ratio(&mut self, p: f64) {
        self.head.dropout_ratio = p;
    }

    /// Frozen backbone BatchNorm (see [`ResNet::set_frozen_bn`]); the head's BN trains.
    pub fn set_frozen_bn(&mut self, frozen: bool) {
        self.pretrained.set_frozen_bn(frozen);
    }

    pub fn frozen_bn(&self) -> bool {
        self.pretrained.frozen_bn()
    }

    /// dist: SyncBN. Every BatchNorm (backbone and head) normalises a training forward
    /// with the statistics of the global batch, all-reduced over `group`, as
    /// `torch.nn.SyncBatchNorm`; evaluation uses the running statistics as ever. A group of
    /// one process, or `None`, keeps plain BatchNorm. The group is held by the layers.
    pub fn set_sync_bn(&mut self, group: Option<Arc<ProcessGroup>>) {
        let group = group.filter(|g| g.world_size() > 1);
        self.sync_bn = group.is_some();
        self.pretrained.set_sync_bn(group.clone());
        if let Some(aux) = &mut self.aux {
            aux.set_sync_bn(group.clone());
        }
        self.head.set_sync_bn(group);
    }

    /// Whether the BatchNorms synchronise over a process group ([`DaNet::set_sync_bn`]).
    pub fn sync_bn(&self) -> bool {
        self.sync_bn
    }

    /// QAT: forwards fake-quantise as `qat` says from now on (`None`: float).
    pub fn set_qat(&mut self, qat: Option<Arc<FakeQuant>>) {
        self.qat = qat;
    }

    /// The model's fake quantisation, when it trains with QAT.
    pub fn qat(&self) -> Option<&Arc<FakeQuant>> {
        self.qat.as_ref()
    }

    pub fn forward_all(&self, xs: &Tensor, train: bool) -> DaNetOutputs {
        let (_, _, h, w) = xs.size4().expect("DANet input is NCHW");
        let tap = self.aux.as_ref().map(|a| a.in_layer);
        let q = self.qat.as_deref();
        if let Some(q) = q {
            q.begin_forward(train);
        }
        let ((features, tapped), feat_name) = self.pretrained.forward_quantised(xs, train, tap, q);
        let (fused, position, channel) = match q {
            Some(q) => self.head.forward_quantised(&features, train, q, &feat_name),
            None => self.head.forward_t(&features, train),
        };
        let align_corners = self.spec.align_corners;
        let up = |t: Tensor| t.upsample_bilinear2d([h, w], align_corners, None, None);
        let dropout = (train && self.head.dropout).then_some(self.head.dropout_ratio);
        let aux = match (&self.aux, tapped) {
            (Some(aux), Some(x)) => Some(up(aux.forward_t(&x, train, dropout))),
            _ => None,
        };
        DaNetOutputs {
            fused: up(fused),
            position: up(position),
            channel: up(channel),
            aux,
        }
    }
}

impl ModuleT for DaNet {
    fn forward_t(&self, xs: &Tensor, train: bool) -> Tensor {
        self.forward_all(xs, train).fused
    }
}
