#!/usr/bin/env python3
"""Benchmark (not a test): segtool serving an mmdeploy SDK folder (`segtool.Segmenter(folder)`,
ONNX Runtime CPU) against mmdeploy's own SDK (`mmdeploy_runtime.Segmentor`, the C++ runtime
with its bundled ONNX Runtime) on the same folder and the same images.

    source "$(bash scripts/setup.sh)"; bash scripts/python_tests.sh wheel
    pip install --no-deps --force-reinstall target/wheels/segtool-*.whl
    python tests/reference/mmdeploy_ref.py --out /tmp/bench_mmd     # the SDK folder + images
    python bench/foreign_vs_mmdeploy.py [--ref /tmp/bench_mmd] [--repeats 20] [--quick]

Why: "segtool serves an mmdeploy SDK folder" is only worth it if it is not slower than
the SDK it replaces. What is timed is the whole call, one image per call, as a user sees
it: uint8 HxWx3 in, HxW class map out (the SDK's pipeline: keep-ratio Resize into its
box, Normalize, the network, the mask resized back to the image). The reference folder's
box is 160x96, so at camera sizes the resizes weigh as much as the (small) network.

Each contender runs in its own process (no two ONNX Runtimes, thread pools or OpenCVs in
one process), on the same images: smooth random RGB at 512x1024 and 360x640 (HxW) and the
reference's small images. --rounds processes per contender, in alternating order (so load
from elsewhere falls on both alike); in each, per image: --warmup calls, then its share of
--repeats timed calls (pooled over the rounds); printed
per size: median and p90 (ms) per contender, ratio = mmdeploy median / segtool median
(> 1 means segtool is faster), and the fraction of mask pixels on which they agree.
Threads: segtool gets `threads=N`; Segmentor has no thread argument (model_path,
device_name, device_id only), its ONNX Runtime uses its default intra-op pool (one
thread per physical core). Both processes get OMP_NUM_THREADS and OPENCV_FOR_THREADS_NUM
= N; the threads each process started are counted (/proc/self/task) and printed.
"""
import argparse
import ctypes
import glob
import json
import os
import subprocess
import sys
import tempfile
import time
from importlib import metadata

