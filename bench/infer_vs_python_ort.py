#!/usr/bin/env python3
"""Benchmark (not a test): `segtool infer` (ONNX Runtime, N intra-op threads; and tract)
against a plain Python onnxruntime loop over the same PNG files and the same model.

    source "$(bash scripts/setup.sh)"
    cargo build --release --bin segtool          # or a debug build (--segtool PATH)
    $SEGTOOL_PYTHON -m pip install --target /tmp/bench-pylibs pillow   # PIL, once
    PYTHONPATH=/tmp/bench-pylibs $SEGTOOL_PYTHON bench/infer_vs_python_ort.py \
        [--count 200] [--size 512x1024] [--backbone resnet50] [--threads 2] [--images DIR]

Model: the PyTorch reference DANet (tests/reference/danet_ref.py) with random weights
(BN statistics at identity, attention gammas nonzero, as in bench/export_vs_torch_onnx.py)
is saved with torch.save, turned into a checkpoint by `segtool import`, and exported with
`segtool export` twice: `--target ort` (used by both segtool-ORT and the Python loop, the
same file) and `--target tract`. Weights are random: the speed is what a trained model of
that architecture has, the masks are meaningless.

Images: --count PNGs of --size (HxW), smooth colour gradients plus noise, or --images DIR.

Measured, each in its own process, after a warm-up of the engine:
  * segtool infer --threads N --batch-size B --no-overlay --quiet (mask PNG per image);
    its own summary line gives the loop time (model load excluded);
  * python: onnxruntime.InferenceSession(intra_op_num_threads=N), one image at a time:
    PIL decode, numpy normalise (spec mean/std from the model's metadata), run, argmax,
    palette-mode PNG save with PIL (cheaper to encode than segtool's RGB mask PNG);
  * the same with --dynamic-shapes (the session keeps symbolic height/width; by default
    segtool fixes them to the one image size, see OrtOptions::with_fixed_input_size);
  * segtool infer --engine tract --threads N (tract's own pool of N threads).
Printed: images/s of the loop (load excluded), wall time of the process, the ratio to the
Python loop, each process's peak RSS (its own VmHWM), and the share of the Python loop
spent inside session.run, which bounds what any runner on the same engine can gain.
"""
import argparse, json, os, re, shutil, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

BACKBONES = {
    "tiny": {"block": "basic", "layers": [1, 1, 1, 1], "width": 16},
    "resnet18": {"block": "basic", "layers": [2, 2, 2, 2], "width": 64},
    "resnet34": {"block": "basic", "layers": [3, 4, 6, 3], "width": 64},
    "resnet50": {"block": "bottleneck", "layers": [3, 4, 6, 3], "width": 64},
    "resnet101": {"block": "bottleneck", "layers": [3, 4, 23, 3], "width": 64},
}


def parse_hw(s):
    h, w = s.lower().split("x")
    return int(h), int(w)


def build_model(work, segtool, backbone, classes):
    """Random-weight DANet -> torch.save -> segtool import -> segtool export (ort, tract)."""
    paths = {t: os.path.join(work, f"danet_{backbone}_{t}.onnx") for t in ("ort", "tract")}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    import torch
    from bench_models import random_danet
    spec = {"arch": "danet", "backbone_name": backbone,
            "backbone": {**BACKBONES[backbone], "output_stride": 8, "deep_stem": False},
            "classes": [f"class{i}" for i in range(classes)]}
    model = random_danet(spec)
    pth = os.path.join(work, f"danet_{backbone}.pth")
    torch.save(model.state_dict(), pth)
    ckpt = os.path.join(work, f"danet_{backbone}.safetensors")
    subprocess.run([segtool, "import", "--from", pth, "--backbone", backbone, "--classes",
                    str(classes), "--mode", "full", "--out", ckpt], check=True)
    for target, p in paths.items():
        subprocess.run([segtool, "export", "--checkpoint", ckpt, "--onnx", p,
                        "--target", target], check=True)
    return paths


def make_images(folder, count, h, w):
    import numpy as np
    from PIL import Image
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    for i in range(count):
        path = os.path.join(folder, f"img{i:05d}.png")
        if os.path.exists(path):
            continue
        a, b, c = rng.uniform(0.5, 3.0, 3)
        base = np.stack([np.sin(xx / w * a * 6 + i), np.cos(yy / h * b * 6 - i),
                         np.sin((xx + yy) / (w + h) * c * 6)], -1)
        img = (base * 90 + 128 + rng.normal(0, 12, (h, w, 3))).clip(0, 255).astype(np.uint8)
        Image.fromarray(img).save(path)


