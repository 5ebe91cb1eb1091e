"""The `--live` pipe: ffmpeg's frames, paced by the driver, into `segtool infer --raw WxH
--live --out -`, which writes each answered frame's index (8 bytes, little-endian) and
class map to stdout and its counts (submitted, answered, dropped) to stderr at EOF.
Latency: the driver's, frame written to its class map read back. Process under test:
segtool."""
import io
import os
import re
import subprocess
import threading

from . import common

SUMMARY = re.compile(r"live: (\d+) frame\(s\) submitted, (\d+) answered, (\d+) dropped")
P99 = re.compile(r"arrival-to-mask ms p50 ([\d.]+) p90 [\d.]+ p99 ([\d.]+)")


def run(cfg):
    name = "cli"
    fps = common.engine_rate(cfg, dynamic=False)
    rate = cfg.overload * fps
    common.log(f"[{name}] engine alone: {fps:.1f} frames/s; feeding {rate:.1f} frames/s")
    proc = subprocess.Popen(
        [cfg.segtool, "infer", "--model", cfg.model, "--raw", f"{cfg.width}x{cfg.height}",
         "--live", "--out", "-", "--engine", "ort", "--threads", str(cfg.threads), "--quiet"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
        env=cfg.env)
    err = common.Lines(io.TextIOWrapper(proc.stderr), os.path.join(cfg.out, f"{name}.log"))
    try:
        err.wait_for(r"live: newest frame wins", 120, proc)
        rec = common.Record()
        mask_bytes = cfg.width * cfg.height

        def read_masks():
            while True:
                head = common.read_exact(proc.stdout, 8)
                if not head:
                    return
                common.read_exact(proc.stdout, mask_bytes)
                rec.answer(int.from_bytes(head, "little"))

        reader = threading.Thread(target=read_masks, daemon=True)
        reader.start()
        fed = common.feed(cfg, name, rate, lambda i, f: common.write_all(proc.stdin, f), rec,
                          proc, lambda: common.Sampler(name, proc.pid, rec, rec.skipped))
        proc.stdin.close()
        rc = proc.wait(timeout=120)
        reader.join(30)
        err.join(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    line = next((ln for ln in reversed(err.tail) if ln.startswith("live:")), "")
    m = SUMMARY.search(line)
    if rc != 0 or not m:
        raise RuntimeError(f"{name}: segtool exited {rc}; last lines:\n" + "\n".join(err.tail))
    final = {"sent": int(m.group(1)), "answered": int(m.group(2)), "dropped": int(m.group(3)),
             "observed": len(rec.answers)}
    summary = common.evaluate(name, cfg, rec, fed, final, fps, rate,
                              {"own_summary": line, "process": "segtool infer",
                               "own_p50_p99_ms": [float(v) for v in P99.search(line).groups()]
                               if P99.search(line) else None})
    return summary, fed["rows"], rec