import numpy as np


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def smooth_image(rng, h, w):
    """Smooth random RGB (tests/reference/mmdeploy_ref.py's recipe, cv2 for the upscale)."""
    import cv2
    small = rng.integers(0, 256, size=(h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR).astype(np.int32)
    return np.clip(img + rng.integers(-12, 13, size=(h, w, 3)), 0, 255).astype(np.uint8)


def threads_now():
    return len(os.listdir("/proc/self/task"))


def ort_libs_mapped():
    with open("/proc/self/maps") as f:
        return sorted({os.path.basename(l.split()[-1]) for l in f if "libonnxruntime" in l})


def sdk_mask(segmentor, bgr):
    """tests/reference/mmdeploy_ref.py's sdk_mask: mmdeploy-runtime 1.3.1 under numpy 2
    returns the int32 mask with strides (0, 0); the buffer itself is right, copied out."""
    out = segmentor(bgr)
    h, w = out.shape
    if out.strides == (4 * w, 4):
        return np.array(out)
    buf = (ctypes.c_int32 * (h * w)).from_address(out.__array_interface__["data"][0])
    mask = np.frombuffer(buf, np.int32).reshape(h, w).copy()
    del out
    return mask


def worker(args):
    """One contender in this process: times every image, writes masks + times to --out."""
    data = np.load(args.images)
    names = list(data.files)
    before = threads_now()
    if args.worker == "segtool":
        import segtool
        seg = segtool.Segmenter(args.sdk, engine="ort", providers=["cpu"], threads=args.threads)
        info = {"engine": f"segtool {segtool.__version__}: {seg.engine}/{seg.provider}, threads={args.threads}",
                "ort": f"onnxruntime {metadata.version('onnxruntime')} (venv package)"}
        prep, run = (lambda rgb: rgb), (lambda rgb: seg.segment(rgb, color="rgb").mask)
    else:
        import mmdeploy_runtime
        seg = mmdeploy_runtime.Segmentor(model_path=args.sdk, device_name="cpu", device_id=0)
        libs = glob.glob(os.path.join(os.path.dirname(mmdeploy_runtime.__file__), "libonnxruntime.so.*"))
        info = {"engine": f"mmdeploy_runtime {mmdeploy_runtime.__version__}: Segmentor(device_name='cpu'), "
                          "no thread setting",
                "ort": "bundled " + ", ".join(os.path.basename(p) for p in libs)}
        # the SDK takes BGR (cv2.imread's order): converted once, outside the timing
        prep, run = (lambda rgb: np.ascontiguousarray(rgb[:, :, ::-1])), (lambda bgr: sdk_mask(seg, bgr))
    images = {n: prep(data[n]) for n in names}
    out = {}
    for n, img in images.items():
        for _ in range(args.warmup):
            run(img)
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            mask = run(img)
            times.append(time.perf_counter() - t0)
        out[f"{n}.mask"] = mask.astype(np.uint8)
        out[f"{n}.times"] = np.asarray(times)
    info["threads_started"] = threads_now() - before
    info["ort_mapped"] = ort_libs_mapped()
    np.savez(args.out, **out)
    print(json.dumps(info))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ref", default="/tmp/bench_mmd", help="mmdeploy_ref.py's --out (danet_sdk/, images/)")
    ap.add_argument("--sizes", default="512x1024,360x640", help="HxW of the generated images")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=4, help="processes per contender, alternating")
    ap.add_argument("--quick", action="store_true", help="5 repeats, 1 warm-up, 1 round")
    ap.add_argument("--worker", choices=["segtool", "mmdeploy"], help=argparse.SUPPRESS)
    ap.add_argument("--sdk", help=argparse.SUPPRESS)
    ap.add_argument("--images", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.quick:
        args.repeats, args.warmup, args.rounds = 5, 1, 1
    sdk = os.path.join(args.ref, "danet_sdk")
    if not os.path.isfile(os.path.join(sdk, "deploy.json")):
        sys.exit(f"no SDK folder at {sdk}: run tests/reference/mmdeploy_ref.py --out {args.ref} first")

    import cv2
    rng = np.random.default_rng(0)
    images = {}
    for s in args.sizes.split(","):
        h, w = (int(v) for v in s.lower().split("x"))
        images[f"{h}x{w}"] = smooth_image(rng, h, w)
    for p in sorted(glob.glob(os.path.join(args.ref, "images", "*.png"))):
        rgb = cv2.imread(p, cv2.IMREAD_COLOR)[:, :, ::-1]
        images[f"{rgb.shape[0]}x{rgb.shape[1]} ({os.path.basename(p)})"] = np.ascontiguousarray(rgb)

    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENCV_FOR_THREADS_NUM=str(args.threads))
    results, infos = {}, {}
    load0 = open("/proc/loadavg").read().split()[0]
    per_round = -(-args.repeats // args.rounds)
    with tempfile.TemporaryDirectory() as tmp:
        np.savez(os.path.join(tmp, "images.npz"), **images)
        for r in range(args.rounds):  # alternating order: background load hits both alike
            for who in (("segtool", "mmdeploy") if r % 2 == 0 else ("mmdeploy", "segtool")):
                out = os.path.join(tmp, f"{who}.npz")
                cmd = [sys.executable, os.path.abspath(__file__), "--worker", who, "--sdk", sdk,
                       "--images", os.path.join(tmp, "images.npz"), "--out", out, "--threads",
                       str(args.threads), "--repeats", str(per_round), "--warmup", str(args.warmup)]
                # the SDK logs to stdout: the worker's JSON is its last line
                p = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, text=True)
                infos[who] = json.loads(p.stdout.strip().splitlines()[-1])
                with np.load(out) as d:
                    prev = results.get(who, {})
                    results[who] = {k: np.concatenate([prev[k], d[k]]) if k.endswith(".times") and prev
                                    else d[k] for k in d.files}

    load1 = open("/proc/loadavg").read().split()[0]
    print(f"CPU: {cpu_model()} ({os.cpu_count()} cores; load average {load0} before, {load1} after); "
          f"SDK folder {sdk}")
    print(f"{args.threads} threads asked of each; OMP_NUM_THREADS=OPENCV_FOR_THREADS_NUM={args.threads}; "
          f"{args.rounds} process(es) per contender, alternating, each {args.warmup} warm-up + {per_round} "
          f"timed calls per image (one image per call)")
    for who, i in infos.items():
        print(f"  {who:9} {i['engine']}; {i['ort']}; libonnxruntime mapped: {', '.join(i['ort_mapped'])}; "
              f"threads started by the process: {i['threads_started']}")
    head = f"{'image (HxW)':24} {'segtool med':>11} {'p90':>7} {'mmdeploy med':>12} {'p90':>7} {'ratio':>7} {'masks agree':>11}"
    print(head)
    print("-" * len(head))
    for n in images:
        a, b = results["segtool"][f"{n}.times"] * 1e3, results["mmdeploy"][f"{n}.times"] * 1e3
        ma, mb = results["segtool"][f"{n}.mask"], results["mmdeploy"][f"{n}.mask"]
        agree = float(np.mean(ma == mb)) if ma.shape == mb.shape else float("nan")
        am, bm = np.median(a), np.median(b)
        print(f"{n:24} {am:8.2f} ms {np.percentile(a, 90):7.2f} {bm:9.2f} ms {np.percentile(b, 90):7.2f} "
              f"{bm / am:6.2f}x {agree * 100:10.3f}%")
    print("ratio = mmdeploy median / segtool median (> 1: segtool faster); masks agree: "
          "fraction of equal pixels between the two contenders' masks")


if __name__ == "__main__":
    main()
