#!/usr/bin/env python3
"""Benchmark (not a test): segtool's INT8 calibrator (all-INT8 in both layouts, and the
accuracy-driven --auto) against onnxruntime's quantize_static and NNCF (quantize and
quantize_with_accuracy_control) on the same DANet exports and the same video frames.

    source "$(bash scripts/setup.sh)"                 # $SEGTOOL_PYTHON: torch, cv2 (models, frames)
    cargo build --release --bin segtool               # or a debug build (--segtool PATH)
    python3 bench/int8_vs_quantizers.py --setup       # once: /root/.cache/segtool/venv-int8-bench
    /root/.cache/segtool/venv-int8-bench/bin/python bench/int8_vs_quantizers.py \
        [--threads 2] [--models r18 r50] [--rounds 5 --runs 10] [--quick] [--work target/bench-int8]
        [--reuse]   # contenders already quantised in --work: measured again, not redone

Models (built once by a $SEGTOOL_PYTHON subprocess, cached in --work): the PyTorch
reference DANet (tests/reference/danet_ref.py, bench/bench_models.py::random_danet),
output stride 8, 19 classes, ResNet-18 at 272x640 and ResNet-50 at 512x512, with its BN
statistics recalibrated on random normal inputs (train mode, cumulative average, 8
passes) so that activations and logits are well scaled (the logits' std is printed);
torch.save -> `segtool import` -> `segtool export --target ort --input-size HxW`.
Frames: the clip (--clip, decoded with cv2), resized to the input (R50: centre square
crop first), three disjoint evenly spaced sets: 60 calibration, 40 validation (what the
accuracy-driven searches see), 40 held out (what the table's agreement is measured on).
--quick: 8/6/6 frames, R18 only at 136x320, 3 rounds x 3 runs.

Contenders, each fed the same calibration PNGs (preprocessed as segtool's runtime does:
tests/reference/model_input.normalise with the spec's mean/std):
  * segtool calibrate --per-channel --method minmax, --layout portable and ort-cpu;
  * segtool calibrate --auto --min-agreement 0.99 / 0.995 (ort-cpu, every quantised layer a candidate);
    evaluations = the all-INT8 one + the search's trials (its .auto.json);
  * onnxruntime quantize_static: QDQ, per channel, MinMax, defaults otherwise (int8
    activations and weights); and its best CPU setting (uint8 asymmetric activations,
    symmetric int8 weights, only Conv/Add/Relu/MaxPool quantised);
  * nncf.quantize (ONNX backend, defaults) and nncf.quantize_with_accuracy_control
    (max_drop 0.01 absolute on argmax agreement with fp32 over the validation frames;
    evaluations = calls of our validation function, the fp32 one and NNCF's per-item
    ranking calls included; passes = frames evaluated / validation frames).
Measured: the quantiser's wall time (the whole search for --auto and accuracy control;
this process and its children are confined to --threads CPUs, as ORT's calibrator, NNCF
and OpenVINO pick their own thread counts); argmax agreement with fp32 over all pixels of
the held-out frames (ORT CPU); ORT CPU latency of one held-out frame, --threads intra-op
threads, all sessions loaded, then --rounds rounds of --runs runs of each model in turn,
median; for fp32 and NNCF's models also OpenVINO CPU (f32 precision hint, same threads).
Printed: a markdown table per model; everything (commands, NNCF's call counts, --auto's
choice, errors) goes to --work/int8_vs_quantizers_<models>[_quick].json.
"""
import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import traceback

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_VENV = "/root/.cache/segtool/venv-int8-bench"
REQUIREMENTS = os.path.join(ROOT, "requirements-int8-bench.txt")
CLIP = "/root/.cache/segtool/clips/bikes.mp4"

# name -> backbone, (H, W), frame fit
MODELS = {
    "r18": ("resnet18", (272, 640), "resize"),
    "r50": ("resnet50", (512, 512), "centre-crop"),
}
QUICK = {"r18": ("resnet18", (136, 320), "resize")}


