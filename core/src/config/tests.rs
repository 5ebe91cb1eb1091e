use super::*;

fn cityscapes() -> RunConfig {
    RunConfig::preset("cityscapes-danet-r101").unwrap()
}

/// Field by field against DESIGN.md's "Training recipe (Cityscapes, the published one)"
/// and its evaluation protocol.
#[test]
fn cityscapes_preset_is_the_published_recipe() {
    let c = cityscapes();
    c.validate().unwrap();
    assert_eq!(c.name, "cityscapes-danet-r101");
    assert_eq!(c.run_dir(), Path::new("runs/cityscapes-danet-r101"));

    // Backbone: ResNet-101, OS8, DANet's multi-grid, the released DANet101's 7x7 stem.
    assert_eq!(c.model.backbone, "resnet101");
    assert_eq!(c.model.output_stride, 8);
    assert!(!c.model.deep_stem);
    assert_eq!(c.model.multi_grid, Some(vec![4, 8, 16]));
    assert_eq!(c.model.attention, AttentionImpl::Explicit);
    let b = c.backbone_spec().unwrap();
    assert_eq!(b.layers, [3, 4, 23, 3]);
    assert_eq!(b.out_channels(), 2048);
    assert!(c.data.dataset.starts_with("cityscapes:"));
    assert_eq!(c.data.train_split, "train");
    assert_eq!(c.data.val_split, "val");

    // 4 GPUs x 2 images, global batch 8.
    assert_eq!(c.optim.batch_size, 2);
    assert_eq!(c.optim.world_size, 4);
    assert_eq!(c.optim.accumulation, 1);
    assert_eq!(c.global_batch(), 8);

    // 240 epochs of 2975 images with drop_last: 371 it/epoch.
    assert_eq!(c.optim.iterations, 0);
    assert_eq!(c.optim.epochs, Some(240));
    assert_eq!(c.iterations_per_epoch(2975), 371);
    assert_eq!(c.total_iterations(2975), 240 * 371);
    assert_eq!(c.total_iterations(2975), 89040);

    // SGD momentum 0.9, wd 1e-4, lr 0.003, head x10, poly 0.9, no warm-up.
    assert_eq!(c.optim.momentum, 0.9);
    assert!(!c.optim.nesterov);
    assert_eq!(c.optim.weight_decay, 1e-4);
    assert_eq!(c.optim.lr, 0.003);
    assert_eq!(c.effective_lr(), 0.003);
    assert_eq!(c.optim.head_lr_mult, 10.0);
    assert_eq!(c.optim.poly_power, 0.9);
    assert_eq!(c.optim.warmup_iters, 0);

    // CE on the three outputs, weight 1 each; SyncBN; nothing else.
    assert_eq!(c.optim.loss_weights, [1.0, 1.0, 1.0]);
    assert!(!c.optim.ohem);
    assert!(c.optim.sync_bn);
    assert_eq!(c.optim.grad_clip_norm, None);
    assert!(!c.optim.amp);

    // Flip, short side U(0.75, 2.0) x 1024, crop 768, nothing else.
    assert!(c.augment.flip);
    assert_eq!(c.augment.base_size, 1024);
    assert_eq!(c.augment.scale_range, Some([0.75, 2.0]));
    assert_eq!(c.augment.crop_size, Some(768));
    assert_eq!(c.augment.color_jitter, 0.0);
    assert_eq!(c.augment.blur_prob, 0.0);

    // Sliding window 768 / stride 512, flip, single scale.
    assert_eq!(c.eval.mode, EvalMode::Sliding);
    assert_eq!(c.eval.crop_size, Some(768));
    assert_eq!(c.eval.stride, Some(512));
    assert!(c.eval.flip);
    assert_eq!(c.eval.scales, vec![1.0]);
}

