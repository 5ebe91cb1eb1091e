"""mmsegmentation's test-time geometry, from mmseg/mmcv/cv2 themselves, for
model-spec/tests/it/mmseg_reference.rs:

- uint8 resizes: cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR) on random
  RGB images, random sizes and scales (up, down, exact 2x, integer factors, one-pixel
  sides) plus mmseg's TTA ratios on typical image sizes;
- keep-ratio sizes: mmcv's Resize(scale=..., keep_ratio=True) and
  Resize(scale_factor=r, keep_ratio=True) transforms run on real arrays;
- slide windows: mmseg's own EncoderDecoder.slide_inference run with a stub network
  that records every crop it is given.

Usage: mmseg_resize_ref.py OUT_DIR [--cases N] [--seed S]
Writes OUT_DIR/ref.json (cases, sizes, windows) and OUT_DIR/ref.bin (the source and
resized pixels, at the byte offsets ref.json names).
"""
import argparse
import json
import os
import sys

import cv2
import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmseg_ref import import_mmseg  # noqa: E402  (mmseg's two import patches, only those)

import_mmseg()
from mmcv.transforms import Resize  # noqa: E402
from mmengine.config import ConfigDict  # noqa: E402
from mmseg.models.segmentors.encoder_decoder import EncoderDecoder  # noqa: E402


def resize_cases(rng, n):
    cases = []
    for _ in range(n):
        kind = rng.integers(0, 6)
        if kind == 0:  # exact 2x down (OpenCV switches to INTER_AREA)
            dh, dw = rng.integers(1, 90, 2)
            cases.append((2 * dh, 2 * dw, dh, dw))
        elif kind == 1:  # integer up
            sh, sw = rng.integers(1, 50, 2)
            k = rng.integers(2, 5)
            cases.append((sh, sw, sh * k, sw * k))
        elif kind == 2:  # integer down
            dh, dw = rng.integers(1, 60, 2)
            k = rng.integers(3, 5)
            cases.append((dh * k, dw * k, dh, dw))
        else:  # anything
            sh, sw = rng.integers(1, 200, 2)
            dh, dw = rng.integers(1, 260, 2)
            cases.append((sh, sw, dh, dw))
    for h, w in [(97, 130), (130, 97), (375, 500)]:
        for r in [0.5, 0.75, 1.25, 1.5, 1.75]:
            cases.append((h, w, int(h * r + 0.5), int(w * r + 0.5)))
    cases += [(1024, 2048, 768, 1536)]
    cases += [(1, 1, 5, 7), (5, 7, 1, 1), (1, 9, 4, 3), (9, 1, 3, 4), (2, 2, 3, 3)]
    return [tuple(int(v) for v in c) for c in cases]


def mmcv_size(h, w, **kw):
    img = np.zeros((h, w, 3), np.uint8)
    out = Resize(keep_ratio=True, **kw)(dict(img=img))
    return list(out["img"].shape[:2])


class Recorder:
    """Just what slide_inference reads from `self`, and a network that records crops."""

    def __init__(self, crop, stride):
        self.test_cfg = ConfigDict(mode="slide", crop_size=(crop, crop),
                                        stride=(stride, stride))
        self.out_channels = 2
        self.crops = []

    def encode_decode(self, crop, metas):
        x = crop[0, 0]
        y1, x1 = int(x[0, 0]) // 10000, int(x[0, 0]) % 10000
        self.crops.append([y1, x1, crop.shape[2], crop.shape[3]])
        return torch.zeros(1, 2, crop.shape[2], crop.shape[3])


def slide_windows(h, w, crop, stride):
    rec = Recorder(crop, stride)
    ys, xs = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    inputs = (ys * 10000 + xs).double().view(1, 1, h, w).expand(1, 3, h, w)
    EncoderDecoder.slide_inference(rec, inputs, [dict(img_shape=(h, w))])
    return rec.crops


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cases", type=int, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    blob = bytearray()
    resizes = []
    for sh, sw, dh, dw in resize_cases(rng, args.cases):
        img = rng.integers(0, 256, (sh, sw, 3), dtype=np.uint8)
        out = cv2.resize(img, (dw, dh), interpolation=cv2.INTER_LINEAR)
        assert out.shape == (dh, dw, 3)
        resizes.append(dict(src=[sh, sw], dst=[dh, dw], offset=len(blob)))
        blob += img.tobytes() + out.tobytes()
    sizes = []
    for _ in range(300):
        h, w = (int(v) for v in rng.integers(1, 3000, 2))
        long, short = sorted(int(v) for v in rng.integers(1, 3000, 2))[::-1]
        sizes.append(dict(src=[h, w], scale=[long, short],
                          dst=mmcv_size(h, w, scale=(long, short))))
        r = float(rng.choice([0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 0.37, 1.13]))
        sizes.append(dict(src=[h, w], ratio=r, dst=mmcv_size(h, w, scale_factor=r)))
    for h, w, long, short in [(1024, 2048, 2048, 1024), (97, 130, 128, 64),
                              (375, 500, 2048, 512), (500, 375, 2048, 512)]:
        sizes.append(dict(src=[h, w], scale=[long, short],
                          dst=mmcv_size(h, w, scale=(long, short))))
    windows = []
    for h, w, crop, stride in [(64, 86, 48, 32), (100, 37, 32, 21), (37, 100, 32, 21),
                               (20, 90, 32, 21), (65, 64, 32, 32), (97, 130, 48, 32),
                               (48, 48, 48, 32), (49, 49, 48, 1), (5, 90, 16, 7),
                               (1024, 2048, 769, 513), (512, 1024, 769, 513)]:
        windows.append(dict(size=[h, w], crop=crop, stride=stride,
                            crops=slide_windows(h, w, crop, stride)))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ref.bin"), "wb") as f:
        f.write(bytes(blob))
    with open(os.path.join(args.out, "ref.json"), "w") as f:
        json.dump(dict(cv2=cv2.__version__, resizes=resizes, sizes=sizes,
                       windows=windows), f)


if __name__ == "__main__":
    main()
