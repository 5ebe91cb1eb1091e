#!/usr/bin/env python3
"""Benchmark (not a test): what OpenVINO's fast paths cost in labels, on real frames, with a
well-conditioned model, and what they gain in speed over ONNX Runtime fp32.

The model and frames come from bench/int8_vs_quantizers.py's builder (the PyTorch
reference DANet, random weights, BN statistics recalibrated on random normal inputs so
that logits are O(1); its `--child-build` writes the export and the clip's frames, split
into calib/val/held). Run segtool calibrate on `calib` first for the INT8 files.

    python3 bench/openvino_agreement.py FP32.onnx HELD_FRAMES/ [INT8.onnx ...]
        [--threads 2] [--runs 3]

Reference: ONNX Runtime CPU fp32 on the fp32 file. For each (file, engine, precision):
argmax agreement with the reference over every pixel of the held-out frames (and the
worst frame), max |logit - reference|, and latency (median of --runs runs per frame on
the first held frame after a warm-up, the same properties segtool sets), with the
speed-up over ONNX Runtime fp32. Prints the CPU.
"""
import argparse
import glob
import os
import statistics
import time

import cv2
import numpy as np
import onnxruntime as ort
import openvino as ov

from openvino_vs_ort import cpu

MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def frames(folder):
    out = []
    for p in sorted(glob.glob(os.path.join(folder, "*.png"))):
        rgb = cv2.imread(p)[:, :, ::-1].astype(np.float32) / 255.0
        out.append(((rgb - MEAN) / STD).transpose(2, 0, 1)[None].astype(np.float32))
    return out


def runner_ort(path, threads):
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    s = ort.InferenceSession(path, o, providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return lambda x: s.run(None, {name: x})[0]


def runner_ov(path, threads, precision):
    c = ov.Core().compile_model(path, "CPU", {
        "PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision,
        "INFERENCE_NUM_THREADS": str(threads)})
    r = c.create_infer_request()
    return lambda x: r.infer({0: x})[0].copy()


def latency(run, x, runs):
    run(x)
    t = []
    for _ in range(runs):
        s = time.perf_counter()
        run(x)
        t.append((time.perf_counter() - s) * 1e3)
    return statistics.median(t)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("fp32")
    p.add_argument("held")
    p.add_argument("int8", nargs="*")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    xs = frames(a.held)
    ref_run = runner_ort(a.fp32, a.threads)
    ref = [ref_run(x) for x in xs]
    ref_ms = latency(ref_run, xs[0], a.runs)
    std = float(np.mean([r.std() for r in ref]))
    print(f"CPU: {cpu()}; {len(xs)} held-out frames {xs[0].shape[3]}x{xs[0].shape[2]}; "
          f"{a.threads} threads; reference ONNX Runtime fp32 ({ref_ms:.1f} ms, logits std {std:.2f})")
    print(f"  {'file':34} {'engine':9} {'precision':9} {'agreement':>9} {'worst frame':>11} "
          f"{'max |dlogit|':>12} {'ms':>8} {'vs ORT fp32':>11}")
    rows = [(a.fp32, "openvino", "f32"), (a.fp32, "openvino", "bf16")]
    for q in a.int8:
        rows += [(q, "ort", "-"), (q, "openvino", "f32"), (q, "openvino", "bf16")]
    for path, engine, precision in rows:
        run = runner_ort(path, a.threads) if engine == "ort" else runner_ov(path, a.threads, precision)
        outs = [run(x) for x in xs]
        per = [float(np.mean(o.argmax(1) == r.argmax(1))) for o, r in zip(outs, ref)]
        agree = float(np.mean(per))
        diff = max(float(np.abs(o - r).max()) for o, r in zip(outs, ref))
        ms = latency(run, xs[0], a.runs)
        print(f"  {os.path.basename(path):34} {engine:9} {precision:9} {agree * 100:8.2f}% "
              f"{min(per) * 100:10.2f}% {diff:12.3f} {ms:8.1f} {ref_ms / ms:10.2f}x")


if __name__ == "__main__":
    main()
