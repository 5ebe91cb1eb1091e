"""Many cameras, one model: one shared multi-camera stream against one stream per camera.

For each model, in one run, side by side: 4 cameras together sending twice the frames one
engine session answers one at a time, for --seconds each,
- shared: one model and one session, runs batched across the cameras (MultiStream);
- separate: what one element (or node, or process) per camera gives today: each camera
  its own model copy, session and newest-frame stream, the sessions sharing the cores.
Each mode runs in a process of its own (so its peak RSS is its own), --rounds times,
alternating; medians over rounds. Printed per mode: frames answered per second in all,
each camera's p50/p99 latency (arrival to answer), the spread of answered counts across
cameras (fairness: (most - least) / most), and peak RSS.

    python3 bench/multi_camera.py --models out/demo/danet_tiny.onnx R18.onnx \\
        [--size 640x480] [--threads 2] [--seconds 10] [--rounds 3] [--engine ort]

The example binary is built with `cargo build -p segtool-runtime --example four_cameras`.
"""

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path


def run(a, model, mode):
    cmd = [a.binary, model, "--mode", mode, "--cameras", str(a.cameras), "--seconds",
           str(a.seconds), "--overload", "2", "--size", a.size, "--threads", str(a.threads),
           "--engine", a.engine]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def median(rows, key, i=None):
    return statistics.median(r[key][i] if i is not None else r[key] for r in rows)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", required=True)
    p.add_argument("--size", default="640x480")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--cameras", type=int, default=4)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--engine", default="ort")
    p.add_argument("--binary", default="target/debug/examples/four_cameras")
    a = p.parse_args()
    if not Path(a.binary).exists():
        sys.exit(f"{a.binary}: build it with cargo build -p segtool-runtime --example four_cameras")
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "unknown CPU")
    print(f"{a.cameras} cameras at 2x one session's rate, {a.size}, {a.engine}, "
          f"{a.threads} threads per session, {a.seconds:.0f} s x {a.rounds} rounds; {cpu}")
    for model in a.models:
        rows = {"shared": [], "separate": []}
        for _ in range(a.rounds):
            for mode in rows:
                rows[mode].append(run(a, model, mode))
        print(f"\n{model} (one frame alone: {median(rows['shared'], 'one_frame_ms'):.1f} ms)")
        print(f"  {'mode':<9} {'answered/s':>10} {'spread':>7} {'RSS MiB':>8}  "
              "per camera p50 / p99 ms")
        for mode, r in rows.items():
            cams = "  ".join(f"{median(r, 'p50_ms', c):.1f}/{median(r, 'p99_ms', c):.1f}"
                             for c in range(a.cameras))
            print(f"  {mode:<9} {median(r, 'answered_per_s'):>10.2f} "
                  f"{median(r, 'spread') * 100:>6.1f}% {median(r, 'peak_rss_mib'):>8.0f}  {cams}")
        ratio = median(rows["shared"], "answered_per_s") / median(rows["separate"], "answered_per_s")
        rss = median(rows["shared"], "peak_rss_mib") / median(rows["separate"], "peak_rss_mib")
        print(f"  shared / separate: {ratio:.2f}x the frames answered, {rss:.2f}x the memory")


if __name__ == "__main__":
    main()
