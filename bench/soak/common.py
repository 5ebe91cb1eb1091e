"""What every live path shares: the configuration, the engine's rate, the paced feed of
bikes.mp4 frames (ffmpeg decodes, looped), the record of each frame's fate, the 10 s
sampler of the process under test (/proc), and the checks of the issue."""
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAMPLE_EVERY_S = 10.0


@dataclass
class Config:
    model: str
    width: int
    height: int
    threads: int
    duration_s: float
    overload: float
    out: str
    target: str  # the cargo profile folder: segtool, segtool-ros2, libgstsegtool.so
    clip: str
    python: str  # the interpreter for the Python path's worker
    wheel_dir: str  # the unpacked wheel (PYTHONPATH of the worker)
    rate_s: float = 8.0  # seconds of `segtool bench` for the engine's rate
    env: dict = field(default_factory=dict)

    @property
    def frame_bytes(self):
        return self.width * self.height * 3

    @property
    def warmup_s(self):
        """The RSS check's warm-up: 2 minutes, or a sixth of a shorter soak."""
        return min(120.0, self.duration_s / 6)

    @property
    def window_s(self):
        """The latency windows: the first and last 5 minutes, or sixths of a shorter soak."""
        return min(300.0, self.duration_s / 6)

    @property
    def segtool(self):
        return os.path.join(self.target, "segtool")


def log(msg):
    print(msg, flush=True)


def engine_rate(cfg, dynamic, env=None):
    """Frames/s of the model alone at the soak's size and threads (`segtool bench`: pre,
    engine and post per frame, one frame at a time, fixed or dynamic shapes as the path
    opens the model; `env` adds to the environment, e.g. the path's allocator settings)."""
    out = os.path.join(cfg.out, "bench.json")
    cmd = [cfg.segtool, "bench", "--model", cfg.model, "--size", f"{cfg.height}x{cfg.width}",
           "--engine", "ort", "--threads", str(cfg.threads), "--warmup", "3",
           "--duration", str(cfg.rate_s), "--json", out]
    if dynamic:
        cmd.append("--dynamic-shapes")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(cfg.env, **(env or {})))
    with open(out) as f:
        return float(json.load(f)["results"][0]["throughput_ips"])


class Frames:
    """bikes.mp4 decoded by ffmpeg at the soak's size, rgb24, looped without end; read
    frame by frame (the pipe holds ffmpeg back: it decodes only as fast as we take)."""

    def __init__(self, cfg):
        self.n = cfg.frame_bytes
        self.proc = subprocess.Popen(
            ["ffmpeg", "-nostdin", "-loglevel", "error", "-stream_loop", "-1", "-i", cfg.clip,
             "-vf", f"scale={cfg.width}:{cfg.height}", "-f", "rawvideo", "-pix_fmt", "rgb24", "-"],
            stdout=subprocess.PIPE, bufsize=0)

    def next(self):
        frame = read_exact(self.proc.stdout, self.n)
        if not frame:
            raise RuntimeError(f"ffmpeg stopped (exit {self.proc.poll()})")
        return frame

    def close(self):
        self.proc.kill()
        self.proc.wait()


class Record:
    """Each frame's fate as the driver sees it: send times (seconds since the feed
    began), answers (frame, latency ms) and drops seen so far."""

    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = None
        self.sent_t = []
        self.answers = []  # (frame, latency_ms)
        self.dropped = 0
        self.unknown = 0  # answers naming a frame that was never sent
        self.last_answered = -1

    def now(self):
        return time.perf_counter() - self.t0

    def sent(self):
        with self.lock:
            self.sent_t.append(self.now())

    def answer(self, frame, latency_ms=None):
        """`latency_ms` the path's own; else the send-to-receive time measured here. An
        answer for a frame never sent is counted as unknown (a failed count check), not
        raised: it would stop the reader thread and stall the path's output pipe."""
        t = self.now()
        with self.lock:
            if not 0 <= frame < len(self.sent_t):
                self.unknown += 1
                return
            if latency_ms is None:
                latency_ms = (t - self.sent_t[frame]) * 1e3
            self.answers.append((frame, latency_ms))
            self.last_answered = max(self.last_answered, frame)

    def drop(self, n=1):
        with self.lock:
            self.dropped += n

    def counts(self):
        with self.lock:
            return len(self.sent_t), len(self.answers), self.dropped

    def skipped(self):
        """Frames before the newest answered one that got no answer: dropped, for the
        paths whose answers come in frame order and say nothing of the others."""
        with self.lock:
            return self.last_answered + 1 - len(self.answers)