def python_loop(model, images, out, threads):
    """The child: a straightforward Python deployment loop. Prints one JSON line."""
    import numpy as np
    import onnxruntime as ort
    from PIL import Image
    t0 = time.perf_counter()
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    spec = json.loads(sess.get_modelmeta().custom_metadata_map["segtool.spec"])
    mean = np.array(spec["mean"], np.float32)
    std = np.array(spec["std"], np.float32)
    palette = [c for rgb in spec["palette"] for c in rgb]
    name = sess.get_inputs()[0].name
    files = sorted(f for f in os.listdir(images) if f.lower().endswith((".png", ".jpg", ".jpeg")))
    # Warm-up on the first image (segtool's first batch pays this inside its loop time).
    first = np.asarray(Image.open(os.path.join(images, files[0])).convert("RGB"))
    x = ((first.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)[None]
    sess.run(None, {name: np.ascontiguousarray(x)})
    load = time.perf_counter() - t0
    os.makedirs(out, exist_ok=True)
    engine = 0.0
    t1 = time.perf_counter()
    for f in files:
        img = np.asarray(Image.open(os.path.join(images, f)).convert("RGB"))
        x = ((img.astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)[None]
        x = np.ascontiguousarray(x)
        t_run = time.perf_counter()
        logits = sess.run(None, {name: x})[0]
        engine += time.perf_counter() - t_run
        mask = logits[0].argmax(axis=0).astype(np.uint8)
        png = Image.fromarray(mask, mode="L")
        png = png.convert("P")
        png.putpalette(palette)
        png.save(os.path.join(out, os.path.splitext(f)[0] + "_mask.png"))
    loop = time.perf_counter() - t1
    with open("/proc/self/status") as f:
        hwm_kib = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    print(json.dumps({"images": len(files), "loop_s": loop, "engine_s": engine, "load_s": load,
                      "peak_mib": hwm_kib / 1024}))


def run_segtool(segtool, model, images, out, engine, threads, batch, extra=()):
    cmd = [segtool, "infer", "--model", model, "--input", images, "--out", out, "--engine",
           engine, "--batch-size", str(batch), "--no-overlay", "--quiet", *extra]
    if engine == "ort":
        cmd += ["--threads", str(threads)]
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t
    stdout = p.stdout
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stderr}")
    m = re.search(r"(\d+) image\(s\) -> .* in ([0-9.]+) s", stdout)
    # segtool's own VmHWM from its summary (a child's ru_maxrss would include this parent).
    peak = re.search(r"peak RSS (\d+) MiB", stdout)
    peak = float(peak.group(1)) if peak else None
    return {"images": int(m.group(1)), "loop_s": float(m.group(2)), "wall_s": wall,
            "peak_mib": peak, "summary": stdout.strip()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", type=parse_hw, default=(512, 1024), help="HxW")
    ap.add_argument("--images", help="use this folder of images instead of generating")
    ap.add_argument("--backbone", default="resnet50", choices=sorted(BACKBONES))
    ap.add_argument("--classes", type=int, default=19)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--work", default="/tmp/segtool-infer-bench")
    ap.add_argument("--segtool", help="binary [target/release/segtool, else target/debug]")
    ap.add_argument("--no-tract", action="store_true")
    ap.add_argument("--no-dynamic", action="store_true", help="skip the --dynamic-shapes row")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "IMAGES", "OUT"))
    a = ap.parse_args()
    if a.child:
        return python_loop(*a.child, a.threads)
    segtool = a.segtool or next(
        (p for p in (os.path.join(ROOT, "target", d, "segtool") for d in ("release", "debug"))
         if os.path.exists(p)), None)
    if not segtool:
        raise SystemExit("build segtool first (cargo build --release --bin segtool)")
    os.makedirs(a.work, exist_ok=True)
    h, w = a.size
    images = a.images or os.path.join(a.work, f"images_{a.count}_{h}x{w}")
    if not a.images:
        make_images(images, a.count, h, w)
    models = build_model(a.work, segtool, a.backbone, a.classes)
    print(f"segtool {segtool}\nimages  {images}\nmodels  {models['ort']} / {models['tract']}")

    rows = []
    r = run_segtool(segtool, models["ort"], images, os.path.join(a.work, "out_segtool_ort"),
                    "ort", a.threads, a.batch_size)
    rows.append((f"segtool infer ort x{a.threads} b{a.batch_size}", r))
    print(r["summary"], flush=True)
    if not a.no_dynamic:
        r = run_segtool(segtool, models["ort"], images, os.path.join(a.work, "out_segtool_ort"),
                        "ort", a.threads, a.batch_size, ["--dynamic-shapes"])
        rows.append((f"  same, --dynamic-shapes", r))
        print(r["summary"], flush=True)
    t = time.perf_counter()
    p = subprocess.run([sys.executable, __file__, "--threads", str(a.threads), "--child",
                        models["ort"], images, os.path.join(a.work, "out_python_ort")],
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"python loop failed:\n{p.stderr}")
    py = json.loads(p.stdout.strip().splitlines()[-1])
    py["wall_s"] = time.perf_counter() - t
    rows.append((f"python onnxruntime x{a.threads} b1", py))
    print(json.dumps(py), flush=True)
    if not a.no_tract:
        r = run_segtool(segtool, models["tract"], images,
                        os.path.join(a.work, "out_segtool_tract"), "tract", a.threads,
                        a.batch_size)
        rows.append((f"segtool infer tract b{a.batch_size}", r))
        print(r["summary"], flush=True)

    base = py["images"] / py["loop_s"]
    print()
    print(f"{a.count if not a.images else py['images']} images {h}x{w}, DANet-{a.backbone} "
          f"({a.classes} classes), CPU, {os.cpu_count()} cores visible")
    print(f"{'runner':34} {'images':>6} {'loop s':>8} {'img/s':>8} {'wall s':>8} {'vs python':>9} "
          f"{'peak MiB':>9}")
    for name, r in rows:
        ips = r["images"] / r["loop_s"]
        peak = f"{r['peak_mib']:9.0f}" if r.get("peak_mib") else f"{'-':>9}"
        print(f"{name:34} {r['images']:6d} {r['loop_s']:8.2f} {ips:8.2f} {r['wall_s']:8.2f} "
              f"{ips / base:8.2f}x {peak}")
    # Amdahl: a runner on the same engine, model and threads can at best remove the
    # Python loop's non-engine time (decode, normalise, argmax, PNG), so its ceiling is
    # loop / engine. Where that is near 1.0 the engine, not the loop, is what to speed up.
    share = py["engine_s"] / py["loop_s"]
    print(f"python loop: {share:.1%} of its time inside session.run -> ceiling for any runner "
          f"on the same engine and threads: {1 / share:.2f}x")


if __name__ == "__main__":
    main()
