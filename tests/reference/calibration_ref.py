#!/usr/bin/env python3
"""Independent numpy reference of TensorRT's entropy (KL) calibration.

Reads JSON {"counts": [...], "max": float} on stdin (a histogram of |x| with len(counts)
equal bins over [0, max]) and prints JSON {"bins": i, "threshold": t}: the candidate
number of kept bins i in [128, len(counts)] minimising KL(P || Q) and its threshold
i * max / len(counts).

The zero bin first takes bin 1's count (as NVIDIA's pytorch-quantization does: ReLU
zeros would otherwise dominate). Per candidate i (as published for TensorRT, GTC 2017, and in MXNet/ONNX Runtime):
P = hist[:i] with the outliers sum(hist[i:]) added to P[i-1]; Q = hist[:i] merged into
128 chunks of i // 128 bins (remainder into the last chunk) and expanded back over the
bins where P is non-zero; both smoothed (zeros -> 1e-4, taken evenly from the
non-zeros) and normalised; first minimum wins.
"""
import json
import sys

import numpy as np

LEVELS = 128
EPS = 1e-4


def smooth(p):
    zeros = p == 0
    nz = p.size - zeros.sum()
    if nz == 0:
        return None
    eps1 = EPS * zeros.sum() / nz
    out = np.where(zeros, EPS, p - eps1)
    if np.any(out <= 0):
        return None
    return out


def kl(p, q):
    p = p / p.sum()
    q = q / q.sum()
    m = p > 0
    return float(np.sum(p[m] * np.log(p[m] / q[m])))


def entropy_bins(counts, levels=LEVELS):
    counts = np.asarray(counts, dtype=np.float64).copy()
    n = counts.size
    if n > 1:
        counts[0] = counts[1]
    if not counts.any():
        return None
    suffix = np.concatenate([np.cumsum(counts[::-1])[::-1], [0.0]])
    best, best_i = np.inf, None
    for i in range(levels, n + 1):
        p = counts[:i].copy()
        p[-1] += suffix[i]
        merged = i // levels
        # chunk id of every bin; the remainder joins the last chunk
        chunk = np.minimum(np.arange(i) // merged, levels - 1)
        sums = np.bincount(chunk, weights=counts[:i], minlength=levels)
        nonzero = (p != 0).astype(np.float64)
        norms = np.bincount(chunk, weights=nonzero, minlength=levels)
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(norms > 0, sums / norms, 0.0)
        q = np.where(p != 0, per[chunk], 0.0)
        ps, qs = smooth(p), smooth(q)
        d = np.inf if ps is None or qs is None else kl(ps, qs)
        if d < best:
            best, best_i = d, i
    return best_i


def main():
    req = json.load(sys.stdin)
    counts = req["counts"]
    i = entropy_bins(counts)
    print(json.dumps({"bins": i, "threshold": i * req["max"] / len(counts)}))


if __name__ == "__main__":
    main()