#[test]
fn every_preset_parses_and_validates() {
    let names = RunConfig::preset_names();
    assert!(names.contains(&"shapes-tiny"));
    assert_eq!(
        names.len(),
        20,
        "4 segtool presets and 16 mmsegmentation ones"
    );
    for name in names {
        let c = RunConfig::preset(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.name, name, "a preset's run name is its file stem");
        c.backbone_spec().unwrap();
    }
    assert!(RunConfig::preset("shapes-tiny.toml").is_ok());
}

#[test]
fn other_presets_hold_their_stated_values() {
    let ade = RunConfig::preset("ade20k-danet-r101").unwrap();
    assert_eq!(
        (ade.augment.base_size, ade.augment.crop_size),
        (520, Some(480))
    );
    assert_eq!(ade.global_batch(), 16);
    assert_eq!(ade.effective_lr(), 0.004);
    assert_eq!(ade.total_iterations(20210), 180 * 1263);
    let voc = RunConfig::preset("voc-danet-r101").unwrap();
    assert_eq!(
        (voc.augment.base_size, voc.augment.crop_size),
        (520, Some(480))
    );
    assert_eq!(voc.total_iterations(10582), 80 * 661);
    let tiny = RunConfig::preset("shapes-tiny").unwrap();
    assert_eq!(tiny.model.backbone, "tiny");
    assert_eq!(tiny.data.dataset, "shapes");
    assert_eq!(tiny.optim.batch_size, 8);
    assert_eq!(tiny.total_iterations(2000), 600);
}

#[test]
fn unknown_preset_lists_the_known_ones() {
    let err = RunConfig::preset("cityscapes").unwrap_err().to_string();
    assert!(
        err.contains("\"cityscapes\"") && err.contains("cityscapes-danet-r101"),
        "{err}"
    );
}

#[test]
fn empty_document_is_the_default_and_valid() {
    let c = RunConfig::from_toml_str("").unwrap();
    assert_eq!(c, RunConfig::default());
    c.validate().unwrap();
}

