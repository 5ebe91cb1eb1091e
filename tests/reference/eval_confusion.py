"""Independent check of `segtool eval`'s metrics: reads the saved prediction PNGs and the
ground-truth masks from disk, builds the confusion matrix with numpy (np.bincount) and
prints {"mean_iou", "pixel_accuracy", "confusion", "images"} as JSON.

Conventions, as segtool (and mmsegmentation) use them: rows are ground truth, pixels whose
ground truth is 255 (or >= num_classes) are skipped, intersection and union are summed
over the whole dataset before dividing, and the mean IoU is over the classes present in
the ground truth or the predictions (union > 0).

Needs only numpy: the PNG decoder below handles the non-interlaced 8-bit grayscale (and
palette-index) files that segtool and its dataset writer produce.

    python eval_confusion.py --pred DIR --gt DIR --num-classes K
"""

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np


def read_png_gray8(path):
    """(H, W) uint8 of an 8-bit grayscale or palette PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path}: not a PNG")
    pos, idat, header = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    width, height, depth, color, _, _, interlace = header
    if depth != 8 or color not in (0, 3) or interlace != 0:
        raise ValueError(f"{path}: depth {depth} colour type {color} interlace {interlace}")
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), dtype=np.uint8)
    return unfilter(raw.reshape(height, width + 1), width)


def unfilter(rows, width):
    """Undoes the per-row PNG filters (bytes per pixel = 1)."""
    out = np.zeros((rows.shape[0], width), dtype=np.int64)
    prior = np.zeros(width, dtype=np.int64)
    for y, row in enumerate(rows):
        kind, line = row[0], row[1:].astype(np.int64)
        if kind == 0:
            cur = line
        elif kind == 2:
            cur = (line + prior) % 256
        else:
            cur = np.zeros(width, dtype=np.int64)
            for x in range(width):
                a = cur[x - 1] if x > 0 else 0
                b = prior[x]
                c = prior[x - 1] if x > 0 else 0
                if kind == 1:
                    pred = a
                elif kind == 3:
                    pred = (a + b) // 2
                elif kind == 4:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                else:
                    raise ValueError(f"unknown PNG filter {kind}")
                cur[x] = (line[x] + pred) % 256
        out[y] = cur
        prior = cur
    return out.astype(np.uint8)


def confusion(pred_dir, gt_dir, k):
    names = sorted(n for n in os.listdir(gt_dir) if n.endswith(".png"))
    if not names:
        sys.exit(f"no masks in {gt_dir}")
    total = np.zeros(k * k, dtype=np.int64)
    for name in names:
        gt = read_png_gray8(os.path.join(gt_dir, name)).astype(np.int64).ravel()
        pred = read_png_gray8(os.path.join(pred_dir, name)).astype(np.int64).ravel()
        if gt.shape != pred.shape:
            sys.exit(f"{name}: prediction and mask sizes differ")
        valid = gt < k
        total += np.bincount(gt[valid] * k + pred[valid], minlength=k * k)
    return total.reshape(k, k), len(names)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pred", required=True)
    ap.add_argument("--gt", required=True)
    ap.add_argument("--num-classes", type=int, required=True)
    args = ap.parse_args()
    cm, images = confusion(args.pred, args.gt, args.num_classes)
    tp = np.diag(cm).astype(np.float64)
    union = cm.sum(0) + cm.sum(1) - np.diag(cm)
    present = union > 0
    iou = tp[present] / union[present]
    print(
        json.dumps(
            {
                "mean_iou": float(iou.mean()) if iou.size else 0.0,
                "pixel_accuracy": float(tp.sum() / max(cm.sum(), 1)),
                "confusion": cm.tolist(),
                "images": images,
            }
        )
    )


if __name__ == "__main__":
    main()
