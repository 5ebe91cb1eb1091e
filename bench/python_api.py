#!/usr/bin/env python3
"""Benchmark (not a test): the Python package's `Segmenter.segment` against the loop a
Python user writes with onnxruntime and numpy, on the same R-50 export at 512x1024.

    make test   # or: source "$(bash scripts/setup.sh)"; bash scripts/python_tests.sh test
    target/python-venv/bin/python bench/python_api.py [--size 512x1024] [--threads 2] [--rounds 5]

The model is the random-weight DANet-R50 of bench/infer_vs_python_ort.py (built once by
that script's `build_model` in the build venv, which has torch; cached in --work).
Both sides run ONNX Runtime's CPU provider with the same intra-op threads on the same
uint8 RGB image, one image per call, after a warm-up:
  * segtool: `Segmenter(path, engine="ort", providers=["cpu"], threads=N).segment(img)`,
             and the same with `fixed_size=(H, W)` (ORT plans memory for the one size);
  * python:  normalise with numpy ((x / 255 - mean) / std, HWC -> NCHW float32),
             `session.run`, `argmax` over the classes -> uint8 mask.
Each round times `--calls` calls of each, interleaved; printed: the median over
`--rounds` rounds of the per-call time, the ratio (python / segtool, > 1 means segtool
is faster), and segtool's binding overhead: wall time of `segment` minus the time the
Rust side measured for it (`Segmentation.timings.total`: pre + engine + post), over the
wall time. The CPU model is printed first.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnxruntime as ort

import segtool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def build_model(work: str, backbone: str) -> str:
    """The R-50 export, built by bench/infer_vs_python_ort.py in the build venv (torch)."""
    py = os.environ.get("SEGTOOL_PYTHON")
    if not py:
        sys.exit("SEGTOOL_PYTHON unset: source \"$(bash scripts/setup.sh)\" first (the build venv has torch)")
    segtool_bin = os.environ.get("SEGTOOL_BIN", os.path.join(ROOT, "target", "debug", "segtool"))
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import infer_vs_python_ort as b; "
        "print(b.build_model(sys.argv[2], sys.argv[3], sys.argv[4], 19)['ort'])"
    )
    out = subprocess.run(
        [py, "-c", code, os.path.join(ROOT, "bench"), work, segtool_bin, backbone],
        check=True, stdout=subprocess.PIPE, text=True,
    )
    return out.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="512x1024", help="HxW")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1, help="calls of each side per round")
    ap.add_argument("--backbone", default="resnet50")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "bench-python-api"))
    args = ap.parse_args()
    h, w = (int(v) for v in args.size.lower().split("x"))
    os.makedirs(args.work, exist_ok=True)
    model = build_model(args.work, args.backbone)
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores); model {model}; {h}x{w}; "
          f"{args.threads} intra-op threads; median of {args.rounds} rounds x {args.calls} call(s)")

    seg = segtool.Segmenter(model, engine="ort", providers=["cpu"], threads=args.threads)
    # The same with ONNX Runtime's memory planned for the one frame size (a fixed camera).
    fixed = segtool.Segmenter(model, engine="ort", providers=["cpu"], threads=args.threads, fixed_size=(h, w))
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    mean = np.asarray(seg.spec["mean"], np.float32)
    std = np.asarray(seg.spec["std"], np.float32)

    def python_loop(img: np.ndarray) -> np.ndarray:
        x = ((img.astype(np.float32) / np.float32(255.0) - mean) / std).transpose(2, 0, 1)[None]
        logits = sess.run(None, {name: np.ascontiguousarray(x)})[0]
        return np.argmax(logits[0], axis=0).astype(np.uint8)

    rng = np.random.default_rng(0)
    img = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    # Warm-up (ORT plans memory on the first run), and the two agree.
    agree = np.mean(seg.segment(img).mask == python_loop(img))
    fixed.segment(img)
    ours, theirs, planned, overhead = [], [], [], []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        for _ in range(args.calls):
            out = seg.segment(img)
        ours.append((time.perf_counter() - t0) / args.calls)
        assert out.timings is not None
        overhead.append(max(0.0, ours[-1] - out.timings.total) / ours[-1])
        t0 = time.perf_counter()
        for _ in range(args.calls):
            python_loop(img)
        theirs.append((time.perf_counter() - t0) / args.calls)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fixed.segment(img)
        planned.append((time.perf_counter() - t0) / args.calls)
    a, b, c = statistics.median(ours), statistics.median(theirs), statistics.median(planned)
    print(f"{'':28} {'per call':>10} {'ratio':>8}")
    print(f"{'onnxruntime-Python + numpy':28} {b * 1e3:8.1f} ms {1.0:7.2f}x")
    print(f"{'segtool.Segmenter.segment':28} {a * 1e3:8.1f} ms {b / a:7.2f}x")
    print(f"{'  ... with fixed_size=(H, W)':28} {c * 1e3:8.1f} ms {b / c:7.2f}x")
    print(f"segtool binding overhead over the Rust call: {statistics.median(overhead) * 100:.3f}% "
          f"(median); masks agree on {agree * 100:.3f}% of pixels")


if __name__ == "__main__":
    main()
