#!/usr/bin/env python3
"""Benchmark (not a test): issue 15's CPU table in one run, side by side.

    SEGTOOL_BENCH=1 source "$(SEGTOOL_BENCH=1 bash scripts/setup.sh)"   # + onnxslim
    cargo build --bin segtool
    $SEGTOOL_PYTHON bench/cpu_table.py [--sizes 512 1024] [--repeats 5] [--runs 3]
                                       [--threads 2] [--work DIR] [--rows ...] [--json F]

Model: ResNet-50 DANet, output stride 8, multi-grid 4,8,16, full width, 19 classes,
batch 1, random trained-like weights as in bench/export_vs_torch_onnx.py (the PyTorch
reference DANet of tests/reference/, `segtool import`, `segtool export --target ort|tract
--max-size 1024x1024`; speed is the architecture's, the masks are meaningless). Rows:

  segtool-ort     segtool bench --engine ort   on our `--target ort` export
  segtool-tract   segtool bench --engine tract on our `--target tract` export
  py-torch        Python onnxruntime on torch.onnx.export (opset 17, dynamic H/W)
  py-torch-slim   the same after `onnxslim`
  py-ours         Python onnxruntime on our `ort` export (same child as the two above)

Every cell is --repeats fresh processes, the rows taking turns within each repeat (so a
slow spell hits every row alike); in each, one warm-up run then --runs timed runs
(engine time only: segtool bench's `engine_ms`, session.run for Python); the cell shows
the median over processes of the per-process medians, and the median peak RSS (segtool:
the child's ru_maxrss, this parent staying small; Python: the child's own VmHWM).
Ratios are against segtool-ort at the same size, of the medians and (p) the median of the
per-repeat ratios. --threads sets ONNX Runtime's intra-op
threads and tract's pool alike. Our exports are redone every run (seconds; they follow
the checked-out exporter), torch's and the slimmed one are cached in --work.

Quick look: --sizes 512 --repeats 1 --runs 1 (about 2 minutes). Full table (5 repeats,
3 runs, 512 and 1024) takes about 25 minutes on 2 cores. Load from other processes
skews every row: the script prints `uptime` before and after.
"""
import argparse, json, os, statistics, subprocess, sys, time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
import export_vs_torch_onnx as peers  # noqa: E402  (torch is imported only in children)

ROWS = ["segtool-ort", "segtool-tract", "py-torch", "py-torch-slim", "py-ours"]


MULTI_GRID = [4, 8, 16]
SPEC = {**peers.SPEC, "backbone": {**peers.SPEC["backbone"], "multi_grid": MULTI_GRID}}


