#!/usr/bin/env python3
"""Benchmark aid (not a test): ONNX Runtime's own profiler on two or more models, op by op.

    $SEGTOOL_PYTHON bench/ort_profile.py A.onnx B.onnx [--size 512] [--runs 3] [--threads 2]
                                         [--top 25]

Each model runs in its own child (intra-op --threads, one warm-up, --runs profiled runs,
SessionOptions.enable_profiling); the per-node `kernel_time` events of the profiled runs
are summed per op type and per node and divided by --runs. Printed: per op type the
milliseconds of each model side by side, then each model's --top slowest nodes, and the
node count per op type of the optimised graph ORT ran (what its fusions left). This is how
issue 15 compared our `ort` export with torch.onnx.export + onnxslim node by node.
"""
import argparse, collections, json, os, subprocess, sys, tempfile


def child(model, size, runs, threads, out):
    import numpy as np
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    so.enable_profiling = True
    so.profile_file_prefix = os.path.join(out, "ort")
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 3, size, size)).astype(np.float32)
    name = s.get_inputs()[0].name
    s.run(None, {name: x})
    for _ in range(runs):
        s.run(None, {name: x})
    print(s.end_profiling())


def profile(path, runs):
    with open(path) as f:
        events = json.load(f)
    per_op, per_node, count = collections.Counter(), collections.Counter(), collections.Counter()
    runs_seen = [e for e in events if e.get("name") == "model_run"]
    skip = len(runs_seen) - runs  # the warm-up run(s)
    run_ends = sorted(e["ts"] + e["dur"] for e in runs_seen)
    start = run_ends[skip - 1] if skip > 0 else 0
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time") or e["ts"] < start:
            continue
        op = e["args"].get("op_name", "?")
        node = e["name"][: -len("_kernel_time")]
        per_op[op] += e["dur"] / 1e3 / runs
        per_node[(op, node)] += e["dur"] / 1e3 / runs
        count[(op, node)] += 1
    nodes = collections.Counter(op for op, _ in per_node)
    total = sum(e["dur"] for e in runs_seen[skip:]) / 1e3 / max(runs, 1)
    return per_op, per_node, nodes, total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="*")
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        m, size, runs, threads, out = a.child
        return child(m, int(size), int(runs), int(threads), out)
    results = []
    for m in a.models:
        out = tempfile.mkdtemp(prefix="ort-profile-")
        p = subprocess.run([sys.executable, __file__, "--child", m, str(a.size), str(a.runs),
                            str(a.threads), out], check=True, capture_output=True, text=True)
        results.append(profile(p.stdout.strip().splitlines()[-1], a.runs))
    names = [os.path.basename(m) for m in a.models]
    ops = sorted({op for r in results for op in r[0]}, key=lambda o: -results[0][0].get(o, 0))
    print(f"{'op type (ms per run, nodes)':34}" + "".join(f"{n[:24]:>26}" for n in names))
    for op in ops:
        print(f"{op:34}" + "".join(f"{r[0].get(op, 0):17.1f} ({r[2].get(op, 0):4d})  "
                                   for r in results))
    print(f"{'sum of kernels':34}" + "".join(f"{sum(r[0].values()):17.1f}         " for r in results))
    print(f"{'model_run':34}" + "".join(f"{r[3]:17.1f}         " for r in results))
    for n, r in zip(names, results):
        print(f"\n{n}: slowest nodes")
        for (op, node), ms in r[1].most_common(a.top):
            print(f"  {ms:8.1f} ms  {op:22} {node}")


if __name__ == "__main__":
    main()