def write_all(stream, data):
    """The whole of `data` into an unbuffered binary pipe."""
    view = memoryview(data)
    while view:
        view = view[stream.write(view):]


def read_exact(stream, n):
    """`n` bytes from an unbuffered binary pipe; b"" at EOF before the first byte."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            if got == 0:
                return b""
            raise RuntimeError(f"stream ended inside a record ({got} of {n} bytes)")
        got += k
    return bytes(buf)


def read_proc(pid):
    """RSS (KiB), open fds, threads and CPU seconds of `pid`, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read().rsplit(")", 1)[1].split()
        cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    except (FileNotFoundError, ProcessLookupError):
        return None
    return {"rss_kib": int(status["VmRSS"].split()[0]), "fds": fds,
            "threads": int(status["Threads"]), "cpu_s": round(cpu, 2)}


class Sampler(threading.Thread):
    """Every 10 s from the feed's start: the process under test's /proc figures and the
    frame counts, kept as rows and printed as a progress line. `dropped` (optional) gives
    the path's own drop count so far, else the record's."""

    def __init__(self, name, pid, rec, dropped=None):
        super().__init__(daemon=True)
        self.name, self.pid, self.rec, self.dropped_fn = name, pid, rec, dropped
        self.rows = []
        self.halt = threading.Event()

    def sample(self):
        p = read_proc(self.pid)
        if p is None:
            return
        sent, answered, dropped = self.rec.counts()
        if self.dropped_fn is not None:
            dropped = self.dropped_fn()
        row = {"t_s": round(self.rec.now(), 2), **p, "sent": sent, "answered": answered,
               "dropped": dropped}
        self.rows.append(row)
        log(f"[{self.name}] {row['t_s']:7.0f} s  sent {sent:7d}  answered {answered:7d}  "
            f"dropped {dropped:7d}  RSS {p['rss_kib'] / 1024:7.1f} MiB  fds {p['fds']}  "
            f"threads {p['threads']}")

    def run(self):
        k = 0
        while True:
            self.sample()
            k += 1
            if self.halt.wait(max(0.0, self.rec.t0 + k * SAMPLE_EVERY_S - time.perf_counter())):
                return


def feed(cfg, name, rate, send, rec, proc, sampler_of):
    """Sends frames at `rate`/s by the wall clock for cfg.duration_s, sampling alongside.
    Frame i is due at i / rate: a late frame goes at once, and the ones after it follow
    without waiting until the schedule is met again (the rate stays the one asked for;
    `late` counts the frames sent more than a period late). `send(i, frame)` hands one
    frame to the path; `proc` is checked for an early exit."""
    frames = Frames(cfg)
    first = frames.next()
    rec.t0 = time.perf_counter()
    sampler = sampler_of()
    sampler.start()
    late, i, frame = 0, 0, first
    period = 1.0 / rate
    try:
        while True:
            due = i * period
            if due >= cfg.duration_s:
                break
            wait = due - rec.now()
            if wait > 0:
                time.sleep(wait)
            elif -wait > period:
                late += 1
            rec.sent()  # before the hand-over: a fast answer finds its send time
            send(i, frame)
            i += 1
            if i % 64 == 0 and proc.poll() is not None:
                raise RuntimeError(f"{name}: the process under test exited ({proc.returncode})")
            frame = frames.next()
    finally:
        elapsed = rec.now()
        sampler.halt.set()
        sampler.join()
        sampler.sample()  # the last figures, before the drain
        frames.close()
    return {"sent": i, "elapsed_s": elapsed, "late": late, "rate_fed": i / max(elapsed, 1e-9),
            "rows": sampler.rows}


