"""DANet's evaluation protocol (`MultiEvalModule.forward` and `module_inference` in
junfu1115/DANet encoding/models/sseg/base.py, tags v0.5.0 and v1.0.0), transcribed step
by step in PyTorch, run on the independent reference DANet (danet_ref.py, float64). The
test checks segtool's `--protocol danet` (training crate and runtime) against it.

The reference, as transcribed:
- per scale: long side -> ceil(base_size * scale), short side int(short * long / long_side
  + 0.5); bilinear resize, align_corners=True;
- long side <= crop: pad (bottom/right, value -mean/std) to crop x crop, infer once, crop;
- else: pad the short side up to the crop if needed; grids ceil((side - crop) / stride) + 1
  with stride int(crop * 2/3); each window [i*stride, min(i*stride + crop, side)) cut,
  padded to the crop, inferred, its valid part summed; sums divided by the count map;
- infer: output = f(x); with flip output += flip(f(flip(x))); return output.exp();
- per-scale scores resized back (align_corners=True) and summed.

Usage: multi_eval_ref.py CHECKPOINT INPUTS OUTPUT --crop C --base-size B --scales S[,S..]
       [--stride N] [--flip]
  INPUTS  safetensors with `image` (1, 3, H, W), normalised
  OUTPUT  safetensors with `scores` (1, K, H, W)
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from danet_ref import DANet  # noqa: E402


def resize(img, h, w):
    return F.interpolate(img, (h, w), mode="bilinear", align_corners=True)


def pad(img, mean, std, crop):
    b, c, h, w = img.shape
    padh, padw = max(crop - h, 0), max(crop - w, 0)
    out = img.new_empty(b, c, h + padh, w + padw)
    for i in range(c):
        out[:, i] = F.pad(img[:, i], (0, padw, 0, padh), value=-mean[i] / std[i])
    return out


def infer(model, image, flip):
    out = model(image)[0]
    if flip:
        out = out + model(image.flip(3))[0].flip(3)
    return out.exp()


def multi_eval(model, image, nclass, base_size, crop, stride, scales, flip, mean, std):
    batch, _, h, w = image.shape
    scores = image.new_zeros(batch, nclass, h, w)
    for scale in scales:
        long_size = int(math.ceil(base_size * scale))
        if h > w:
            height, width = long_size, int(1.0 * w * long_size / h + 0.5)
            short_size = width
        else:
            width, height = long_size, int(1.0 * h * long_size / w + 0.5)
            short_size = height
        cur = resize(image, height, width)
        if long_size <= crop:
            outputs = infer(model, pad(cur, mean, std, crop), flip)[:, :, :height, :width]
        else:
            padded = pad(cur, mean, std, crop) if short_size < crop else cur
            _, _, ph, pw = padded.shape
            h_grids = int(math.ceil(1.0 * (ph - crop) / stride)) + 1
            w_grids = int(math.ceil(1.0 * (pw - crop) / stride)) + 1
            outputs = image.new_zeros(batch, nclass, ph, pw)
            count = image.new_zeros(batch, 1, ph, pw)
            for idh in range(h_grids):
                for idw in range(w_grids):
                    h0, w0 = idh * stride, idw * stride
                    h1, w1 = min(h0 + crop, ph), min(w0 + crop, pw)
                    window = pad(padded[:, :, h0:h1, w0:w1], mean, std, crop)
                    out = infer(model, window, flip)
                    outputs[:, :, h0:h1, w0:w1] += out[:, :, : h1 - h0, : w1 - w0]
                    count[:, :, h0:h1, w0:w1] += 1
            assert (count == 0).sum() == 0
            outputs = (outputs / count)[:, :, :height, :width]
        scores += resize(outputs, h, w)
    return scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint")
    ap.add_argument("inputs")
    ap.add_argument("output")
    ap.add_argument("--crop", type=int, required=True)
    ap.add_argument("--stride", type=int)
    ap.add_argument("--base-size", type=int, required=True)
    ap.add_argument("--scales", required=True)
    ap.add_argument("--flip", action="store_true")
    args = ap.parse_args()
    with safe_open(args.checkpoint, "pt") as f:
        spec = json.loads(f.metadata()["segtool.spec"])
    model = DANet(spec).double()
    state = {k: v.double() for k, v in load_file(args.checkpoint).items()}
    model.load_state_dict(state, strict=True)
    model.eval()
    image = load_file(args.inputs)["image"].double()
    stride = args.stride or int(args.crop * 2.0 / 3.0)
    scales = [float(s) for s in args.scales.split(",")]
    with torch.no_grad():
        scores = multi_eval(model, image, len(spec["classes"]), args.base_size, args.crop,
                            stride, scales, args.flip, spec["mean"], spec["std"])
    save_file({"scores": scores.contiguous()}, args.output)


if __name__ == "__main__":
    main()
