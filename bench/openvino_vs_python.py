#!/usr/bin/env python3
"""segtool's OpenVINO engine against OpenVINO's own Python API, on the same file with the
same properties, side by side in one run (a benchmark, not a test).

For each model and precision, alternating rounds of:
  * `segtool bench --engine openvino`: the engine's own time per run (`engine_ms`: the
    input tensor set, `infer`, the output read back), batch 1;
  * OpenVINO's Python API (`openvino.Core().compile_model` with the properties segtool
    sets: PERFORMANCE_HINT=LATENCY, INFERENCE_PRECISION_HINT, INFERENCE_NUM_THREADS) and
    `InferRequest.infer` on a normalised input of the same size.
Medians of the rounds' medians; prints the CPU and segtool's speed as a fraction of the
Python API's (1.00x: the same; the target is at least 0.97x).

    python3 bench/openvino_vs_python.py MODEL.onnx ... [--size 512x512] [--threads 2]
        [--rounds 3] [--iterations 10] [--precisions f32,bf16] [--segtool target/debug/segtool]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import numpy as np
import openvino as ov

from openvino_vs_ort import cpu


def segtool_engine_ms(segtool, model, precision, a):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run(
            [segtool, "bench", "--model", model, "--engine", "openvino", "--precision", precision,
             "--size", a.size, "--threads", str(a.threads), "--iterations", str(a.iterations),
             "--warmup", "2", "--json", out.name],
            check=True, capture_output=True)
        return json.load(open(out.name))["results"][0]["engine_ms"]["median"]


def python_ms(request, x, iterations):
    for _ in range(2):
        request.infer({0: x})
    times = []
    for _ in range(iterations):
        t = time.perf_counter()
        request.infer({0: x})
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+")
    p.add_argument("--size", default="512x512")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--precisions", default="f32,bf16")
    p.add_argument("--segtool", default="target/debug/segtool")
    a = p.parse_args()
    h, w = (int(v) for v in a.size.split("x"))
    x = np.random.default_rng(0).standard_normal((1, 3, h, w)).astype(np.float32)
    core = ov.Core()
    print(f"CPU: {cpu()}; OpenVINO {ov.__version__}; {a.threads} threads, {a.size}, batch 1, "
          f"medians of {a.rounds} alternating rounds of {a.iterations} runs")
    print(f"  {'model':28} {'precision':9} {'segtool ms':>10} {'python ms':>10} {'segtool speed':>14}")
    for model in a.models:
        for precision in a.precisions.split(","):
            props = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": precision,
                     "INFERENCE_NUM_THREADS": str(a.threads)}
            request = core.compile_model(model, "CPU", props).create_infer_request()
            ours, theirs = [], []
            for _ in range(a.rounds):
                ours.append(segtool_engine_ms(a.segtool, model, precision, a))
                theirs.append(python_ms(request, x, a.iterations))
            s, t = statistics.median(ours), statistics.median(theirs)
            print(f"  {os.path.basename(model):28} {precision:9} {s:10.1f} {t:10.1f} {t / s:13.2f}x")


if __name__ == "__main__":
    main()
