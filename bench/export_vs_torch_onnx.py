#!/usr/bin/env python3
"""Benchmark (not a test): segtool's `ort` export vs torch.onnx.export of the same
ResNet-50 DANet weights, ONNX Runtime CPU with 2 intra-op threads, batch 1; plus tract
on segtool's `tract` export (segtool-runtime's TractEngine, its default executor).

    source "$(bash scripts/setup.sh)"
    cargo build --bin segtool && cargo build -p segtool-export --example engine_bench
    python bench/export_vs_torch_onnx.py [--sizes 512 1024] [--runs 2] [--work DIR]

Steps: the PyTorch reference DANet (tests/reference/danet_ref.py) with random,
trained-like weights (BN statistics near identity, attention gammas nonzero) is saved
with torch.save; `segtool import` turns it into a checkpoint; `segtool export` writes
the `ort` and `tract` profiles; torch.onnx.export writes the same model (fused output
only, dynamic batch/height/width, opset 17, constant folding, the TorchScript exporter
that mmdeploy uses). Every (model, size) runs in its own subprocess; latency is the
median of --runs after one warm-up, peak RSS is the subprocess's own VmHWM; with
--repeats K each is measured in K processes and the medians are printed.

--shapes static (in the default `dynamic static`) adds a fixed-shape pair per size: ours
with `--input-size SxS`, torch.onnx.export without dynamic_axes at SxS. It matters for
memory: ORT's NCHWc convolutions lose symbolic dimensions in shape inference, so in a
dynamic graph its planner cannot prove the residual Sum input and the output have the
same size and allocates a fresh buffer for every bottleneck's output (no in-place), for
either exporter. With fixed shapes the in-place reuse happens.
"""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

SPEC = {
    "arch": "danet", "backbone_name": "resnet50",
    "backbone": {"block": "bottleneck", "layers": [3, 4, 6, 3], "width": 64,
                 "output_stride": 8, "deep_stem": False},
    "classes": [f"class{i}" for i in range(19)],
}


