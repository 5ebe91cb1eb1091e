//! The mmsegmentation presets against mmsegmentation 1.2.2's own configs
//! (configs/danet/*.py and the _base_ files they name), number by number.

use super::*;

/// (preset, depth, dataset prefix, iterations, per-GPU batch, resize scale, crop (h, w),
/// align_corners, slide (crop, stride), padded after normalisation, val/ckpt interval).
type Row = (
    &'static str,
    usize,
    &'static str,
    u64,
    usize,
    [u32; 2],
    [u32; 2],
    bool,
    Option<(u32, u32)>,
    bool,
    u64,
);

/// configs/danet/README.md's 16 configs.
const ROWS: [Row; 16] = [
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-40k",
        50,
        "cityscapes:",
        40_000,
        2,
        [2048, 1024],
        [512, 1024],
        false,
        None,
        true,
        4000,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        50,
        "cityscapes:",
        80_000,
        2,
        [2048, 1024],
        [512, 1024],
        false,
        None,
        true,
        8000,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-40k",
        101,
        "cityscapes:",
        40_000,
        2,
        [2048, 1024],
        [512, 1024],
        false,
        None,
        true,
        4000,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-80k",
        101,
        "cityscapes:",
        80_000,
        2,
        [2048, 1024],
        [512, 1024],
        false,
        None,
        true,
        8000,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-40k",
        50,
        "cityscapes:",
        40_000,
        2,
        [2049, 1025],
        [769, 769],
        true,
        Some((769, 513)),
        true,
        4000,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        50,
        "cityscapes:",
        80_000,
        2,
        [2049, 1025],
        [769, 769],
        true,
        Some((769, 513)),
        true,
        8000,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-40k",
        101,
        "cityscapes:",
        40_000,
        2,
        [2049, 1025],
        [769, 769],
        true,
        Some((769, 513)),
        true,
        4000,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-80k",
        101,
        "cityscapes:",
        80_000,
        2,
        [2049, 1025],
        [769, 769],
        true,
        Some((769, 513)),
        true,
        8000,
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        50,
        "ade20k:",
        80_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        true,
        8000,
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-160k",
        50,
        "ade20k:",
        160_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        true,
        16000,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-80k",
        101,
        "ade20k:",
        80_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        true,
        8000,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-160k",
        101,
        "ade20k:",
        160_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        true,
        16000,
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        50,
        "voc-aug:",
        20_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        false,
        2000,
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-40k",
        50,
        "voc-aug:",
        40_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        false,
        4000,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-20k",
        101,
        "voc-aug:",
        20_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        false,
        2000,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-40k",
        101,
        "voc-aug:",
        40_000,
        4,
        [2048, 512],
        [512, 512],
        false,
        None,
        false,
        4000,
    ),
];

#[test]
fn every_mmseg_preset_is_its_mmseg_config() {
    let names = RunConfig::preset_names();
    for (name, depth, dataset, iters, batch, scale, [ch, cw], align, slide, pad_norm, every) in ROWS
    {
        assert!(names.contains(&name), "{name} is not a preset");
        let c = RunConfig::preset(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.name, name);
        // ResNetV1c-depth, D8: deep stem 32/32/64, contract_dilation, no multi-grid.
        let m = &c.model;
        assert_eq!(m.backbone, format!("resnet{depth}v1c"), "{name}");
        assert_eq!(m.output_stride, 8);
        assert!(m.deep_stem && m.multi_grid.is_none());
        let b = c.backbone_spec().unwrap();
        assert_eq!(b.stem_widths, Some([32, 32, 64]));
        assert!(b.contract_dilation && b.deep_stem);
        let blocks = if depth == 50 {
            [3, 4, 6, 3]
        } else {
            [3, 4, 23, 3]
        };
        assert_eq!(b.layers, blocks, "{name}");
        // layer3 dilated 1, 2, 2, ...; layer4 2, 4, 4 (contract_dilation).
        assert_eq!(b.block(3, 0).dilation, 1);
        assert_eq!(b.block(3, 1).dilation, 2);
        assert_eq!(b.block(4, 0).dilation, 2);
        assert_eq!(b.block(4, 2).dilation, 4);
        assert_eq!(m.dropout, 0.1);
        assert_eq!(m.align_corners, align, "{name}");
        let aux = m.aux_head.as_ref().expect("aux head");
        assert_eq!((aux.in_layer, aux.channels, aux.loss_weight), (3, 256, 0.4));
        assert!(c.data.dataset.starts_with(dataset), "{name}");

        // 4 GPUs x 2 (Cityscapes) or x 4; SyncBN.
        let o = &c.optim;
        assert_eq!((o.batch_size, o.world_size, o.accumulation), (batch, 4, 1));
        assert!(o.sync_bn);
        // SGD lr 0.01, momentum 0.9, wd 5e-4, no head multiplier; PolyLR 0.9 -> 1e-4.
        assert_eq!((o.lr, o.momentum, o.weight_decay), (0.01, 0.9, 5e-4));
        assert_eq!(c.effective_lr(), 0.01);
        assert_eq!(o.head_lr_mult, 1.0);
        assert!(!o.nesterov && o.grad_clip_norm.is_none() && !o.amp);
        assert_eq!((o.poly_power, o.min_lr, o.warmup_iters), (0.9, 1e-4, 0));
        assert_eq!(o.poly_form, PolyForm::Mmengine);
        assert_eq!((o.iterations, o.epochs), (iters, None), "{name}");
        assert_eq!(c.total_iterations(1), iters);
        // CE x 1 on each DAHead output, all-pixel mean (avg_non_ignore=False), no OHEM.
        assert_eq!(o.loss_weights, [1.0; 3]);
        assert!(o.ce_mean_over_all_pixels && !o.ohem);

        // RandomResize(scale, (0.5, 2.0), keep_ratio), RandomCrop(crop, 0.75), flip,
        // PhotoMetricDistortion with its defaults.
        let a = &c.augment;
        assert!(a.flip);
        assert_eq!(a.base_size, 0);
        assert_eq!(a.scale_range, Some([0.5, 2.0]));
        assert_eq!(a.resize_scale, Some(scale), "{name}");
        let crop = a.crop_hw.or(a.crop_size.map(|s| [s, s]));
        assert_eq!(crop, Some([ch, cw]), "{name}");
        assert_eq!(a.cat_max_ratio, 0.75);
        assert_eq!(a.photometric, Some(PhotometricConfig::default()));
        let p = a.photometric.as_ref().unwrap();
        assert_eq!(
            (
                p.brightness_delta,
                p.contrast_range,
                p.saturation_range,
                p.hue_delta
            ),
            (32.0, [0.5, 1.5], [0.5, 1.5], 18)
        );
        assert_eq!(a.pad_after_normalize, pad_norm, "{name}");
        assert_eq!((a.color_jitter, a.blur_prob), (0.0, 0.0));

        // Evaluation: mmseg's protocol, whole or slide 769/513; val and checkpoint intervals.
        let e = &c.eval;
        assert_eq!(e.protocol, segtool_model_spec::protocol::Protocol::Mmseg);
        match slide {
            Some((crop, stride)) => {
                assert_eq!(e.mode, EvalMode::Sliding);
                assert_eq!((e.crop_size, e.stride), (Some(crop), Some(stride)));
            }
            None => assert_eq!(e.mode, EvalMode::Whole, "{name}"),
        }
        assert!(!e.flip && e.scales == vec![1.0]);
        assert_eq!((e.every, c.checkpoint.every), (every, every), "{name}");
        assert_eq!(c.log.every, 50);
    }
}