# ---------------------------------------------------------------- set-up and helpers

def setup():
    """Create the benchmark venv (no system site packages) and install the pins."""
    py = os.path.join(BENCH_VENV, "bin", "python")
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", BENCH_VENV], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    subprocess.run([py, "-m", "pip", "install", "-r", REQUIREMENTS], check=True)
    print(f"ready: {py} {os.path.relpath(__file__, os.getcwd())}")


def ensure_bench_python():
    """Re-run under the benchmark venv when this interpreter lacks NNCF."""
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
        return
    except ImportError:
        pass
    py = os.path.join(BENCH_VENV, "bin", "python")
    if os.path.exists(py) and os.path.realpath(sys.prefix) != os.path.realpath(BENCH_VENV):
        os.execv(py, [py, os.path.abspath(__file__), *sys.argv[1:]])
    sys.exit(f"needs nncf and openvino: run `python3 {sys.argv[0]} --setup`, then this "
             f"script with {py}")


def cpu_info():
    name, flags = "unknown CPU", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    return {"model_name": name, "avx512_vnni": "avx512_vnni" in flags,
            "avx_vnni": "avx_vnni" in flags, "avx512_bf16": "avx512_bf16" in flags,
            "logical_cpus": os.cpu_count()}


@contextlib.contextmanager
def output_to(path):
    """Send this process's stdout/stderr (fd level: C++ logs, progress bars) to a file."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


def find_segtool(explicit):
    if explicit:
        return explicit
    for profile in ("release", "debug"):
        p = os.path.join(ROOT, "target", profile, "segtool")
        if os.path.exists(p):
            return p
    sys.exit("segtool binary not found: cargo build --bin segtool, or pass --segtool")


def pngs(folder):
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".png"))


# ------------------------------------------------- child: model and frames (torch, cv2)

def child_build(job):
    """Runs under $SEGTOOL_PYTHON (torch, cv2). Prints one JSON line."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    out = {"onnx": job["onnx"]}
    h, w = job["size"]
    if not os.path.exists(job["onnx"]):
        import torch
        from bench_models import random_danet
        from infer_vs_python_ort import BACKBONES
        torch.set_num_threads(job["threads"])
        backbone = job["backbone"]
        spec = {"arch": "danet", "backbone_name": backbone,
                "backbone": {**BACKBONES[backbone], "output_stride": 8, "deep_stem": False},
                "classes": [f"class{i}" for i in range(job["classes"])]}
        model = random_danet(spec)
        # Well-conditioned: BN statistics of random normal inputs (cumulative average).
        bns = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
        for m in bns:
            m.momentum = None
            m.reset_running_stats()
        model.train()
        g = torch.Generator().manual_seed(1)
        t = time.perf_counter()
        with torch.no_grad():
            for _ in range(job["bn_passes"]):
                model(torch.randn(2, 3, h, w, generator=g))
            model.eval()
            logits = model(torch.randn(1, 3, h, w, generator=g))[0]
        info = {"torch_logits_std_random_input": float(logits.std()),
                "bn_recalibration_s": time.perf_counter() - t, "bn_passes": job["bn_passes"]}
        stem = os.path.splitext(job["onnx"])[0]
        torch.save(model.state_dict(), stem + ".pth")
        subprocess.run([job["segtool"], "import", "--from", stem + ".pth", "--backbone",
                        backbone, "--classes", str(job["classes"]), "--mode", "full",
                        "--out", stem + ".safetensors"], check=True, stdout=subprocess.DEVNULL)
        subprocess.run([job["segtool"], "export", "--checkpoint", stem + ".safetensors",
                        "--onnx", job["onnx"] + ".tmp.onnx", "--target", "ort",
                        "--input-size", f"{h}x{w}"], check=True, stdout=subprocess.DEVNULL)
        with open(stem + ".build.json", "w") as f:
            json.dump(info, f)
        os.replace(job["onnx"] + ".tmp.onnx", job["onnx"])
    info_path = os.path.splitext(job["onnx"])[0] + ".build.json"
    if os.path.exists(info_path):
        out.update(json.load(open(info_path)))
    frames = job["frames"]
    done = os.path.join(frames, "done")
    if not os.path.exists(done):
        import cv2
        import numpy as np
        cap = cv2.VideoCapture(job["clip"])
        video = []
        while True:
            ok, f = cap.read()
            if not ok:
                break
            video.append(f)
        if not video:
            raise SystemExit(f"cv2 decoded no frame of {job['clip']}")
        counts = job["counts"]
        total = sum(counts)
        if total > len(video):
            raise SystemExit(f"{job['clip']}: {len(video)} frames, {total} wanted")
        idx = np.linspace(0, len(video) - 1, total).round().astype(int)
        # Interleave the sets along the clip: each position goes to the set furthest
        # behind its share, so every set is spread evenly over the whole clip.
        taken = [0] * len(counts)
        names = ["calib", "val", "held"]
        for n in names:
            shutil.rmtree(os.path.join(frames, n), ignore_errors=True)
            os.makedirs(os.path.join(frames, n))
        for k, i in enumerate(idx):
            s = max(range(len(counts)), key=lambda j: counts[j] * (k + 1) / total - taken[j])
            taken[s] += 1
            img = video[i]
            if job["fit"] == "centre-crop":
                fh, fw = img.shape[:2]
                side = min(fh, fw)
                y0, x0 = (fh - side) // 2, (fw - side) // 2
                img = img[y0:y0 + side, x0:x0 + side]
            shrink = img.shape[0] > h or img.shape[1] > w
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink
                             else cv2.INTER_LINEAR)
            cv2.imwrite(os.path.join(frames, names[s], f"frame{i:04d}.png"), img)
        open(done, "w").write(json.dumps({"clip": job["clip"], "frames": len(video),
                                          "counts": counts}))
    out["frames"] = json.load(open(done))
    print(json.dumps(out))


