#!/usr/bin/env python3
"""segtool's OpenVINO engine against ONNX Runtime (segtool's CPU engine until now, and
what a user would otherwise run), on the same files, side by side in one run.

For each model: `segtool bench` with ONNX Runtime f32, OpenVINO f32 and OpenVINO bf16
(and, for an INT8 file, ORT and OpenVINO on it), each in rounds that alternate the
engines (medians of the rounds' medians), same threads and input size. Prints the CPU,
one line per engine with its median latency and its speed-up over ORT f32, and what
OpenVINO's nodes ran in.

    python3 bench/openvino_vs_ort.py MODEL.onnx[,INT8.onnx] ... [--size 512x512]
        [--threads 2] [--rounds 3] [--iterations 10] [--segtool target/debug/segtool]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile


def cpu():
    name, flags = "unknown CPU", set()
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name") and name == "unknown CPU":
            name = line.split(":", 1)[1].strip()
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
    isa = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")
           if f in flags]
    return f"{name} ({os.cpu_count()} cores; {', '.join(isa)})"


def bench(segtool, model, engine, precision, a):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [segtool, "bench", "--model", model, "--engine", engine, "--size", a.size,
               "--threads", str(a.threads), "--iterations", str(a.iterations),
               "--json", out.name]
        if engine == "openvino":
            cmd += ["--precision", precision]
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed:\n{run.stderr}")
        report = json.load(open(out.name))
    return report["results"][0]["latency_ms"]["median"], report.get("ran_in", "")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("models", nargs="+", help="MODEL.onnx or FP32.onnx,INT8.onnx")
    p.add_argument("--size", default="512x512")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--iterations", type=int, default=10)
    p.add_argument("--segtool", default="target/debug/segtool")
    a = p.parse_args()
    print(f"CPU: {cpu()}; {a.threads} threads, {a.size}, batch 1, "
          f"medians of {a.rounds} alternating rounds of {a.iterations} runs")
    for pair in a.models:
        files = pair.split(",")
        runs = [(files[0], "ort", "f32"), (files[0], "openvino", "f32"),
                (files[0], "openvino", "bf16")]
        if len(files) > 1:
            runs += [(files[1], "ort", "f32"), (files[1], "openvino", "f32"),
                     (files[1], "openvino", "bf16")]
        times = {r: [] for r in runs}
        ran = {}
        for _ in range(a.rounds):
            for r in runs:
                ms, ran_in = bench(a.segtool, *r, a)
                times[r].append(ms)
                ran[r] = ran_in
        base = statistics.median(times[runs[0]])
        print(f"\n{pair}")
        print(f"  {'file':<10} {'engine':<9} {'precision':<9} {'ms':>9} {'vs ORT f32':>11}")
        for r in runs:
            ms = statistics.median(times[r])
            kind = "fp32" if r[0] == files[0] else "int8"
            print(f"  {kind:<10} {r[1]:<9} {r[2]:<9} {ms:9.1f} {base / ms:10.2f}x  {ran[r]}")


if __name__ == "__main__":
    main()
