//! The training loop learns: a tiny DANet overfits one batch of shapes, the schedule is
//! the poly recipe, and a NaN loss stops training with a clear error.

use crate::common;

use common::*;
use segtool_core::dataset::{SegDataset, ShapesDataset};
use segtool_core::shapes::ShapesConfig;
use segtool_model_spec::BackboneSpec;
use segtool_train::data::{images_to_tensor, masks_to_tensor};
use segtool_train::{TrainConfig, Trainer};
use tch::Device;

#[test]
fn poly_schedule() {
    let cfg = TrainConfig {
        iterations: 100,
        lr: 0.01,
        ..TrainConfig::default()
    };
    assert_eq!(cfg.lr_at(0), 0.01);
    assert!((cfg.lr_at(50) - 0.01 * 0.5f64.powf(0.9)).abs() < 1e-15);
    assert_eq!(cfg.lr_at(100), 0.0);
}

#[test]
fn tiny_danet_overfits_one_batch() {
    let ds = ShapesDataset {
        config: ShapesConfig {
            width: 48,
            height: 48,
            ..Default::default()
        },
        offset: 0,
        count: 4,
    };
    let spec = spec(BackboneSpec::tiny(), 5);
    let samples: Vec<_> = (0..4).map(|i| ds.get(i).unwrap()).collect();
    let images = images_to_tensor(
        &samples.iter().map(|s| &s.image).collect::<Vec<_>>(),
        &spec,
        Device::Cpu,
    );
    let masks = masks_to_tensor(
        &samples.iter().map(|s| &s.mask).collect::<Vec<_>>(),
        Device::Cpu,
    );
    let cfg = TrainConfig {
        iterations: 1000,
        lr: 0.01,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, cfg).unwrap();
    let first = trainer.step(&images, &masks, 0).unwrap();
    let mut last = first;
    for it in 1..40 {
        last = trainer.step(&images, &masks, it).unwrap();
    }
    eprintln!("loss {first:.3} -> {last:.3}");
    assert!(last < 0.5 * first, "loss {first} -> {last}");
}

#[test]
fn non_finite_loss_is_reported() {
    let ds = ShapesDataset {
        config: ShapesConfig {
            width: 32,
            height: 32,
            ..Default::default()
        },
        offset: 0,
        count: 2,
    };
    let spec = spec(BackboneSpec::tiny(), 5);
    let cfg = TrainConfig {
        iterations: 5,
        batch_size: 2,
        lr: 1e12,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, cfg).unwrap();
    // An absurd learning rate blows the weights up after one step; the next loss is not finite.
    let err = trainer
        .train(std::sync::Arc::new(ds))
        .err()
        .expect("NaN must stop training")
        .to_string();
    assert!(
        err.contains("loss became") && err.contains("iteration"),
        "{err}"
    );
}
