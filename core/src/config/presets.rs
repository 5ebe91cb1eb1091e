//! The presets compiled into segtool: `configs/*.toml`, and the mmsegmentation siblings
//! derived from them by overrides.

/// Presets shipped with segtool, by name (the file stem in `configs/`).
///
/// They are compiled in so `--config cityscapes-danet-r101` works from any directory and
/// an installed binary needs no data files.
pub(super) const PRESETS: &[(&str, &str)] = &[
    (
        "shapes-tiny",
        include_str!("../../../configs/shapes-tiny.toml"),
    ),
    (
        "cityscapes-danet-r101",
        include_str!("../../../configs/cityscapes-danet-r101.toml"),
    ),
    (
        "ade20k-danet-r101",
        include_str!("../../../configs/ade20k-danet-r101.toml"),
    ),
    (
        "voc-danet-r101",
        include_str!("../../../configs/voc-danet-r101.toml"),
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        include_str!("../../../configs/mmseg-danet-r50-d8-cityscapes-512x1024-80k.toml"),
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        include_str!("../../../configs/mmseg-danet-r50-d8-cityscapes-769x769-80k.toml"),
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        include_str!("../../../configs/mmseg-danet-r50-d8-ade20k-512x512-80k.toml"),
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        include_str!("../../../configs/mmseg-danet-r50-d8-voc12aug-512x512-20k.toml"),
    ),
];

/// The siblings of the mmsegmentation presets above, as mmseg derives them (its configs
/// `danet_r101-*` set `backbone.depth=101`; the 40k/160k/... ones swap the schedule file:
/// `max_iters`, PolyLR `end`, and the val and checkpoint intervals). Each: (name, the
/// preset it starts from, its overrides; `name` is set to the sibling's own).
pub(super) const DERIVED_PRESETS: &[(&str, &str, &[&str])] = &[
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-40k",
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        SCHEDULE_40K,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-40k",
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        R101_40K,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-80k",
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        R101,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-40k",
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        SCHEDULE_40K,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-40k",
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        R101_40K,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-80k",
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        R101,
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-160k",
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        SCHEDULE_160K,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-80k",
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        R101,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-160k",
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        R101_160K,
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-40k",
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        SCHEDULE_40K,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-20k",
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        R101,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-40k",
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        R101_40K,
    ),
];

/// `backbone=dict(depth=101)` (with 'open-mmlab://resnet101_v1c' as its init).
const R101: &[&str] = &["model.backbone=resnet101v1c"];
/// schedule_40k.py: max_iters 40000, PolyLR end 40000, val and checkpoint every 4000.
const SCHEDULE_40K: &[&str] = &[
    "optim.iterations=40000",
    "checkpoint.every=4000",
    "eval.every=4000",
    "log.plot_every=4000",
];
/// schedule_160k.py: 160000 iterations, val and checkpoint every 16000.
const SCHEDULE_160K: &[&str] = &[
    "optim.iterations=160000",
    "checkpoint.every=16000",
    "eval.every=16000",
    "log.plot_every=16000",
];
const R101_40K: &[&str] = &[
    "model.backbone=resnet101v1c",
    "optim.iterations=40000",
    "checkpoint.every=4000",
    "eval.every=4000",
    "log.plot_every=4000",
];
const R101_160K: &[&str] = &[
    "model.backbone=resnet101v1c",
    "optim.iterations=160000",
    "checkpoint.every=16000",
    "eval.every=16000",
    "log.plot_every=16000",
];