class Lines(threading.Thread):
    """A child's text stream line by line: copied to a log file, each line handed to
    `on_line`, the last ones kept."""

    def __init__(self, stream, log_path, on_line=None):
        super().__init__(daemon=True)
        self.stream, self.log_path, self.on_line = stream, log_path, on_line
        self.tail = deque(maxlen=200)
        self.start()

    def run(self):
        with open(self.log_path, "w") as logf:
            for line in iter(self.stream.readline, ""):
                if not line:
                    break
                logf.write(line)
                self.tail.append(line.rstrip("\n"))
                if self.on_line is not None:
                    self.on_line(line.rstrip("\n"))

    def wait_for(self, pattern, timeout, proc):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(re.search(pattern, line) for line in list(self.tail)):
                return
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"no line matching {pattern!r} within {timeout} s; last lines:\n"
                           + "\n".join(list(self.tail)[-20:]))


def percentile(values, p):
    """Nearest-rank percentile, as the runtime's own reports."""
    if not values:
        return float("nan")
    s = sorted(values)
    rank = -(-p * len(s) // 100)
    return s[min(max(int(rank), 1), len(s)) - 1]


def flat(rows, key):
    values = [r[key] for r in rows]
    return {"start": values[0], "end": values[-1], "min": min(values), "max": max(values)}


def rss_floors(cfg, warm):
    """RSS at the end of the warm-up and at the end, each the lowest sample of a window
    (the latency window's length, at least 3 samples) at either end of the samples after
    the warm-up: what stays allocated, not the transient peaks of frames in flight that
    an allocator hands back and takes again (the GStreamer path swings by tens of MiB
    from one sample to the next). A leak raises the floor with everything else."""
    k = max(3, round(cfg.window_s / SAMPLE_EVERY_S))
    base = min(warm[:k], key=lambda r: r["rss_kib"])
    end = min(warm[-k:], key=lambda r: r["rss_kib"])
    return base, end, min(k, len(warm))


def evaluate(name, cfg, rec, fed, final, engine_fps, rate, extra=None):
    """The summary and the checks. `final`: the path's own counts once drained (sent,
    answered, dropped; failed, lost and observed where known)."""
    rows = fed["rows"]
    warm = [r for r in rows if r["t_s"] >= cfg.warmup_s - 1e-6] or rows[-1:]
    base, end, k = rss_floors(cfg, warm)
    growth = 100.0 * (end["rss_kib"] - base["rss_kib"]) / base["rss_kib"]
    fds, threads = flat(warm, "fds"), flat(warm, "threads")
    w, s = cfg.window_s, fed["elapsed_s"]
    with rec.lock:
        first = [lat for f, lat in rec.answers if rec.sent_t[f] < w]
        last = [lat for f, lat in rec.answers if rec.sent_t[f] >= s - w]
        all_lat = [lat for _, lat in rec.answers]
    p99_first, p99_last = percentile(first, 99), percentile(last, 99)
    drift = 100.0 * (p99_last - p99_first) / p99_first if first and last else float("nan")
    sent, answered, dropped = final["sent"], final["answered"], final["dropped"]
    failed, lost = final.get("failed", 0), final.get("lost", 0)
    observed, seen_dropped = final.get("observed"), final.get("seen_dropped")
    # `lost`: frames the path counted as never reaching it (the ROS 2 node's sequence gaps);
    # what it did see (`sent`) plus those must be exactly what was fed.
    counts_ok = (answered + dropped == sent and sent + lost == fed["sent"] and failed == 0
                 and rec.unknown == 0 and observed in (None, answered)
                 and seen_dropped in (None, dropped))
    checks = [
        ("feed", fed["rate_fed"] >= 0.97 * rate,
         f"fed {fed['rate_fed']:.1f} frames/s of {rate:.1f} asked ({rate / engine_fps:.1f}x the "
         f"engine's {engine_fps:.1f}); {fed['late']} frame(s) sent more than a period late"),
        ("rss", growth < 2.0,
         f"RSS floor (lowest of {k} samples) {base['rss_kib'] / 1024:.1f} MiB at {base['t_s']:.0f} s "
         f"-> {end['rss_kib'] / 1024:.1f} MiB at {end['t_s']:.0f} s: {growth:+.2f}% (limit +2%; "
         f"after the warm-up {min(r['rss_kib'] for r in warm) / 1024:.1f}-"
         f"{max(r['rss_kib'] for r in warm) / 1024:.1f} MiB)"),
        ("fds", fds["min"] == fds["max"],
         f"open fds after {cfg.warmup_s:.0f} s: {fds['start']} -> {fds['end']} (range {fds['min']}-{fds['max']})"),
        ("threads", threads["min"] == threads["max"],
         f"threads after {cfg.warmup_s:.0f} s: {threads['start']} -> {threads['end']} "
         f"(range {threads['min']}-{threads['max']})"),
        ("counts", counts_ok,
         f"sent {fed['sent']} (path saw {sent}"
         + ("" if "lost" not in final else f", counted {lost} lost before it")
         + f"), answered {answered} + dropped {dropped} = {answered + dropped}; failed {failed}"
         + ("" if observed is None else f"; answers received {observed}")
         + ("" if seen_dropped is None else f"; drops reported {seen_dropped}")
         + (f"; {rec.unknown} answer(s) for frames never sent" if rec.unknown else "")),
        ("latency", abs(drift) <= 10.0,
         f"p99 first {w:.0f} s {p99_first:.1f} ms ({len(first)} frames), last {w:.0f} s "
         f"{p99_last:.1f} ms ({len(last)} frames): {drift:+.1f}% (limit 10%)"),
    ]
    summary = {
        "path": name, "duration_s": round(s, 1), "engine_fps": round(engine_fps, 2),
        "rate_asked": round(rate, 2), "rate_fed": round(fed["rate_fed"], 2), "late": fed["late"],
        "sent": fed["sent"], "path_counts": final, "answered": answered, "dropped": dropped,
        "answered_fps": round(answered / max(s, 1e-9), 2),
        "rss_start_kib": rows[0]["rss_kib"], "rss_base_kib": base["rss_kib"],
        "rss_end_kib": end["rss_kib"], "rss_growth_pct": round(growth, 3),
        "fds": fds, "threads": threads, "warmup_s": cfg.warmup_s, "window_s": w,
        "latency_ms": {"p50": percentile(all_lat, 50), "p99": percentile(all_lat, 99),
                       "p99_first": p99_first, "p99_last": p99_last,
                       "p99_drift_pct": round(drift, 2)},
        "checks": [{"name": n, "ok": bool(ok), "detail": d} for n, ok, d in checks],
        "passed": all(ok for _, ok, _ in checks),
        **(extra or {}),
    }
    for n, ok, d in checks:
        log(f"[{name}] {'PASS' if ok else 'FAIL'} {n}: {d}")
    return summary


def write(cfg, summary, rows, rec):
    """<path>.csv (the samples), <path>_latency.csv (each answer), <path>.json (the summary)."""
    name = summary["path"]
    cols = ["t_s", "rss_kib", "fds", "threads", "cpu_s", "sent", "answered", "dropped"]
    with open(os.path.join(cfg.out, f"{name}.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for r in rows:
            f.write(",".join(str(r[c]) for c in cols) + "\n")
    with open(os.path.join(cfg.out, f"{name}_latency.csv"), "w") as f, rec.lock:
        f.write("frame,sent_s,latency_ms\n")
        for frame, lat in rec.answers:
            f.write(f"{frame},{rec.sent_t[frame]:.4f},{lat:.3f}\n")
    with open(os.path.join(cfg.out, f"{name}.json"), "w") as f:
        json.dump(summary, f, indent=2)
    sys.stdout.flush()