def child_ort(path, size, runs):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    # --no-mem-pattern (both models alike): ORT otherwise keeps a second, pattern-planned
    # block of the whole activation set beside its arena from the second run on.
    so.enable_mem_pattern = os.environ.get("SEGTOOL_BENCH_MEM_PATTERN", "1") == "1"
    t = time.perf_counter()
    s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
    load = (time.perf_counter() - t) * 1e3
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    name = s.get_inputs()[0].name
    t = time.perf_counter(); s.run(None, {name: x}); first = (time.perf_counter() - t) * 1e3
    times = []
    for _ in range(runs):
        t = time.perf_counter(); s.run(None, {name: x}); times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    print(json.dumps({"load_ms": load, "first_ms": first, "median_ms": times[len(times) // 2],
                      "vm_hwm_kib": vm_hwm_kib()}))


def vm_hwm_kib():
    """This process's peak RSS (Linux VmHWM; unlike a child's ru_maxrss it is not
    inherited across fork/exec from a large parent)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])


def measure(cmd):
    """Runs cmd, returns (parsed last JSON line of stdout, peak RSS MiB): the child's own
    VmHWM when it reports one, else its ru_maxrss (which Linux carries over from the
    parent at exec, so it is only an upper bound)."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        return {"error": (err or out)[-400:]}, ru.ru_maxrss / 1024
    r = json.loads(out.strip().splitlines()[-1])
    return r, r["vm_hwm_kib"] / 1024 if "vm_hwm_kib" in r else ru.ru_maxrss / 1024


def measure_repeated(cmd, repeats):
    """`measure` in `repeats` fresh processes: ORT's arena placement varies from process
    to process (by up to ~90 MiB here), so one process is one sample. Returns the medians
    of peak RSS and of latency, with every peak in `peaks_mib`."""
    samples = [measure(cmd) for _ in range(repeats)]
    good = [(r, rss) for r, rss in samples if "error" not in r]
    if not good:
        return samples[0]
    median = lambda xs: sorted(xs)[len(xs) // 2]
    r = dict(good[0][0])
    r["median_ms"] = median([x["median_ms"] for x, _ in good])
    r["first_ms"] = median([x["first_ms"] for x, _ in good])
    r["peaks_mib"] = [round(rss) for _, rss in good]
    return r, median([rss for _, rss in good])


def model_paths(work, static_sizes):
    keys = ["ours_ort", "ours_tract", "torch"]
    keys += [f"{k}_{s}" for s in static_sizes for k in ("ours_ort", "torch")]
    return {k: os.path.join(work, f"{k}.onnx") for k in keys}


def build(work, segtool, static_sizes):
    paths = model_paths(work, static_sizes)
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    # In a child, so that the measuring parent stays small.
    subprocess.run([sys.executable, __file__, "--build", work, "--static-sizes",
                    *map(str, static_sizes)], check=True)
    return paths


def build_models(work, segtool, static_sizes):
    import torch
    from bench_models import random_danet
    paths = model_paths(work, static_sizes)
    model = random_danet(SPEC)
    pth = os.path.join(work, "danet_r50.pth")
    torch.save(model.state_dict(), pth)
    ckpt = os.path.join(work, "danet_r50.safetensors")
    if not os.path.exists(ckpt):
        subprocess.run([segtool, "import", "--from", pth, "--backbone", "resnet50", "--classes",
                        "19", "--mode", "full", "--out", ckpt], check=True)
    exports = [("ort", "ours_ort", ["--max-size", "1024x1024"]),
               ("tract", "ours_tract", ["--max-size", "1024x1024"])]
    exports += [("ort", f"ours_ort_{s}", ["--input-size", f"{s}x{s}"]) for s in static_sizes]
    for target, key, shape_args in exports:
        if not os.path.exists(paths[key]):
            subprocess.run([segtool, "export", "--checkpoint", ckpt, "--onnx", paths[key],
                            "--target", target, *shape_args], check=True)

    class Fused(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)[0]

    dynamic = {"image": {0: "batch", 2: "height", 3: "width"},
               "logits": {0: "batch", 2: "height", 3: "width"}}
    torch_exports = [("torch", 512, dynamic)] + [(f"torch_{s}", s, None) for s in static_sizes]
    for key, size, axes in torch_exports:
        if os.path.exists(paths[key]):
            continue
        t = time.perf_counter()
        torch.onnx.export(Fused(model), torch.randn(1, 3, size, size), paths[key],
                          opset_version=17, input_names=["image"], output_names=["logits"],
                          do_constant_folding=True, dynamic_axes=axes, dynamo=False)
        print(f"torch.onnx.export {key}: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    return paths


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--shapes", nargs="+", choices=["dynamic", "static"],
                    default=["dynamic", "static"],
                    help="dynamic: one model per exporter with symbolic batch/height/width; "
                         "static: one model per exporter and size")
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1,
                    help="processes per (model, size); medians are reported")
    ap.add_argument("--work", default="/tmp/segtool-bench")
    ap.add_argument("--child", nargs=3)
    ap.add_argument("--no-tract", action="store_true")
    ap.add_argument("--build")
    ap.add_argument("--static-sizes", type=int, nargs="*", default=[])
    ap.add_argument("--no-mem-pattern", action="store_true",
                    help="ORT enable_mem_pattern=False for both models (a memory-conscious setting)")
    a = ap.parse_args()
    if a.no_mem_pattern:
        os.environ["SEGTOOL_BENCH_MEM_PATTERN"] = "0"
    segtool = os.path.join(ROOT, "target", "debug", "segtool")
    if a.child:
        return child_ort(a.child[0], int(a.child[1]), int(a.child[2]))
    if a.build:
        return build_models(a.build, segtool, a.static_sizes)
    os.makedirs(a.work, exist_ok=True)
    bench = os.path.join(ROOT, "target", "debug", "examples", "engine_bench")
    static_sizes = a.sizes if "static" in a.shapes else []
    paths = build(a.work, segtool, static_sizes)
    for k, p in paths.items():
        print(f"{k:15} {os.path.getsize(p) / 1e6:7.1f} MB  {p}")
    rows = []

    def record(size, shapes, key, engine, r, rss):
        rows.append((size, shapes, key, engine, r, rss))
        print(json.dumps({"size": size, "shapes": shapes, "model": key, **r,
                          "peak_rss_mib": round(rss)}), flush=True)

    for size in a.sizes:
        for shapes in a.shapes:
            suffix = "" if shapes == "dynamic" else f"_{size}"
            for key in ("ours_ort", "torch"):
                r, rss = measure_repeated([sys.executable, __file__, "--child",
                                           paths[key + suffix], str(size), str(a.runs)],
                                          a.repeats)
                record(size, shapes, key, "onnxruntime cpu x2", r, rss)
        if not a.no_tract:
            r, rss = measure([bench, paths["ours_tract"], "tract", str(size), str(size), str(a.runs)])
            record(size, "dynamic", "ours_tract", "tract (default executor)", r, rss)
    print()
    print(f"{'size':>9} {'shapes':8} {'model':11} {'engine':25} {'median ms':>10} {'first ms':>9} "
          f"{'peak RSS MiB':>13}")
    for size, shapes, key, eng, r, rss in rows:
        head = f"{size:>4}x{size:<4} {shapes:8} {key:11} {eng:25}"
        if "error" in r:
            print(f"{head} ERROR {r['error'][:200]}")
            continue
        spread = ""
        if len(r.get("peaks_mib", [])) > 1:
            spread = f"  ({min(r['peaks_mib'])}-{max(r['peaks_mib'])})"
        print(f"{head} {r['median_ms']:10.0f} {r['first_ms']:9.0f} {rss:13.0f}{spread}")
    by = {(size, shapes, key): (r, rss) for size, shapes, key, _, r, rss in rows if "error" not in r}
    for size in a.sizes:
        for shapes in a.shapes:
            if (size, shapes, "ours_ort") in by and (size, shapes, "torch") in by:
                (o, orss), (t, trss) = by[(size, shapes, "ours_ort")], by[(size, shapes, "torch")]
                print(f"{size}x{size} {shapes}: ours/torch latency "
                      f"{o['median_ms'] / t['median_ms']:.2f}, peak RSS {orss / trss:.1%}")


if __name__ == "__main__":
    main()
