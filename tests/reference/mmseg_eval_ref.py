"""mmsegmentation 1.2.2's own test loop on its own DANet, for tests/it/mmseg_eval.rs.

Builds a small registry EncoderDecoder (ResNetV1c-50 at width 16, DAHead, FCNHead aux; BN
statistics recalibrated so logits are O(1-10): tests/reference/mmseg_ref.py), saves it in mmseg's
file format with a config whose test pipeline is Resize(scale, keep_ratio=True) and whose
test_cfg slides (crop, stride), writes a small dataset folder of images larger than the
crop, and predicts every image the way mmseg's TestLoop does (the config's pipeline,
pseudo_collate, model.test_step), in four settings:

    single_whole   test pipeline, mode='whole'
    single_slide   test pipeline, mode='slide' (crop, stride)
    tta_whole      SegTTAModel over the tta_pipeline (Resize(scale_factor=r, keep_ratio)
                   for r in 0.5..1.75, RandomFlip prob 0 and 1), mode='whole'
    tta_slide      the same, mode='slide'

(TTA, twelve passes per image, for the first --tta-images images only: tests stay fast.)

Usage: mmseg_eval_ref.py OUT --align-corners 0|1 [--depth 50] [--classes 5]
           [--scale 128,64] [--crop 48] [--stride 32] [--height 49] [--width 66]
           [--images 2] [--tta-images 1] [--seed 0]
Writes OUT/mmseg.pth, OUT/data/{images,masks}/val/*.png and OUT/<setting>/<name>.png
(8-bit gray labels).
"""
import argparse
import os
import sys

import cv2
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmseg_ref import config, import_mmseg, save_checkpoint, well_conditioned  # noqa: E402

TTA_RATIOS = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]


def small_config(depth, classes, align_corners, crop, stride, width=16):
    """mmseg's DANet config at a quarter of ResNetV1c's widths (base_channels and
    stem_channels 16 instead of 64: a 9 MB file) with a small head, so tests stay fast."""
    cfg = config(depth, classes, align_corners, aux=True,
                 test_cfg=dict(mode="slide", crop_size=(crop, crop), stride=(stride, stride)))
    cfg["backbone"].update(base_channels=width, stem_channels=width)
    expansion = 4 if depth >= 50 else 1
    cfg["decode_head"].update(in_channels=8 * width * expansion, channels=64, pam_channels=8)
    cfg["auxiliary_head"].update(in_channels=4 * width * expansion, channels=32)
    return cfg


def config_text(cfg, scale):
    from mmengine.config import Config

    test_pipeline = [dict(type="LoadImageFromFile"),
                     dict(type="Resize", scale=scale, keep_ratio=True),
                     dict(type="LoadAnnotations"), dict(type="PackSegInputs")]
    return Config(dict(model=cfg, test_pipeline=test_pipeline)).pretty_text


def write_images(root, n, h, w, classes, rng):
    names = []
    for split in ("images/val", "masks/val"):
        os.makedirs(os.path.join(root, split), exist_ok=True)
    for i in range(n):
        # Noise with a few solid blocks, so the model sees structure.
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        for _ in range(4):
            y, x = rng.integers(0, h - 8), rng.integers(0, w - 8)
            img[y:y + rng.integers(8, h // 2), x:x + rng.integers(8, w // 2)] = \
                rng.integers(0, 256, 3)
        mask = rng.integers(0, classes, (h, w), dtype=np.uint8)
        name = f"img{i}"
        cv2.imwrite(os.path.join(root, "images/val", name + ".png"), img)
        cv2.imwrite(os.path.join(root, "masks/val", name + ".png"), mask)
        names.append(name)
    return names


def predict(model, pipeline, path, tta):
    from mmengine.dataset import pseudo_collate

    data = pseudo_collate([pipeline(dict(img_path=path))])
    with torch.no_grad():
        out = tta.test_step(data) if tta is not None else model.test_step(data)
    return out[0].pred_sem_seg.data[0].to(torch.uint8).numpy()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--align-corners", type=int, required=True)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--scale", default="128,64")
    ap.add_argument("--crop", type=int, default=48)
    ap.add_argument("--stride", type=int, default=32)
    ap.add_argument("--height", type=int, default=49)
    ap.add_argument("--width", type=int, default=66)
    ap.add_argument("--images", type=int, default=2)
    ap.add_argument("--tta-images", type=int, default=1, help="TTA predicts the first N")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    models = import_mmseg()
    from mmengine.config import ConfigDict
    from mmengine.dataset import Compose
    from mmseg.models import SegTTAModel

    scale = tuple(int(v) for v in a.scale.split(","))
    cfg = small_config(a.depth, a.classes, bool(a.align_corners), a.crop, a.stride)
    model = models.build(cfg)
    well_conditioned(model, (2, 3, a.crop, a.crop), a.seed)
    os.makedirs(a.out, exist_ok=True)
    classes = [f"thing{i}" for i in range(a.classes)]
    palette = [((37 * i) % 256, (91 * i) % 256, (151 * i) % 256) for i in range(a.classes)]
    save_checkpoint(model, os.path.join(a.out, "mmseg.pth"), classes, palette,
                    config_text(cfg, scale))
    rng = np.random.default_rng(a.seed)
    data = os.path.join(a.out, "data")
    names = write_images(data, a.images, a.height, a.width, a.classes, rng)

    single = Compose([dict(type="LoadImageFromFile"),
                      dict(type="Resize", scale=scale, keep_ratio=True),
                      dict(type="PackSegInputs")])
    tta_pipeline = Compose([
        dict(type="LoadImageFromFile"),
        dict(type="TestTimeAug", transforms=[
            [dict(type="Resize", scale_factor=r, keep_ratio=True) for r in TTA_RATIOS],
            [dict(type="RandomFlip", prob=0.0, direction="horizontal"),
             dict(type="RandomFlip", prob=1.0, direction="horizontal")],
            [dict(type="PackSegInputs")]])])
    tta = SegTTAModel(module=model)
    modes = dict(whole=ConfigDict(mode="whole"),
                 slide=ConfigDict(mode="slide", crop_size=(a.crop, a.crop),
                                  stride=(a.stride, a.stride)))
    for setting in ("single_whole", "single_slide", "tta_whole", "tta_slide"):
        kind, mode = setting.split("_")
        model.test_cfg = modes[mode]
        os.makedirs(os.path.join(a.out, setting), exist_ok=True)
        for name in names if kind == "single" else names[:a.tta_images]:
            path = os.path.join(data, "images/val", name + ".png")
            labels = predict(model, single if kind == "single" else tta_pipeline, path,
                             tta if kind == "tta" else None)
            assert labels.shape == (a.height, a.width), labels.shape
            cv2.imwrite(os.path.join(a.out, setting, name + ".png"), labels)


if __name__ == "__main__":
    main()
