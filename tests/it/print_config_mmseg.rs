#![cfg(feature = "train")]
//! `segtool train --config <mmseg preset> --print-config` for every mmsegmentation preset:
//! the resolved TOML on stdout and the recipe's numbers on stderr, as mmsegmentation 1.2.2's
//! configs/danet/* state them; no dataset opened, nothing written.

use std::process::Command;

/// (preset, backbone, per-GPU batch, iterations, resize scale, crop, align_corners, slide).
const PRESETS: [(&str, &str, usize, u64, &str, &str, bool, bool); 16] = [
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-40k",
        "resnet50v1c",
        2,
        40_000,
        "(2048, 1024)",
        "crop 512x1024 (h x w)",
        false,
        false,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-512x1024-80k",
        "resnet50v1c",
        2,
        80_000,
        "(2048, 1024)",
        "crop 512x1024 (h x w)",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-40k",
        "resnet101v1c",
        2,
        40_000,
        "(2048, 1024)",
        "crop 512x1024 (h x w)",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-512x1024-80k",
        "resnet101v1c",
        2,
        80_000,
        "(2048, 1024)",
        "crop 512x1024 (h x w)",
        false,
        false,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-40k",
        "resnet50v1c",
        2,
        40_000,
        "(2049, 1025)",
        "crop 769",
        true,
        true,
    ),
    (
        "mmseg-danet-r50-d8-cityscapes-769x769-80k",
        "resnet50v1c",
        2,
        80_000,
        "(2049, 1025)",
        "crop 769",
        true,
        true,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-40k",
        "resnet101v1c",
        2,
        40_000,
        "(2049, 1025)",
        "crop 769",
        true,
        true,
    ),
    (
        "mmseg-danet-r101-d8-cityscapes-769x769-80k",
        "resnet101v1c",
        2,
        80_000,
        "(2049, 1025)",
        "crop 769",
        true,
        true,
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-80k",
        "resnet50v1c",
        4,
        80_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r50-d8-ade20k-512x512-160k",
        "resnet50v1c",
        4,
        160_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-80k",
        "resnet101v1c",
        4,
        80_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-ade20k-512x512-160k",
        "resnet101v1c",
        4,
        160_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-20k",
        "resnet50v1c",
        4,
        20_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r50-d8-voc12aug-512x512-40k",
        "resnet50v1c",
        4,
        40_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-20k",
        "resnet101v1c",
        4,
        20_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
    (
        "mmseg-danet-r101-d8-voc12aug-512x512-40k",
        "resnet101v1c",
        4,
        40_000,
        "(2048, 512)",
        "crop 512",
        false,
        false,
    ),
];

#[test]
fn print_config_shows_every_mmseg_preset() {
    let dir = tempfile::tempdir().unwrap();
    for (name, backbone, batch, iters, scale, crop, align, slide) in PRESETS {
        let out = Command::new(env!("CARGO_BIN_EXE_segtool"))
            .args(["train", "--config", name, "--print-config"])
            .env_remove("WORLD_SIZE")
            .env_remove("RANK")
            .env_remove("SLURM_PROCID")
            .env_remove("SLURM_NTASKS")
            .current_dir(dir.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{name}: {stderr}");
        for part in [
            format!("name = \"{name}\""),
            format!("backbone = \"{backbone}\""),
            format!("iterations = {iters}"),
            "min_lr = 0.0001".to_string(),
            "poly_form = \"mmengine\"".to_string(),
            "ce_mean_over_all_pixels = true".to_string(),
            "cat_max_ratio = 0.75".to_string(),
            format!("align_corners = {align}"),
        ] {
            assert!(
                stdout.contains(&part),
                "{name}: {part:?} missing in:\n{stdout}"
            );
        }
        for part in [
            format!("model: {backbone} OS8, deep stem"),
            "dropout 0.1".to_string(),
            format!("align_corners {align}"),
            "aux FCN head on layer3 (256 channels, loss x0.4)".to_string(),
            format!("RandomResize {scale} x ratio [0.5, 2] keep_ratio"),
            crop.to_string(),
            "cat_max_ratio 0.75".to_string(),
            "PhotoMetricDistortion (brightness 32, contrast [0.5, 1.5], saturation [0.5, 1.5], hue 18)".to_string(),
            format!("{batch} per process x 4 processes x 1 accumulation = {} global, SyncBN", 4 * batch),
            "lr: 0.01 effective, head x1, momentum 0.9, wd 0.0005, poly 0.9 (mmengine), min_lr 0.0001".to_string(),
            "+ 0.4 x aux CE, averaged over all (ignored included) pixels".to_string(),
            format!("schedule: {iters} iterations"),
        ] {
            assert!(stderr.contains(&part), "{name}: {part:?} missing in:\n{stderr}");
        }
        assert_eq!(
            stdout.contains("mode = \"sliding\""),
            slide,
            "{name}: eval mode"
        );
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "wrote nothing"
    );
}
