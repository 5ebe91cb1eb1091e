//! `TrainConfig::freeze_bn` through the real optimiser: SGD steps (momentum, weight decay)
//! leave every backbone BatchNorm — affine and running statistics — exactly as loaded,
//! while convolutions and the head's BatchNorms train. (Numerical agreement of the
//! frozen forward/backward with PyTorch's norm_eval is in pytorch_train_parity.rs.)

use crate::common;

use std::collections::HashMap;

use common::*;
use segtool_model_spec::BackboneSpec;
use segtool_train::{TrainConfig, Trainer};
use tch::{Kind, Tensor};

#[test]
fn sgd_leaves_frozen_backbone_bn_untouched() {
    let spec = spec(
        BackboneSpec {
            deep_stem: true,
            stem_widths: None,
            contract_dilation: true,
            ..BackboneSpec::tiny()
        },
        3,
    );
    let config = TrainConfig {
        iterations: 10,
        batch_size: 2,
        lr: 0.05,
        progress: false,
        freeze_bn: true,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, config).unwrap();
    assert!(trainer.model.frozen_bn());
    let before: HashMap<String, Tensor> = trainer
        .vs
        .variables()
        .into_iter()
        .map(|(n, t)| (n, t.copy()))
        .collect();
    let images = Tensor::randn([2, 3, 48, 48], (Kind::Float, tch::Device::Cpu));
    let masks = Tensor::randint(3, [2, 48, 48], (Kind::Int64, tch::Device::Cpu));
    for it in 0..2 {
        trainer.step(&images, &masks, it).unwrap();
    }
    for (name, var) in trainer.vs.variables() {
        let unchanged = var.equal(&before[&name]);
        let backbone_bn = name.starts_with("pretrained.")
            && (name.contains(".bn")
                || name.contains("downsample.1")
                || name.contains("conv1.1")
                || name.contains("conv1.4"));
        if backbone_bn {
            assert!(unchanged, "{name} is frozen but changed");
        } else {
            assert!(!unchanged, "{name} should train");
        }
    }
}
