"""mmsegmentation's train-pipeline arithmetic on fixed inputs, the reference for segtool's
mmseg augmentation (train/tests/it/mmseg_augment.rs). Shares no code with segtool.

Usage: mmseg_augment_ref.py OUT.safetensors

Writes (every image as float32 values of uint8 pixels, RGB, (H, W, 3)):
- `photo/input` and, per case k, `photo/k/draw` = [brightness_on, beta, mode, contrast_on,
  alpha, saturation_on, saturation_alpha, hue_on, hue_delta] and `photo/k/out`: mmseg's
  `PhotoMetricDistortion().transform` with numpy's random draws replaced by these values
  (on the BGR image, as mmseg loads it);
- `resize/input`, `resize/mask` and per case k `resize/k/size` = [w, h], `resize/k/image`
  (`cv2.resize`, INTER_LINEAR, as mmcv's imresize) and `resize/k/mask` (INTER_NEAREST);
- `rescale`: rows [w, h, scale_long, scale_short, ratio, new_w, new_h] of mmcv's
  `RandomResize._random_sample_ratio` (at that ratio) then `rescale_size` (keep_ratio).
"""
import os
import sys

import numpy as np
import torch

# mmseg_ref.import_mmseg: the two patches (mmseg 1.2.2's mmcv version assert, and a
# stand-in for the compiled `mmcv.ops` some of mmseg's other heads import), nothing else.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmseg_ref import import_mmseg  # noqa: E402

import_mmseg()

import cv2  # noqa: E402
from mmcv.image.geometric import rescale_size  # noqa: E402
from mmcv.transforms import RandomResize  # noqa: E402
from mmseg.datasets.transforms import transforms as mmseg_transforms  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


class Scripted:
    """Stands in for numpy.random inside mmseg's transforms module: returns given values."""

    def __init__(self, values):
        self.values = list(values)

    def randint(self, *args):
        return self.values.pop(0)

    def uniform(self, *args):
        return self.values.pop(0)


def photometric_case(img_rgb, draw):
    b_on, beta, mode, c_on, alpha, s_on, s_alpha, h_on, h_delta = draw
    seq = [b_on] + ([beta] if b_on else []) + [mode]
    contrast = [c_on] + ([alpha] if c_on else [])
    if mode == 1:
        seq += contrast
    seq += [s_on] + ([s_alpha] if s_on else [])
    seq += [h_on] + ([int(h_delta)] if h_on else [])
    if mode == 0:
        seq += contrast
    scripted = Scripted(seq)
    saved = mmseg_transforms.random
    mmseg_transforms.random = scripted
    try:
        out = mmseg_transforms.PhotoMetricDistortion().transform({"img": img_rgb[..., ::-1].copy()})
    finally:
        mmseg_transforms.random = saved
    assert not scripted.values, "every scripted draw used"
    return out["img"][..., ::-1]


def main():
    rng = np.random.default_rng(0)
    out = {}
    img = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
    img[:4] = 255  # saturated and black rows exercise the clipping
    img[4:8] = 0
    out["photo/input"] = torch.from_numpy(img.astype(np.float32))
    draws = [
        [1, 20.7, 1, 1, 1.3, 0, 0.0, 0, 0],
        [1, -31.2, 0, 1, 0.61, 0, 0.0, 0, 0],
        [0, 0.0, 1, 0, 0.0, 1, 1.42, 0, 0],
        [0, 0.0, 0, 0, 0.0, 0, 0.0, 1, -17],
        [0, 0.0, 1, 0, 0.0, 0, 0.0, 1, 11],
        [1, 5.5, 0, 1, 1.49, 1, 0.52, 1, 3],
        [1, -3.3, 1, 1, 0.87, 1, 1.11, 1, -5],
    ]
    for k, draw in enumerate(draws):
        res = photometric_case(img, draw)
        out[f"photo/{k}/draw"] = torch.tensor(draw, dtype=torch.float64)
        out[f"photo/{k}/out"] = torch.from_numpy(np.ascontiguousarray(res).astype(np.float32))

    src = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
    mask = rng.integers(0, 20, (37, 53), dtype=np.uint8)
    out["resize/input"] = torch.from_numpy(src.astype(np.float32))
    out["resize/mask"] = torch.from_numpy(mask.astype(np.float32))
    for k, (w, h) in enumerate([(53, 37), (80, 56), (27, 19), (106, 74), (40, 61), (13, 9)]):
        image = cv2.resize(src, (w, h), interpolation=cv2.INTER_LINEAR)
        m = cv2.resize(mask, (w, h), interpolation=cv2.INTER_NEAREST)
        out[f"resize/{k}/size"] = torch.tensor([w, h], dtype=torch.float64)
        out[f"resize/{k}/image"] = torch.from_numpy(image.astype(np.float32))
        out[f"resize/{k}/mask"] = torch.from_numpy(m.astype(np.float32))

    rows = []
    for w, h in [(2048, 1024), (500, 375), (683, 512), (1024, 2048), (333, 1001)]:
        for scale in [(2048, 1024), (2048, 512), (2049, 1025)]:
            for ratio in [0.5, 0.731, 1.0, 1.37, 1.999]:
                target = RandomResize._random_sample_ratio(scale, (ratio, ratio))
                new_w, new_h = rescale_size((w, h), target)
                rows.append([w, h, scale[0], scale[1], ratio, new_w, new_h])
    out["rescale"] = torch.tensor(rows, dtype=torch.float64)
    save_file(out, sys.argv[1])


main()