#[test]
fn unknown_key_is_an_error_naming_it() {
    let err = RunConfig::from_toml_str("[optim]\nlr = 0.01\nlrr = 0.02\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("lrr"), "{err}");
    let err = RunConfig::from_toml_str("[optimizer]\nlr = 0.01\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("optimizer"), "{err}");
    let err = RunConfig::from_toml_str("nmae = \"x\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("nmae"), "{err}");
}

#[test]
fn wrong_types_and_variants_are_errors() {
    assert!(RunConfig::from_toml_str("[optim]\nbatch_size = \"8\"\n").is_err());
    let err = RunConfig::from_toml_str("[model]\nattention = \"flash\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("flash"), "{err}");
    // An integer where a float is expected is fine: `lr = 1` means 1.0.
    let c = RunConfig::from_toml_str("[optim]\nhead_lr_mult = 5\n").unwrap();
    assert_eq!(c.optim.head_lr_mult, 5.0);
}

#[test]
fn load_names_the_file() {
    let dir = std::env::temp_dir().join(format!("segtool-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("bad.toml");
    std::fs::write(&path, "[eval]\nstrid = 3\n").unwrap();
    let err = RunConfig::load(&path).unwrap_err().to_string();
    assert!(err.contains("bad.toml") && err.contains("strid"), "{err}");
    let good = dir.join("good.toml");
    std::fs::write(&good, cityscapes().to_toml_string()).unwrap();
    assert_eq!(RunConfig::load(&good).unwrap(), cityscapes());
    assert_eq!(
        RunConfig::preset_or_file(good.to_str().unwrap()).unwrap(),
        cityscapes()
    );
    let missing = RunConfig::load(dir.join("missing.toml"))
        .unwrap_err()
        .to_string();
    assert!(missing.contains("missing.toml"), "{missing}");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(
        RunConfig::preset_or_file("shapes-tiny").unwrap().name,
        "shapes-tiny"
    );
}

#[test]
fn override_changes_nested_values() {
    let mut c = cityscapes();
    c.apply_override("optim.lr=0.01").unwrap();
    assert_eq!(c.optim.lr, 0.01);
    c.apply_override("optim.world_size = 1").unwrap();
    assert_eq!(c.global_batch(), 2);
    c.apply_override("model.multi_grid=[1,2,4]").unwrap();
    assert_eq!(c.model.multi_grid, Some(vec![1, 2, 4]));
    // Bare words and paths are strings; enums take their names.
    c.apply_override("data.dataset=cityscapes:/data/cs")
        .unwrap();
    assert_eq!(c.data.dataset, "cityscapes:/data/cs");
    c.apply_override("model.attention=sdpa").unwrap();
    assert_eq!(c.model.attention, AttentionImpl::Sdpa);
    c.apply_override("out_dir=/tmp/x y").unwrap();
    assert_eq!(c.run_dir(), Path::new("/tmp/x y"));
    // Optional keys absent from the tree can be set, and removed with an empty value.
    c.apply_override("optim.grad_clip_norm=1").unwrap();
    assert_eq!(c.optim.grad_clip_norm, Some(1.0));
    c.apply_override("optim.grad_clip_norm=").unwrap();
    assert_eq!(c.optim.grad_clip_norm, None);
    c.apply_override("augment.crop_size=").unwrap();
    assert_eq!(c.augment.crop_size, None);
    // A non-optional key removed takes its default.
    c.apply_override("optim.momentum=").unwrap();
    assert_eq!(c.optim.momentum, OptimConfig::default().momentum);
    // Switching from epochs to iterations.
    c.apply_overrides(["optim.iterations=100", "optim.epochs="])
        .unwrap();
    assert_eq!(c.total_iterations(2975), 100);
    c.validate().unwrap();
}

#[test]
fn override_rejects_unknown_keys_and_wrong_types() {
    let mut c = cityscapes();
    let before = c.clone();
    let err = c.apply_override("optim.lrr=0.01").unwrap_err().to_string();
    assert!(
        err.contains("optim.lrr") && err.contains("unknown field"),
        "{err}"
    );
    let err = c
        .apply_override("optimizer.lr=0.01")
        .unwrap_err()
        .to_string();
    assert!(err.contains("optimizer"), "{err}");
    let err = c
        .apply_override("optim.batch_size=two")
        .unwrap_err()
        .to_string();
    assert!(err.contains("optim.batch_size"), "{err}");
    let err = c.apply_override("optim.lr=true").unwrap_err().to_string();
    assert!(err.contains("optim.lr"), "{err}");
    let err = c.apply_override("optim.lr.x=1").unwrap_err().to_string();
    assert!(err.contains("optim.lr is a value"), "{err}");
    assert!(matches!(
        c.apply_override("optim.lr"),
        Err(ConfigError::OverrideSyntax(_))
    ));
    assert!(matches!(
        c.apply_override("optim..lr=1"),
        Err(ConfigError::OverrideSyntax(_))
    ));
    assert_eq!(c, before, "a failed override leaves the config unchanged");
}

#[test]
fn to_toml_string_round_trips() {
    for name in RunConfig::preset_names() {
        let c = RunConfig::preset(name).unwrap();
        let text = c.to_toml_string();
        assert_eq!(
            RunConfig::from_toml_str(&text).unwrap(),
            c,
            "{name}:\n{text}"
        );
    }
    let mut c = RunConfig::default();
    c.apply_overrides([
        "optim.grad_clip_norm=0.5",
        "model.init=w.pth",
        "augment.scale_range=[0.5, 2]",
        "out_dir=elsewhere",
        "optim.lr=1e-7",
        "optim.lr_scaling=linear",
    ])
    .unwrap();
    assert_eq!(RunConfig::from_toml_str(&c.to_toml_string()).unwrap(), c);
}

#[test]
fn linear_scaling_follows_the_global_batch() {
    let mut c = cityscapes();
    c.apply_overrides(["optim.lr_scaling=linear", "optim.world_size=1"])
        .unwrap();
    assert_eq!(c.global_batch(), 2);
    assert!((c.effective_lr() - 0.003 / 4.0).abs() < 1e-15);
    c.apply_override("optim.accumulation=4").unwrap();
    assert_eq!(c.global_batch(), 8);
    assert_eq!(c.effective_lr(), 0.003);
    assert_eq!(c.total_iterations(2975), 89040);
}

#[test]
fn validate_reports_every_problem_by_key() {
    let mut c = RunConfig::default();
    c.apply_overrides([
        "optim.batch_size=0",
        "augment.scale_range=[2.0, 0.5]",
        "augment.base_size=512",
        "augment.crop_size=100000",
        "eval.mode=sliding",
        "model.backbone=resnet99",
        "optim.epochs=10",
    ])
    .unwrap();
    let err = c.validate().unwrap_err();
    let ConfigError::Invalid(msgs) = &err else {
        panic!("{err}")
    };
    for key in [
        "optim.batch_size",
        "augment.scale_range",
        "augment.crop_size",
        "eval.mode",
        "model.backbone",
        "optim.epochs",
    ] {
        assert!(
            msgs.iter().any(|m| m.contains(key)),
            "{key} missing in {err}"
        );
    }

    let mut c = RunConfig::default();
    c.apply_overrides(["optim.iterations=0", "optim.world_size=0"])
        .unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("optim.iterations") && err.contains("optim.world_size"),
        "{err}"
    );

    let c = RunConfig {
        out_dir: Some(PathBuf::new()),
        ..RunConfig::default()
    };
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("out_dir"), "{err}");

    let mut c = RunConfig::default();
    c.apply_override("model.multi_grid=[4, 8, 16]").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("multi_grid"),
        "tiny has one layer4 block: {err}"
    );
}

#[test]
fn summary_states_the_batch_geometry() {
    let s = cityscapes().summary(Some(2975));
    for part in [
        "2 per process",
        "4 processes",
        "1 accumulation",
        "8 global",
        "0.003 effective",
        "2975 training images",
        "240 epochs x 371 it/epoch = 89040 iterations",
    ] {
        assert!(s.contains(part), "{part:?} missing in:\n{s}");
    }
    // Without the dataset (`--print-config`): the same geometry, the length unknown.
    let s = cityscapes().summary(None);
    for part in [
        "2 per process",
        "4 processes",
        "8 global",
        "0.003 effective",
        "training images unknown (dataset not opened)",
        "240 epochs x (training images / 8) it/epoch; iterations unknown",
    ] {
        assert!(s.contains(part), "{part:?} missing in:\n{s}");
    }
    // An iteration-based schedule needs no dataset.
    let mut c = cityscapes();
    c.apply_overrides(["optim.iterations=500", "optim.epochs="])
        .unwrap();
    assert!(c.summary(None).contains("schedule: 500 iterations"));
}

#[test]
fn precision_key_and_amp_compatibility() {
    let mut c = RunConfig::default();
    assert_eq!(c.optim.precision, Precision::Fp32);
    assert_eq!(c.optim.effective_precision(), Precision::Fp32);
    // `amp = true` (configs from before `precision`) is fp16.
    c.apply_override("optim.amp=true").unwrap();
    assert_eq!(c.optim.effective_precision(), Precision::Fp16);
    c.validate().unwrap();
    c.apply_override("optim.precision=fp16").unwrap();
    assert_eq!(c.optim.effective_precision(), Precision::Fp16);
    c.validate().unwrap();
    // amp = true with bf16 is a contradiction, reported by key.
    c.apply_override("optim.precision=bf16").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("optim.amp") && err.contains("bf16"), "{err}");
    c.apply_override("optim.amp=false").unwrap();
    assert_eq!(c.optim.effective_precision(), Precision::Bf16);
    c.validate().unwrap();
    assert!(c.apply_override("optim.precision=fp8").is_err());
    // Round trip through TOML, and a config without the key reads as fp32.
    assert_eq!(RunConfig::from_toml_str(&c.to_toml_string()).unwrap(), c);
    let old = RunConfig::from_toml_str("[optim]\namp = false\n").unwrap();
    assert_eq!(old.optim.precision, Precision::Fp32);
}