def build_models(work, segtool):
    """In a child: random DANet -> torch.save -> segtool import; torch.onnx.export; onnxslim."""
    import torch
    from bench_models import random_danet
    model = random_danet(SPEC)
    pth = os.path.join(work, "danet_r50_mg.pth")
    torch.save(model.state_dict(), pth)
    subprocess.run([segtool, "import", "--from", pth, "--backbone", "resnet50", "--classes",
                    "19", "--mode", "full", "--output-stride", "8", "--multi-grid",
                    ",".join(map(str, MULTI_GRID)), "--out",
                    os.path.join(work, "danet_r50_mg.safetensors")], check=True)

    class Fused(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

    dynamic = {"image": {0: "batch", 2: "height", 3: "width"},
               "logits": {0: "batch", 2: "height", 3: "width"}}
    t = time.perf_counter()
    torch.onnx.export(Fused(model), torch.randn(1, 3, 512, 512), os.path.join(work, "torch.onnx"),
                      opset_version=17, input_names=["image"], output_names=["logits"],
                      do_constant_folding=True, dynamic_axes=dynamic, dynamo=False)
    print(f"torch.onnx.export: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    import onnx, onnxslim
    t = time.perf_counter()
    onnx.save(onnxslim.slim(onnx.load(os.path.join(work, "torch.onnx"))),
              os.path.join(work, "torch_slim.onnx"))
    print(f"onnxslim: {time.perf_counter() - t:.1f} s", file=sys.stderr)


def build(work, segtool, reuse):
    """(paths by row). The checkpoint and torch's graphs are built once (cached in --work);
    our exports are redone unless --reuse, so they follow the checked-out exporter."""
    ckpt = os.path.join(work, "danet_r50_mg.safetensors")
    slim = os.path.join(work, "torch_slim.onnx")
    if not (os.path.exists(ckpt) and os.path.exists(slim)):
        subprocess.run([sys.executable, __file__, "--build", work, "--segtool", segtool],
                       check=True)
    ours = {t: os.path.join(work, f"ours_{t}.onnx") for t in ("ort", "tract")}
    for target, path in ours.items():
        if reuse and os.path.exists(path):
            continue
        subprocess.run([segtool, "export", "--checkpoint", ckpt, "--onnx", path, "--target",
                        target, "--max-size", "1024x1024"], check=True,
                       stdout=subprocess.DEVNULL)
    return {"segtool-ort": ours["ort"], "segtool-tract": ours["tract"],
            "py-torch": os.path.join(work, "torch.onnx"), "py-torch-slim": slim,
            "py-ours": ours["ort"]}


def run_segtool(segtool, model, engine, size, runs, threads, work):
    out = os.path.join(work, f"bench-{engine}-{size}.json")
    cmd = [segtool, "bench", "--model", model, "--engine", engine, "--size", f"{size}x{size}",
           "--iterations", str(runs), "--warmup", "1", "--threads", str(threads), "--json", out]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    err = p.stderr.read()
    if os.waitstatus_to_exitcode(status) != 0:
        return {"error": err[-300:]}
    with open(out) as f:
        r = json.load(f)["results"][0]
    return {"ms": r["engine_ms"]["median"], "rss_mib": ru.ru_maxrss / 1024}


def run_python(model, size, runs, threads):
    env = dict(os.environ, SEGTOOL_BENCH_THREADS=str(threads))
    cmd = [sys.executable, __file__, "--child", model, str(size), str(runs)]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        return {"error": (p.stderr or p.stdout)[-300:]}
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {"ms": r["median_ms"], "rss_mib": r["vm_hwm_kib"] / 1024}


def child(model, size, runs):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = int(os.environ.get("SEGTOOL_BENCH_THREADS", "2"))
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    name = s.get_inputs()[0].name
    s.run(None, {name: x})
    times = []
    for _ in range(runs):
        t = time.perf_counter()
        s.run(None, {name: x})
        times.append((time.perf_counter() - t) * 1e3)
    print(json.dumps({"median_ms": statistics.median(times), "vm_hwm_kib": peers.vm_hwm_kib()}))


def cell(samples):
    good = [s for s in samples if "error" not in s]
    if not good:
        return samples[0]
    return {"ms": statistics.median(s["ms"] for s in good),
            "rss_mib": statistics.median(s["rss_mib"] for s in good),
            "ms_all": [round(s["ms"]) for s in good],
            "rss_all": [round(s["rss_mib"]) for s in good]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--repeats", type=int, default=5, help="processes per cell")
    ap.add_argument("--runs", type=int, default=3, help="timed runs per process")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rows", nargs="+", choices=ROWS, default=ROWS)
    ap.add_argument("--work", default="/tmp/segtool-cpu-table")
    ap.add_argument("--segtool", default=os.path.join(ROOT, "target", "debug", "segtool"))
    ap.add_argument("--reuse", action="store_true", help="keep our exports from a previous run")
    ap.add_argument("--json", help="also write the cells as JSON")
    ap.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    ap.add_argument("--build", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], int(a.child[1]), int(a.child[2]))
    if a.build:
        return build_models(a.build, a.segtool)
    os.makedirs(a.work, exist_ok=True)
    print("load before:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    started = time.perf_counter()
    models = build(a.work, a.segtool, a.reuse)
    cells, paired = {}, {}
    for size in a.sizes:
        # Rows interleaved within each repeat, so a slow spell of the machine hits every
        # row alike; each repeat's ratio to segtool-ort is paired within that repeat.
        samples = {row: [] for row in a.rows}
        for rep in range(a.repeats):
            for row in a.rows:
                if row.startswith("segtool-"):
                    s = run_segtool(a.segtool, models[row], row.split("-")[1], size, a.runs,
                                    a.threads, a.work)
                else:
                    s = run_python(models[row], size, a.runs, a.threads)
                samples[row].append(s)
                print(json.dumps({"row": row, "size": size, "repeat": rep, **s}), flush=True)
        for row in a.rows:
            cells[(row, size)] = cell(samples[row])
            pairs = [r["ms"] / o["ms"] for r, o in zip(samples[row], samples.get("segtool-ort", []))
                     if "ms" in r and "ms" in o]
            if pairs and row != "segtool-ort":
                paired[(row, size)] = statistics.median(pairs)
                cells[(row, size)]["paired_ratio"] = paired[(row, size)]
    print("load after: ", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"\nResNet-50 DANet OS8, batch 1, {a.threads} threads; engine median of {a.runs} runs, "
          f"median over {a.repeats} processes; peak RSS; (x: ratio to segtool-ort of the "
          f"medians, time/RSS; p: median of the per-repeat time ratios)")
    head = f"{'':15}" + "".join(f"| {f'{s}x{s}':>38} " for s in a.sizes)
    print(head)
    for row in a.rows:
        line = f"{row:15}"
        for size in a.sizes:
            c, base = cells[(row, size)], cells.get(("segtool-ort", size), {})
            if "error" in c:
                line += f"| {'error':>38} "
                continue
            ratio = ""
            if "ms" in base and row != "segtool-ort":
                ratio = f" {c['ms'] / base['ms']:.2f}x/{c['rss_mib'] / base['rss_mib']:.2f}x"
                if (row, size) in paired:
                    ratio += f" p{paired[(row, size)]:.2f}"
            line += f"| {c['ms']:7.0f} ms {c['rss_mib']:5.0f} MiB{ratio:>21} "
        print(line)
    for (row, size), c in cells.items():
        if "error" in c:
            print(f"{row} {size}: {c['error']}")
    print(f"\n({time.perf_counter() - started:.0f} s in all)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"row": r, "size": s, **c} for (r, s), c in cells.items()], f, indent=1)


if __name__ == "__main__":
    main()