# ------------------------------------------------------------------ measurement helpers

def spec_of(path):
    import onnx
    m = onnx.load(path, load_external_data=False)
    return json.loads({p.key: p.value for p in m.metadata_props}["segtool.spec"])


def ort_session(model, threads):
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def ov_compiled(path, threads):
    import openvino as ov
    core = ov.Core()
    return core.compile_model(path, "CPU", {"INFERENCE_NUM_THREADS": threads,
                                            "PERFORMANCE_HINT": "LATENCY",
                                            "INFERENCE_PRECISION_HINT": "f32"})


def argmaxes(path, xs, threads):
    import numpy as np
    sess = ort_session(path, threads)
    name = sess.get_inputs()[0].name
    preds, stds = [], []
    for x in xs:
        logits = sess.run(None, {name: x})[0]
        preds.append(logits[0].argmax(axis=0).astype(np.uint8))
        stds.append(float(logits.std()))
    return preds, stds


def agreement(preds, refs):
    import numpy as np
    per = [float(np.mean(p == r)) for p, r in zip(preds, refs)]
    pooled = float(sum(np.sum(p == r) for p, r in zip(preds, refs)) /
                   sum(r.size for r in refs))
    return pooled, min(per)


def latencies(ort_models, ov_models, x, threads, rounds, runs):
    """Median ms per model: all loaded, then rounds x (each model runs times) in turn."""
    import numpy as np
    runners = {}
    for name, path in ort_models.items():
        sess = ort_session(path, threads)
        feed = {sess.get_inputs()[0].name: x}
        runners[("ort", name)] = (lambda s=sess, f=feed: s.run(None, f))
    for name, path in ov_models.items():
        req = ov_compiled(path, threads).create_infer_request()
        runners[("ov", name)] = (lambda r=req: r.infer({0: x}))
    for run in runners.values():
        for _ in range(2):
            run()
    times = {k: [] for k in runners}
    for _ in range(rounds):
        for k, run in runners.items():
            for _ in range(runs):
                t = time.perf_counter()
                run()
                times[k].append((time.perf_counter() - t) * 1e3)
    return {k: float(np.median(v)) for k, v in times.items()}


