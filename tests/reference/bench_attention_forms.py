#!/usr/bin/env python3
"""Times DANet's two attentions in each ONNX form on ONNX Runtime CPU (not a test).

    python tests/reference/bench_attention_forms.py [--threads 2] [--c 512] [--n 4096]

CAM: attention(Q=-X, K=X, V=X) over C tokens of length N (scale 1).
PAM: attention(Q, K: N x C/8, V: N x C) over N tokens (scale 1).
Forms: decomposed (MatMul-Softmax-MatMul, DANet's operand order), onnx Attention-23
(3D inputs, q/kv_num_heads 1) and com.microsoft MultiHeadAttention (num_heads 1, 3D).
Each form runs in its own process so peak RSS is per form.
"""
import argparse, json, resource, subprocess, sys, time

import numpy as np


def build(kind, form, c, n):
    import onnx
    from onnx import TensorProto, helper as h
    F = TensorProto.FLOAT
    opsets = [h.make_opsetid("", 23 if form == "onnx" else 17)]
    nodes, inits = [], []
    if kind == "cam":
        inputs = [h.make_tensor_value_info("x", F, [1, c, n])]
        if form == "decomposed":
            nodes += [
                h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                h.make_node("MatMul", ["x", "xt"], ["e"]),
                h.make_node("ReduceMax", ["e"], ["m"], axes=[-1], keepdims=1),
                h.make_node("Sub", ["m", "e"], ["en"]),
                h.make_node("Softmax", ["en"], ["a"], axis=-1),
                h.make_node("MatMul", ["a", "x"], ["y"]),
            ]
        elif form == "decomposed_neg":
            nodes += [
                h.make_node("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
                h.make_node("Neg", ["x"], ["q"]),
                h.make_node("MatMul", ["q", "xt"], ["e"]),
                h.make_node("Softmax", ["e"], ["a"], axis=-1),
                h.make_node("MatMul", ["a", "x"], ["y"]),
            ]
        elif form == "onnx":
            nodes += [h.make_node("Neg", ["x"], ["q"]),
                      h.make_node("Attention", ["q", "x", "x"], ["y"], q_num_heads=1, kv_num_heads=1, scale=1.0)]
        elif form == "ms-mha":
            opsets.append(h.make_opsetid("com.microsoft", 1))
            nodes += [h.make_node("Neg", ["x"], ["q"]),
                      h.make_node("MultiHeadAttention", ["q", "x", "x"], ["y"], domain="com.microsoft", num_heads=1, scale=1.0)]
        out = [h.make_tensor_value_info("y", F, [1, c, n])]
        feeds = {"x": (np.random.RandomState(0).randn(1, c, n) * 0.05).astype(np.float32)}
    else:  # pam: tokens n, qk c//8, v c
        d = c // 8
        inputs = [h.make_tensor_value_info("q", F, [1, n, d]), h.make_tensor_value_info("k", F, [1, n, d]),
                  h.make_tensor_value_info("v", F, [1, n, c])]
        if form == "decomposed":
            nodes += [
                h.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
                h.make_node("MatMul", ["q", "kt"], ["e"]),
                h.make_node("Softmax", ["e"], ["a"], axis=-1),
                h.make_node("MatMul", ["a", "v"], ["y"]),
            ]
        elif form == "onnx":
            nodes += [h.make_node("Attention", ["q", "k", "v"], ["y"], q_num_heads=1, kv_num_heads=1, scale=1.0)]
        elif form == "ms-mha":
            opsets.append(h.make_opsetid("com.microsoft", 1))
            nodes += [h.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], domain="com.microsoft", num_heads=1, scale=1.0)]
        out = [h.make_tensor_value_info("y", F, [1, n, c])]
        r = np.random.RandomState(0)
        feeds = {"q": (r.randn(1, n, d) * 0.3).astype(np.float32), "k": (r.randn(1, n, d) * 0.3).astype(np.float32),
                 "v": r.randn(1, n, c).astype(np.float32)}
    g = h.make_graph(nodes, kind, inputs, out, inits)
    m = h.make_model(g, opset_imports=opsets)
    m.ir_version = 11 if form == "onnx" else 8
    return m.SerializeToString(), feeds


def child(kind, form, c, n, threads, reps):
    import onnxruntime as ort
    model, feeds = build(kind, form, c, n)
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    y = s.run(None, feeds)[0]  # warm-up
    ts = []
    for _ in range(reps):
        t = time.perf_counter(); y = s.run(None, feeds)[0]; ts.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"kind": kind, "form": form, "median_s": float(np.median(ts)), "min_s": min(ts),
                      "peak_rss_mb": rss, "checksum": float(np.abs(y).sum())}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--c", type=int, default=512)
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--kinds", default="cam,pam")
    ap.add_argument("--child", nargs=2)
    a = ap.parse_args()
    if a.child:
        return child(a.child[0], a.child[1], a.c, a.n, a.threads, a.reps)
    for kind in a.kinds.split(","):
        forms = ["decomposed", "decomposed_neg", "onnx", "ms-mha"] if kind == "cam" else ["decomposed", "onnx", "ms-mha"]
        for form in forms:
            r = subprocess.run([sys.executable, __file__, "--child", kind, form, "--c", str(a.c), "--n", str(a.n),
                                "--threads", str(a.threads), "--reps", str(a.reps)], capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{kind} {form}: FAILED\n{r.stderr[-2000:]}")
            else:
                d = json.loads(r.stdout.strip().splitlines()[-1])
                print(f"{kind:4} C={a.c} N={a.n} {form:15} median {d['median_s']*1e3:9.1f} ms  min {d['min_s']*1e3:9.1f} ms"
                      f"  peak RSS {d['peak_rss_mb']:7.0f} MB  checksum {d['checksum']:.6g}", flush=True)


if __name__ == "__main__":
    main()