#[test]
fn print_config_summary_states_the_mmseg_numbers() {
    let c = RunConfig::preset("mmseg-danet-r50-d8-cityscapes-512x1024-80k").unwrap();
    let s = c.summary(None);
    for part in [
        "resnet50v1c OS8, deep stem",
        "dropout 0.1, align_corners false",
        "aux FCN head on layer3 (256 channels, loss x0.4)",
        "RandomResize (2048, 1024) x ratio [0.5, 2] keep_ratio",
        "crop 512x1024 (h x w)",
        "cat_max_ratio 0.75",
        "PhotoMetricDistortion (brightness 32, contrast [0.5, 1.5], saturation [0.5, 1.5], hue 18)",
        "padded after normalisation",
        "2 per process x 4 processes x 1 accumulation = 8 global, SyncBN",
        "lr: 0.01 effective, head x1, momentum 0.9, wd 0.0005, poly 0.9 (mmengine), min_lr 0.0001",
        "CE x [1.0, 1.0, 1.0] (fused, PAM, CAM) + 0.4 x aux CE, averaged over all (ignored included) pixels",
        "schedule: 80000 iterations",
    ] {
        assert!(s.contains(part), "{part:?} missing in:\n{s}");
    }
}

#[test]
fn mmseg_keys_round_trip_and_validate() {
    for name in RunConfig::preset_names() {
        let c = RunConfig::preset(name).unwrap();
        assert_eq!(
            RunConfig::from_toml_str(&c.to_toml_string()).unwrap(),
            c,
            "{name}"
        );
    }
    let mut c = RunConfig::preset("mmseg-danet-r101-d8-ade20k-512x512-160k").unwrap();
    c.apply_overrides(["model.dropout=0", "augment.photometric.hue_delta=0"])
        .unwrap();
    c.validate().unwrap();
    assert_eq!(c.augment.photometric.as_ref().unwrap().hue_delta, 0);
    let mut bad = c.clone();
    bad.apply_overrides([
        "model.dropout=1.0",
        "optim.min_lr=0.5",
        "augment.cat_max_ratio=0",
        "augment.crop_hw=[512, 512]",
        "augment.base_size=512",
        "model.aux_head.in_layer=5",
        "optim.ohem=true",
    ])
    .unwrap();
    let err = bad.validate().unwrap_err().to_string();
    for key in [
        "model.dropout",
        "optim.min_lr",
        "augment.cat_max_ratio",
        "augment.crop_hw and augment.crop_size",
        "augment.resize_scale replaces augment.base_size",
        "model.aux_head.in_layer",
        "optim.ohem and optim.ce_mean_over_all_pixels",
    ] {
        assert!(err.contains(key), "{key} missing in {err}");
    }
    // ResNetV1c has the deep stem; a v1c backbone without it is refused by key.
    let mut c = RunConfig::default();
    c.apply_override("model.backbone=resnet50v1c").unwrap();
    let err = c.validate().unwrap_err().to_string();
    assert!(err.contains("model.deep_stem = true"), "{err}");
    // DANet's presets keep their loss and schedule: all-labelled mean, no floor, no aux.
    let d = RunConfig::preset("cityscapes-danet-r101").unwrap();
    assert!(!d.optim.ce_mean_over_all_pixels && d.optim.min_lr == 0.0);
    assert_eq!(d.optim.poly_form, PolyForm::Danet);
    assert!(d.model.aux_head.is_none() && d.model.align_corners && d.model.dropout == 0.1);
}