# -------------------------------------------------------------------------- contenders

class Ctx:
    def __init__(self, **kw):
        self.__dict__.update(kw)


def segtool_calibrate(c, name, layout, auto=None):
    out = os.path.join(c.qdir, f"{name}.onnx")
    cmd = [c.segtool, "calibrate", "--model", c.fp32, "--images", c.calib_dir,
           "--per-channel", "--method", "minmax", "--samples", str(c.n_calib), "-o", out,
           "--quiet", "--latency-runs", "0", "--threads", str(c.threads)]
    row = {}
    if c.has_layout:
        cmd += ["--layout", layout]
    elif layout != "portable":
        if auto is None:
            raise RuntimeError("this segtool has no --layout (older build): rebuild it")
        row["note"] = "portable: segtool has no --layout"
    if auto is not None:
        cmd += ["--auto", "--min-agreement", str(auto), "--val-images", c.val_dir,
                "--candidates", "1000"]
    log = os.path.join(c.qdir, f"{name}.log")
    t = time.perf_counter()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    row["quant_s"] = time.perf_counter() - t
    row["command"] = " ".join(cmd)
    if p.returncode != 0:
        tail = open(log).read().strip().splitlines()[-6:]
        raise RuntimeError(f"exit {p.returncode}: " + " | ".join(tail))
    if auto is not None:
        row.update(auto_row(c.qdir, name))
    row["path"] = out
    return row


def auto_row(qdir, name):
    """The row's figures from `calibrate --auto`'s report (qdir/<name>.auto.json)."""
    report = json.load(open(os.path.join(qdir, f"{name}.auto.json")))
    auto = {k: report.get(k) for k in ("chosen", "final_check", "verdict",
                                       "validation_images", "quantised_layers")}
    auto["trials"] = len(report["trials"])
    # The model written: the chosen mix, else the last step's (or all-INT8).
    kept = next((r for r in report["rows"] if r.get("chosen")), report["rows"][-1])
    auto["float_layers"] = kept["float_layers"]
    return {"evals": 1 + len(report["trials"]), "auto": auto,
            "val_agreement": kept["agreement"]}


class CalibReader:
    def __init__(self, files, spec, input_name):
        from model_input import normalise
        self.it = iter(files)
        self.spec, self.name, self.normalise = spec, input_name, normalise

    def get_next(self):
        f = next(self.it, None)
        return None if f is None else {self.name: self.normalise(f, self.spec)}


def ort_quant(c, name, best):
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    out = os.path.join(c.qdir, f"{name}.onnx")
    kw, extra = {}, {}
    # (Not CalibMaxIntermediateOutputs: in ORT 1.31.1 its collect_data drops the ranges
    # it has collected, "No data is collected". MinMax's augmented graph outputs only
    # ReduceMin/ReduceMax per tensor, so memory stays small without it.)
    if best:
        kw = {"activation_type": QuantType.QUInt8, "weight_type": QuantType.QInt8,
              "op_types_to_quantize": ["Conv", "Add", "Relu", "MaxPool"]}
        extra.update({"ActivationSymmetric": False, "WeightSymmetric": True})
    t = time.perf_counter()
    with output_to(os.path.join(c.qdir, f"{name}.log")):
        quantize_static(c.fp32, out, CalibReader(c.calib, c.spec, c.input_name),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        calibrate_method=CalibrationMethod.MinMax, extra_options=extra, **kw)
    return {"quant_s": time.perf_counter() - t, "path": out,
            "settings": {**{k: str(v) for k, v in kw.items()}, **extra}}


