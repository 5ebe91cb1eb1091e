#!/usr/bin/env python3
"""`--engine auto` against every engine it chooses from, on the CPU at hand, side by side
in one run: what auto picked, and how far its latency is from the fastest engine's.

auto times the engines on first use of a model and caches the choice under
$SEGTOOL_HOME; this bench gives it a fresh cache folder, so the first round includes the
measurement (its open time is reported apart) and later rounds take the cached choice.
For each file and precision, rounds alternate the engines (auto, ort, openvino, tract;
bf16: auto and openvino, the only engine that computes it); each engine's figure is the
median of its rounds' medians (`segtool bench --iterations N`). auto's ratio to the
fastest engine is printed, and flagged when over 1.03 (the target: within 3%).

    python3 bench/auto_vs_engines.py FP32.onnx [INT8.onnx ...] [--size 512x512]
        [--threads 2] [--rounds 3] [--iterations 10] [--segtool target/debug/segtool]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openvino_vs_ort import cpu  # noqa: E402  (the same CPU line in both benches)


def bench(a, model, engine, precision, env):
    """(median latency ms, engine that ran, auto's choice line, wall seconds)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [a.segtool, "bench", "--model", model, "--engine", engine, "--size", a.size,
               "--threads", str(a.threads), "--iterations", str(a.iterations),
               "--precision", precision, "--json", out.name]
        started = time.monotonic()
        run = subprocess.run(cmd, capture_output=True, text=True, env=env)
        wall = time.monotonic() - started
        if run.returncode != 0:
            return None, None, run.stderr.strip().splitlines()[-1], wall
        report = json.load(open(out.name))
    return (report["results"][0]["latency_ms"]["median"], report["engine"],
            report.get("engine_choice"), wall)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="ONNX files (float32, INT8)")
    p.add_argument("--size", default="512x512")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--segtool", default="target/debug/segtool")
    a = p.parse_args()
    print(f"CPU: {cpu()}; {a.threads} threads, {a.size}, batch 1, "
          f"medians of {a.rounds} alternating rounds of {a.iterations} runs")
    misses = 0
    with tempfile.TemporaryDirectory() as home:
        env = dict(os.environ, SEGTOOL_HOME=home)
        for model in a.models:
            for precision in ("f32", "bf16"):
                engines = ["auto", "ort", "openvino", "tract"] if precision == "f32" \
                    else ["auto", "openvino"]
                rounds = {e: [] for e in engines}
                notes, first_open = {}, None
                for r in range(a.rounds):
                    for e in engines:
                        ms, ran, choice, wall = bench(a, model, e, precision, env)
                        if ms is None:
                            notes[e] = f"did not run: {choice}"
                            continue
                        rounds[e].append(ms)
                        if e == "auto":
                            notes[e] = f"ran {ran}: {choice}"
                            if r == 0:
                                first_open = wall
                medians = {e: statistics.median(v) for e, v in rounds.items() if v}
                print(f"\n{os.path.basename(model)}, {precision}:")
                for e in engines:
                    line = f"  {e:9} " + (f"{medians[e]:9.2f} ms" if e in medians else "        -   ")
                    if e in notes and e != "auto":
                        line += f"  {notes[e]}"
                    print(line)
                others = {e: m for e, m in medians.items() if e != "auto"}
                if "auto" in medians and others:
                    fastest = min(others, key=others.get)
                    ratio = medians["auto"] / others[fastest]
                    flag = "" if ratio <= 1.03 else "  <-- over 3%"
                    misses += ratio > 1.03
                    print(f"  auto / fastest ({fastest}): {ratio:.3f}{flag}")
                    print(f"  auto's first command, measuring included: {first_open:.1f} s wall")
                print(f"  auto: {notes.get('auto', 'did not run')}")
    print(f"\n{misses} case(s) where auto is more than 3% slower than the fastest engine")


if __name__ == "__main__":
    main()
