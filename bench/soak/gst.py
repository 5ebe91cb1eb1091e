"""The GStreamer element: ffmpeg's frames, paced by the driver, into

    gst-launch-1.0 -m -v fdsrc fd=0 ! rawvideoparse (RGB, WxH, the feed's rate)
        ! segtoolseg live=true output=mask ! fakesink silent=false

rawvideoparse stamps frame i with PTS i / rate, which the element copies onto its result;
`-v` prints the fakesink's last-message (with that PTS) for each buffer, so the driver
knows which frame each result is and when it arrived (latency: frame written to its
result printed). `-m` prints the element's `segtool-drops` (at most once a second: the
progress lines' drops) and `segtool/stats` at EOS (the final counts). Process under test:
gst-launch-1.0."""
import io
import os
import re
import shutil
import subprocess
from fractions import Fraction

from . import common

PTS = re.compile(r"pts: (\d+):(\d\d):(\d\d)\.(\d{9})")
FIELD = re.compile(r"([a-z0-9-]+)=\(\w+\)([^,;]+)")


def fields(line, name):
    return {k: v for k, v in FIELD.findall(line.split(name, 1)[1])}


def run(cfg):
    name = "gst"
    fps = common.engine_rate(cfg, dynamic=True)
    rate = Fraction(cfg.overload * fps).limit_denominator(1000)
    common.log(f"[{name}] engine alone: {fps:.1f} frames/s; feeding {float(rate):.1f} frames/s")
    plugin = os.path.join(cfg.out, "gst-plugin")
    os.makedirs(plugin, exist_ok=True)
    shutil.copy(os.path.join(cfg.target, "libgstsegtool.so"), os.path.join(plugin, ".tmp.so"))
    os.replace(os.path.join(plugin, ".tmp.so"), os.path.join(plugin, "libgstsegtool.so"))
    env = dict(cfg.env, GST_PLUGIN_PATH=plugin,
               GST_REGISTRY=os.path.join(cfg.out, "gst-registry.bin"))
    pipeline = (
        f"fdsrc fd=0 blocksize={cfg.frame_bytes} "
        f"! rawvideoparse use-sink-caps=false format=rgb width={cfg.width} height={cfg.height} "
        f"framerate={rate.numerator}/{rate.denominator} "
        f"! segtoolseg model={cfg.model} engine=ort threads={cfg.threads} output=mask live=true "
        f"! fakesink sync=false silent=false")
    proc = subprocess.Popen(["gst-launch-1.0", "-m", "-v", *pipeline.split()],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, bufsize=0, env=env)
    rec = common.Record()
    state = {"dropped": 0, "stats": None, "engine": None, "buffers": 0}

    def on_line(line):
        if line.startswith("/GstPipeline") and "last-message = chain" in line:
            m = PTS.search(line)
            if m and rec.t0 is not None:
                h, mi, s, ns = (int(g) for g in m.groups())
                pts = Fraction((h * 3600 + mi * 60 + s) * 10**9 + ns, 10**9)
                state["buffers"] += 1
                rec.answer(round(pts * rate))
        elif "segtool-drops" in line:
            state["dropped"] = int(fields(line, "segtool-drops")["dropped"])
        elif "segtool/stats" in line:
            state["stats"] = fields(line, "segtool/stats")
        elif "segtool-engine" in line and state["engine"] is None:
            state["engine"] = line.split("segtool-engine", 1)[1].strip(" ,;")

    out = common.Lines(io.TextIOWrapper(proc.stdout), os.path.join(cfg.out, f"{name}.log"), on_line)
    try:
        out.wait_for(r"Pipeline is PREROLLING", 120, proc)  # PLAYING comes after a frame
        fed = common.feed(cfg, name, float(rate), lambda i, f: common.write_all(proc.stdin, f),
                          rec, proc, lambda: common.Sampler(name, proc.pid, rec,
                                                            lambda: state["dropped"]))
        proc.stdin.close()
        rc = proc.wait(timeout=120)
        out.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    stats = state["stats"]
    if rc != 0 or stats is None:
        raise RuntimeError(f"{name}: gst-launch exited {rc}; last lines:\n" + "\n".join(out.tail))
    final = {"sent": int(stats["frames-in"]), "answered": int(stats["answered"]),
             "dropped": int(stats["dropped"]),
             "failed": int(stats["failed"]) + int(stats["flushed"]), "observed": state["buffers"]}
    summary = common.evaluate(
        name, cfg, rec, fed, final, fps, float(rate),
        {"own_stats": stats, "engine": state["engine"], "process": "gst-launch-1.0"})
    return summary, fed["rows"], rec