class Validator:
    """NNCF validation_fn: argmax agreement with fp32 per validation frame; counts calls."""

    def __init__(self, xs, refs, input_name, threads):
        self.xs, self.refs, self.name, self.threads = xs, refs, input_name, threads
        self.calls, self.items, self.full = 0, 0, 0
        self.lock = threading.Lock()
        self.cache = []  # (model, session): NNCF evaluates one model on many subsets

    def session(self, model):
        with self.lock:
            for m, s in self.cache:
                if m is model:
                    return s
        s = ort_session(model.SerializeToString(), self.threads)
        with self.lock:
            self.cache = ([(model, s)] + self.cache)[:3]
        return s

    def __call__(self, model, data):
        import numpy as np
        items = list(data)
        with self.lock:
            self.calls += 1
            self.items += len(items)
            self.full += len(items) == len(self.xs)
        sess = self.session(model)
        per = []
        for i in items:
            logits = sess.run(None, {self.name: self.xs[i]})[0]
            per.append(float(np.mean(logits[0].argmax(axis=0) == self.refs[i])))
        return float(np.mean(per)), per


def nncf_quant(c, name, accuracy_control):
    import nncf
    import onnx
    from model_input import normalise
    out = os.path.join(c.qdir, f"{name}.onnx")
    model = onnx.load(c.fp32)
    calib = nncf.Dataset(c.calib, lambda f: {c.input_name: normalise(f, c.spec)})
    row = {}
    t = time.perf_counter()
    with output_to(os.path.join(c.qdir, f"{name}.log")):
        if accuracy_control:
            v = Validator(c.val_x, c.val_ref, c.input_name, c.threads)
            val = nncf.Dataset(list(range(len(c.val_x))),
                               lambda i: {c.input_name: c.val_x[i]})
            q = nncf.quantize_with_accuracy_control(
                model, calib, val, v, max_drop=0.01, drop_type=nncf.DropType.ABSOLUTE,
                subset_size=len(c.calib))
        else:
            q = nncf.quantize(model, calib, subset_size=len(c.calib))
    row["quant_s"] = time.perf_counter() - t
    onnx.save(q, out)
    if accuracy_control:
        row["evals"] = v.calls
        row["nncf_calls"] = {"calls": v.calls, "full_set_calls": v.full,
                             "frames_evaluated": v.items,
                             "passes": v.items / len(c.val_x)}
    row["path"] = out
    return row


CONTENDERS = [
    ("segtool int8 portable", "segtool-portable", lambda c: segtool_calibrate(c, "segtool-portable", "portable")),
    ("segtool int8 ort-cpu", "segtool-ortcpu", lambda c: segtool_calibrate(c, "segtool-ortcpu", "ort-cpu")),
    ("segtool --auto 0.99", "segtool-auto99", lambda c: segtool_calibrate(c, "segtool-auto99", "ort-cpu", 0.99)),
    ("segtool --auto 0.995", "segtool-auto995", lambda c: segtool_calibrate(c, "segtool-auto995", "ort-cpu", 0.995)),
    ("ORT quantize_static", "ort-default", lambda c: ort_quant(c, "ort-default", False)),
    ("ORT quantize_static best", "ort-best", lambda c: ort_quant(c, "ort-best", True)),
    ("NNCF quantize", "nncf", lambda c: nncf_quant(c, "nncf", False)),
    ("NNCF accuracy control 0.99", "nncf-ac", lambda c: nncf_quant(c, "nncf-ac", True)),
]


# ------------------------------------------------------------------------------- driver

