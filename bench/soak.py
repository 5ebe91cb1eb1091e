#!/usr/bin/env python3
"""`make soak` (a benchmark, not part of `make test`): each live path runs at twice the
engine's rate for SOAK_S seconds (default 1800), one after another:

  cli     ffmpeg (bikes.mp4, looped) -> `segtool infer --raw WxH --live --out -`
  gst     ffmpeg -> `gst-launch-1.0 fdsrc ! rawvideoparse ! segtoolseg live=true ! fakesink`
  python  ffmpeg -> a `segtool.LiveStream` loop (bench/soak/live_worker.py)
  ros2    ffmpeg -> a Cyclone DDS publisher -> `segtool-ros2 node` -> class_mask

    make soak                                   # all four, 30 minutes each
    SOAK_S=120 SOAK_PATHS=cli,gst make soak     # shorter, some paths
    python bench/soak.py --seconds 120 --paths python    # the same (env of scripts/setup.sh)

Per path: the engine's rate first (`segtool bench`, the same model, size and threads, the
path's fixed or dynamic shapes; for the ROS 2 node, its allocator settings too), then
frames at SOAK_OVERLOAD (2) times that rate, paced by the wall clock. Every 10 s the
process under test's RSS (/proc/PID/status VmRSS), open fds (/proc/PID/fd) and threads
are sampled, with a progress line. Checks (PASS/FAIL with the figures; the exit status
is 1 on any FAIL):
  feed     the rate asked for was reached (within 3%);
  rss      from the end of the warm-up (min(120 s, SOAK_S / 6)) to the end, RSS grows < 2%
           (the floor of each end: the lowest sample of a window's length, >= 3 samples);
  fds      open fds stay flat after the warm-up;  threads: likewise;
  counts   answered + dropped = sent, exactly, once drained (the path's own counts; the
           answers the driver received equal the path's answered);
  latency  p99 of the frames sent in the last window within 10% of the first window's
           (windows of min(300 s, SOAK_S / 6)).
Writes to SOAK_OUT (out/soak/): <path>.csv (the samples), <path>_latency.csv (every
answer), <path>.json (summary and checks), <path>.png (the figures against time),
<path>.log (the process's output), soak.png (all paths), summary.json, table.txt and
table.md (the same table in Markdown, for book/src/reliability.md).

Knobs (environment, or the flags): SOAK_S, SOAK_PATHS, SOAK_OUT, SOAK_MODEL
(out/demo/danet_tiny.onnx, from `make demo`), SOAK_SIZE (WxH, 640x272: the clip's own),
SOAK_THREADS (1 engine thread: the second core is the feeder's), SOAK_OVERLOAD (2).
Needs ffmpeg (installed with apt when missing) and matplotlib (bench/requirements-soak.txt,
installed into the venv when missing); the Python path needs the wheel (target/wheels,
`make wheel`), unpacked here into SOAK_OUT/wheel.
"""
import argparse
import glob
import importlib.util
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
import zipfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from soak import common  # noqa: E402

PATHS = ["cli", "gst", "python", "ros2"]


def machine():
    cpu = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    with open("/proc/meminfo") as f:
        mem = int(f.readline().split()[1]) / 2**20
    return (f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Linux {platform.release()}, "
            f"load average {os.getloadavg()[0]:.2f} at start")


def ensure_ffmpeg():
    if shutil.which("ffmpeg"):
        return
    common.log("ffmpeg missing: installing Debian's ffmpeg (apt; about a minute)")
    sudo = [] if os.geteuid() == 0 else ["sudo"]
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(sudo + ["apt-get", "update", "-qq"], check=True, env=env)
    subprocess.run(sudo + ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "ffmpeg"],
                   check=True, env=env, stdout=subprocess.DEVNULL)


def ensure_matplotlib():
    if importlib.util.find_spec("matplotlib") is None:
        req = os.path.join(common.ROOT, "bench", "requirements-soak.txt")
        common.log(f"matplotlib missing: pip install -r {req}")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-r", req], check=True)


def unpack_wheel(target, out):
    """The newest target/wheels/segtool-*.whl, unpacked (abi3: an importable folder)."""
    wheels = sorted(glob.glob(os.path.join(os.path.dirname(target), "wheels", "segtool-*.whl")),
                    key=os.path.getmtime)
    if not wheels:
        sys.exit("no target/wheels/segtool-*.whl: run `make wheel` first (the Python path)")
    dest = os.path.join(out, "wheel")
    stamp = os.path.join(dest, ".from")
    tag = f"{wheels[-1]} {os.path.getmtime(wheels[-1])}"
    if not (os.path.exists(stamp) and open(stamp).read() == tag):
        shutil.rmtree(dest, ignore_errors=True)
        with zipfile.ZipFile(wheels[-1]) as z:
            z.extractall(dest)
        with open(stamp, "w") as f:
            f.write(tag)
    return dest


