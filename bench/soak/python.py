"""Python's `LiveStream`: ffmpeg's frames, paced by the driver, into live_worker.py's
stdin (a camera thread submitting, the main thread consuming); the worker prints each
frame's fate with the stream's own latency, and `live.stats()` at the end. Process under
test: the worker's python."""
import io
import json
import os
import subprocess
import sys

from . import common


def run(cfg):
    name = "python"
    fps = common.engine_rate(cfg, dynamic=False)
    rate = cfg.overload * fps
    common.log(f"[{name}] engine alone: {fps:.1f} frames/s; feeding {rate:.1f} frames/s")
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "live_worker.py")
    env = dict(cfg.env, PYTHONPATH=cfg.wheel_dir)
    proc = subprocess.Popen(
        [cfg.python, worker, cfg.model, str(cfg.width), str(cfg.height), str(cfg.threads)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        env=env)
    rec = common.Record()
    state = {"stats": None, "ready": None, "failed": 0}

    def on_line(line):
        if line.startswith("{"):
            state["stats"] = json.loads(line)
        elif line.startswith("ready:"):
            state["ready"] = line
        elif rec.t0 is not None:
            index, status, latency = line.split()
            if status == "a":
                rec.answer(int(index), float(latency))
            elif status == "d":
                rec.drop()
            else:
                state["failed"] += 1

    out = common.Lines(io.TextIOWrapper(proc.stdout), os.path.join(cfg.out, f"{name}.out"), on_line)
    err = common.Lines(io.TextIOWrapper(proc.stderr), os.path.join(cfg.out, f"{name}.log"))
    try:
        out.wait_for(r"^ready:", 120, proc)
        fed = common.feed(cfg, name, rate, lambda i, f: common.write_all(proc.stdin, f), rec,
                          proc, lambda: common.Sampler(name, proc.pid, rec))
        proc.stdin.close()
        rc = proc.wait(timeout=120)
        out.join(30)
        err.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    stats = state["stats"]
    if rc != 0 or stats is None:
        sys.stdout.write("\n".join(err.tail) + "\n")
        raise RuntimeError(f"{name}: the worker exited {rc}")
    final = {"sent": stats["submitted"], "answered": stats["answered"],
             "dropped": stats["dropped"], "failed": stats["failed"],
             "observed": len(rec.answers), "seen_dropped": rec.dropped}
    summary = common.evaluate(name, cfg, rec, fed, final, fps, rate,
                              {"own_stats": stats, "engine": state["ready"],
                               "process": "python (segtool.LiveStream)"})
    return summary, fed["rows"], rec