def bench_model(key, cfg, a, env, segtool, has_layout):
    from model_input import normalise
    backbone, (h, w), fit = cfg
    counts = [a.calib, a.val, a.held]
    work = os.path.abspath(a.work)
    job = {"onnx": os.path.join(work, f"danet_{backbone}_{h}x{w}.onnx"), "size": [h, w],
           "backbone": backbone, "classes": 19, "segtool": segtool, "threads": a.threads,
           "bn_passes": 8, "clip": a.clip, "fit": fit,
           "frames": os.path.join(work, f"frames_{h}x{w}_{'-'.join(map(str, counts))}"),
           "counts": counts}
    t = time.perf_counter()
    p = subprocess.run([a.torch_python, os.path.abspath(__file__), "--child-build",
                        json.dumps(job)], stdout=subprocess.PIPE, text=True)
    if p.returncode != 0:
        raise SystemExit(f"model/frames build under {a.torch_python} failed")
    built = json.loads(p.stdout.strip().splitlines()[-1])
    print(f"\n## {key}: DANet-{backbone}, {h}x{w}, OS8, 19 classes "
          f"({time.perf_counter() - t:.0f} s to build or load)", flush=True)
    fp32 = job["onnx"]
    spec = spec_of(fp32)
    calib = pngs(os.path.join(job["frames"], "calib"))
    val_x = [normalise(f, spec) for f in pngs(os.path.join(job["frames"], "val"))]
    held_x = [normalise(f, spec) for f in pngs(os.path.join(job["frames"], "held"))]
    qdir = os.path.join(work, f"{key}_{h}x{w}_quant")
    os.makedirs(qdir, exist_ok=True)
    import onnx
    input_name = onnx.load(fp32, load_external_data=False).graph.input[0].name
    val_ref, _ = argmaxes(fp32, val_x, a.threads)
    held_ref, stds = argmaxes(fp32, held_x, a.threads)
    import numpy as np
    logit_std = float(np.mean(stds))
    print(f"fp32 logits std on the held-out frames: {logit_std:.2f} (torch, random input: "
          f"{built.get('torch_logits_std_random_input', float('nan')):.2f})"
          + ("" if 0.3 <= logit_std <= 30 else "  WARNING: not O(1-10)"), flush=True)
    c = Ctx(segtool=segtool, fp32=fp32, spec=spec, calib=calib, n_calib=len(calib),
            calib_dir=os.path.join(job["frames"], "calib"),
            val_dir=os.path.join(job["frames"], "val"), val_x=val_x, val_ref=val_ref,
            input_name=input_name, qdir=qdir, threads=a.threads, has_layout=has_layout)
    rows = [{"name": "fp32", "key": "fp32", "path": fp32, "quant_s": None}]
    for label, k, fn in CONTENDERS:
        if (a.only and k not in a.only) or k in (a.skip or []):
            continue
        row = {"name": label, "key": k}
        record = os.path.join(qdir, f"{k}.row.json")
        if a.reuse and os.path.exists(record):
            row.update(json.load(open(record)))
            row["reused"] = record
            print(f"  {label}: {row['quant_s']:.1f} s (reused: {record})", flush=True)
            rows.append(row)
            continue
        try:
            row.update(fn(c))
            print(f"  {label}: {row['quant_s']:.1f} s", flush=True)
            with open(record + ".tmp", "w") as f:  # what --reuse reads back
                json.dump(row, f, indent=2, default=str)
            os.replace(record + ".tmp", record)
        except Exception as e:  # a contender that fails is a row with its error
            row["error"] = f"{type(e).__name__}: {e}".strip()[:600]
            row["traceback"] = traceback.format_exc()
            print(f"  {label}: FAILED {row['error']}", flush=True)
        rows.append(row)
    ok = [r for r in rows if "error" not in r]
    for r in ok:
        try:
            preds, _ = argmaxes(r["path"], held_x, a.threads)
            r["agreement"], r["agreement_min_frame"] = agreement(preds, held_ref)
            r["bytes"] = os.path.getsize(r["path"])
        except Exception as e:
            r["error"] = f"ORT could not run it: {type(e).__name__}: {e}"[:600]
    ok = [r for r in rows if "error" not in r]
    ort_models = {r["key"]: r["path"] for r in ok}
    ov_models = {}
    for r in ok:
        if r["key"] in ("fp32", "nncf", "nncf-ac"):
            try:  # compile here so one that OpenVINO refuses does not stop the timing
                ov_compiled(r["path"], a.threads)
                ov_models[r["key"]] = r["path"]
            except Exception as e:
                r["ov_error"] = f"{type(e).__name__}: {e}"[:300]
    lat = latencies(ort_models, ov_models, held_x[0], a.threads, a.rounds, a.runs)
    for r in rows:
        if ("ort", r["key"]) in lat:
            r["ort_ms"] = lat[("ort", r["key"])]
            r["ort_speedup"] = lat[("ort", "fp32")] / r["ort_ms"]
        if ("ov", r["key"]) in lat and ("ov", "fp32") in lat:
            r["ov_ms"] = lat[("ov", r["key"])]
            r["ov_speedup"] = lat[("ov", "fp32")] / r["ov_ms"]
    result = {"model": key, "backbone": backbone, "size": [h, w], "onnx": fp32,
              "frames": {"calibration": len(calib), "validation": len(val_x),
                         "held_out": len(held_x), **built["frames"]},
              "fp32_logits_std_held_out": logit_std, "build": built, "rows": rows}
    print_table(result, a)
    return result