def table(results, markdown=False):
    """The summary table: aligned text (table.txt, the console), or Markdown (table.md,
    for book/src/reliability.md)."""
    head = ("path", "s", "engine fps", "fed fps (x)", "answered fps", "sent", "answered", "dropped",
            "RSS MiB start->base->end floor (growth)", "fds", "threads", "p99 ms first/last", "checks")
    rows = [head]
    for s in results:
        if "error" in s:
            rows.append((s["path"],) + ("-",) * (len(head) - 2) + ("ERROR",))
            continue
        lat = s["latency_ms"]
        rows.append((
            s["path"], f"{s['duration_s']:.0f}", f"{s['engine_fps']:.1f}",
            f"{s['rate_fed']:.1f} ({s['rate_fed'] / s['engine_fps']:.2f}x)",
            f"{s['answered_fps']:.1f}", str(s["sent"]),
            str(s["answered"]), str(s["dropped"]),
            f"{s['rss_start_kib'] / 1024:.1f}->{s['rss_base_kib'] / 1024:.1f}->"
            f"{s['rss_end_kib'] / 1024:.1f} ({s['rss_growth_pct']:+.2f}%)",
            f"{s['fds']['start']}->{s['fds']['end']}", f"{s['threads']['start']}->{s['threads']['end']}",
            f"{lat['p99_first']:.1f}/{lat['p99_last']:.1f} ({lat['p99_drift_pct']:+.1f}%)",
            "PASS" if s["passed"] else "FAIL " + ",".join(c["name"] for c in s["checks"] if not c["ok"])))
    if markdown:
        lines = ["| " + " | ".join(r) + " |" for r in rows]
        lines.insert(1, "|" + "|".join("---" if i == 0 else "--:" for i in range(len(head))) + "|")
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    lines.insert(1, "-" * len(lines[0]))
    return "\n".join(lines)


def main():
    env = os.environ.get
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=float(env("SOAK_S", "1800")))
    ap.add_argument("--paths", default=env("SOAK_PATHS", ",".join(PATHS)))
    ap.add_argument("--out", default=env("SOAK_OUT", os.path.join(common.ROOT, "out", "soak")))
    ap.add_argument("--model", default=env("SOAK_MODEL", os.path.join(common.ROOT, "out", "demo", "danet_tiny.onnx")))
    ap.add_argument("--size", default=env("SOAK_SIZE", "640x272"), help="WxH")
    ap.add_argument("--threads", type=int, default=int(env("SOAK_THREADS", "1")))
    ap.add_argument("--overload", type=float, default=float(env("SOAK_OVERLOAD", "2")))
    ap.add_argument("--profile", default=env("SOAK_PROFILE", "debug"))
    a = ap.parse_args()
    paths = [p.strip() for p in a.paths.split(",") if p.strip()]
    unknown = [p for p in paths if p not in PATHS]
    if unknown or not paths:
        sys.exit(f"SOAK_PATHS: unknown {unknown}; choose from {','.join(PATHS)}")
    target = os.path.join(env("CARGO_TARGET_DIR", os.path.join(common.ROOT, "target")), a.profile)
    clip = os.path.join(env("SEGTOOL_HOME", os.path.expanduser("~/.cache/segtool")), "clips", "bikes.mp4")
    needs = [(a.model, "make demo"), (clip, "scripts/setup.sh"), (os.path.join(target, "segtool"), "make demo")]
    needs += [(os.path.join(target, "libgstsegtool.so"), "make demo")] if "gst" in paths else []
    needs += [(os.path.join(target, "segtool-ros2"), "make demo")] if "ros2" in paths else []
    for path, how in needs:
        if not os.path.exists(path):
            sys.exit(f"{path} missing: run `{how}` first")
    os.makedirs(a.out, exist_ok=True)
    ensure_ffmpeg()
    ensure_matplotlib()
    from soak import plots

    w, h = (int(v) for v in a.size.lower().split("x"))
    cfg = common.Config(
        model=os.path.abspath(a.model), width=w, height=h, threads=a.threads,
        duration_s=a.seconds, overload=a.overload, out=os.path.abspath(a.out), target=target,
        clip=clip, python=sys.executable,
        wheel_dir=unpack_wheel(target, a.out) if "python" in paths else "", env=dict(os.environ))
    where = machine()
    common.log(f"soak: {', '.join(paths)}; {a.seconds:.0f} s each at {a.overload:g}x the engine's rate; "
               f"{os.path.basename(cfg.model)} at {w}x{h}, ONNX Runtime CPU, {a.threads} thread(s)\n"
               f"machine: {where}\nout: {cfg.out}")
    results, figures = [], []
    for name in paths:
        common.log(f"=== {name} ===")
        started = time.perf_counter()
        try:
            module = __import__(f"soak.{name}", fromlist=["run"])
            summary, rows, rec = module.run(cfg)
            # The path's whole time: the engine's rate, start-up, the feed, the drain.
            summary["wall_s"] = round(time.perf_counter() - started, 1)
            summary["overhead_s"] = round(summary["wall_s"] - summary["duration_s"], 1)
            common.write(cfg, summary, rows, rec)
            plots.path_figure(cfg.out, summary, rows, rec, where)
            figures.append((summary, rows))
        except Exception as e:  # one broken path does not hide the others' figures
            traceback.print_exc()
            summary = {"path": name, "error": f"{type(e).__name__}: {e}", "passed": False}
        results.append(summary)
    if figures:
        plots.overview(cfg.out, figures, where)
    text = table(results)
    print("\n" + f"machine: {where}\nmodel {os.path.basename(cfg.model)} at {w}x{h}, "
          f"{a.threads} ONNX Runtime thread(s), {a.overload:g}x the engine's rate\n" + text)
    with open(os.path.join(cfg.out, "table.txt"), "w") as f:
        f.write(f"machine: {where}\n{text}\n")
    with open(os.path.join(cfg.out, "table.md"), "w") as f:
        f.write(f"Machine: {where}. Model {os.path.basename(cfg.model)} at {w}x{h}, "
                f"{a.threads} ONNX Runtime thread(s), {a.overload:g}x the engine's rate, "
                f"{a.seconds:.0f} s per path.\n\n{table(results, markdown=True)}\n")
    with open(os.path.join(cfg.out, "summary.json"), "w") as f:
        json.dump({"machine": where, "seconds": a.seconds, "size": [w, h], "threads": a.threads,
                   "overload": a.overload, "model": cfg.model, "paths": results}, f, indent=2)
    failed = [s["path"] for s in results if not s["passed"]]
    print(f"soak: {'FAIL: ' + ', '.join(failed) if failed else 'PASS'} ({cfg.out})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