def fmt(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def print_table(res, a):
    h, w = res["size"]
    print(f"\n### DANet-{res['backbone']} {h}x{w}: {res['frames']['calibration']} calibration, "
          f"{res['frames']['validation']} validation, {res['frames']['held_out']} held-out "
          f"frames; {a.threads} thread(s); latency median of {a.rounds}x{a.runs} interleaved\n")
    print("| contender | quantise s | val evals | ORT ms | ORT speed-up | OV ms | OV speed-up "
          "| agreement (held-out) | min frame |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        if "error" in r:
            print(f"| {r['name']} | failed: {r['error'][:150]} | | | | | | | |")
            continue
        ev = r.get("evals")
        if "nncf_calls" in r:
            n = r["nncf_calls"]
            ev = f"{n['calls']} ({n['passes']:.1f} passes)"
        notes = [r["note"]] if r.get("note") else []
        if r.get("auto") and not r["auto"].get("chosen"):
            notes.append("target not met: the last mix")
        note = f" ({'; '.join(notes)})" if notes else ""
        print(f"| {r['name']}{note} | {fmt(r.get('quant_s'), '.1f')} | {fmt(ev, '')} "
              f"| {fmt(r.get('ort_ms'), '.1f')} | {fmt(r.get('ort_speedup'), '.2f')}x "
              f"| {fmt(r.get('ov_ms'), '.1f')} | "
              f"{fmt(r.get('ov_speedup'), '.2f') + 'x' if r.get('ov_speedup') else '-'} "
              f"| {r['agreement'] * 100:.2f}% | {r['agreement_min_frame'] * 100:.2f}% |")
    for r in res["rows"]:
        if r.get("auto"):
            fc = r["auto"].get("final_check")
            fc = (f"final check {fc['agreement']:.4f} on {fc['images']} frames" if fc
                  else "no final check")
            fl = r["auto"].get("float_layers") or []
            print(f"- {r['name']}: chosen {r['auto'].get('chosen')}, "
                  f"{r['auto']['trials']} trials + the all-INT8 evaluation, {fc}; "
                  f"{len(fl)} float layer(s): {', '.join(fl[:6])}{' ...' if len(fl) > 6 else ''}")
        if r.get("ov_error"):
            print(f"- {r['name']}: OpenVINO failed: {r['ov_error']}")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", action="store_true", help=f"create {BENCH_VENV} and exit")
    ap.add_argument("--quick", action="store_true", help="8/6/6 frames, R18 at 136x320")
    ap.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["r18", "r50"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--runs", type=int)
    ap.add_argument("--calib", type=int)
    ap.add_argument("--val", type=int)
    ap.add_argument("--held", type=int)
    ap.add_argument("--only", nargs="+", metavar="KEY", choices=[k for _, k, _ in CONTENDERS],
                    help="run only these contenders")
    ap.add_argument("--skip", nargs="+", metavar="KEY", choices=[k for _, k, _ in CONTENDERS],
                    help="leave these contenders out (e.g. nncf-ac: its search is the longest)")
    ap.add_argument("--reuse", action="store_true",
                    help="take a contender's quantised file and figures from an earlier run "
                         "in --work (its <key>.row.json) instead of quantising again; "
                         "agreement and latency are measured afresh")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "bench-int8"))
    ap.add_argument("--clip", default=CLIP)
    ap.add_argument("--segtool", help="binary [target/release/segtool, else target/debug]")
    ap.add_argument("--torch-python", default=os.environ.get("SEGTOOL_PYTHON"),
                    help="python with torch and cv2, for models and frames [$SEGTOOL_PYTHON]")
    ap.add_argument("--child-build", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.setup:
        return setup()
    if a.child_build:
        return child_build(json.loads(a.child_build))
    ensure_bench_python()
    if not a.torch_python:
        sys.exit("set SEGTOOL_PYTHON (source the env of scripts/setup.sh) or --torch-python")
    q = a.quick
    a.calib = a.calib or (8 if q else 60)
    a.val = a.val or (6 if q else 40)
    a.held = a.held or (6 if q else 40)
    a.rounds = a.rounds or (3 if q else 5)
    a.runs = a.runs or (3 if q else 10)
    models = QUICK if q else {k: MODELS[k] for k in a.models}
    cpus = sorted(os.sched_getaffinity(0))
    if a.threads < len(cpus):
        os.sched_setaffinity(0, cpus[:a.threads])  # inherited by every child
    os.environ.setdefault("OMP_NUM_THREADS", str(a.threads))
    sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
    import nncf
    import onnxruntime
    import openvino
    segtool = find_segtool(a.segtool)
    help_text = subprocess.run([segtool, "calibrate", "--help"], capture_output=True,
                               text=True).stdout
    has_layout = "--layout" in help_text
    env = {"cpu": cpu_info(), "onnxruntime": onnxruntime.__version__,
           "nncf": nncf.__version__, "openvino": openvino.__version__,
           "python": sys.version.split()[0], "segtool": segtool,
           "segtool_has_layout": has_layout, "threads": a.threads,
           "cpus_used": sorted(os.sched_getaffinity(0)), "rounds": a.rounds, "runs": a.runs,
           "quick": q}
    cpu = env["cpu"]
    print(f"CPU: {cpu['model_name']} ({cpu['logical_cpus']} logical, using "
          f"{len(env['cpus_used'])}); avx512_vnni: {cpu['avx512_vnni']}, avx_vnni: "
          f"{cpu['avx_vnni']}; ORT {onnxruntime.__version__}, NNCF {nncf.__version__}, "
          f"OpenVINO {openvino.__version__}; segtool {segtool}"
          + ("" if has_layout else " (no --layout: an older build, ort-cpu rows fall back)"),
          flush=True)
    os.makedirs(a.work, exist_ok=True)
    results = {"env": env, "models": []}
    out = os.path.join(a.work, f"int8_vs_quantizers_{'-'.join(models)}"
                              f"{'_quick' if q else ''}.json")
    t0 = time.perf_counter()
    for key, cfg in models.items():
        results["models"].append(bench_model(key, cfg, a, env, segtool, has_layout))
        results["wall_s"] = time.perf_counter() - t0
        with open(out, "w") as f:
            json.dump(results, f, indent=2, default=str)
    print(f"\n{out} ({results['wall_s']:.0f} s in all)")


if __name__ == "__main__":
    main()
