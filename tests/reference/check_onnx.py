#!/usr/bin/env python3
"""Validates exported ONNX files with the pip `onnx` package, and optionally runs them.

    python tests/reference/check_onnx.py A.onnx [B.onnx ...] [--run HxW ...] [--batch 2]

For each file: onnx.checker.check_model(full_check=True) and
onnx.shape_inference.infer_shapes(strict_mode=True); prints one JSON line per file.
With --run, each file is also run by ONNX Runtime (CPU) on the same random input of each
size, and the max abs difference of its first output to the first file's is reported
("max_diff" per size). Exit status 1 if any check fails.
"""
import argparse, json, sys

import numpy as np
import onnx


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--run", nargs="*", default=[])
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    ok = True
    outputs = {}
    for path in a.models:
        res = {"path": path}
        try:
            m = onnx.load(path)
            onnx.checker.check_model(m, full_check=True)
            inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
            res["checker"] = "ok"
            out = inferred.graph.output[0].type.tensor_type.shape.dim
            res["output_dims"] = [d.dim_param or d.dim_value for d in out]
            res["ir_version"] = m.ir_version
            res["opsets"] = {o.domain: o.version for o in m.opset_import}
        except Exception as e:  # noqa: BLE001
            ok = False
            res["checker"] = f"FAILED: {type(e).__name__}: {e}"[:4000]
        if a.run:
            import onnxruntime as ort
            so = ort.SessionOptions()
            so.intra_op_num_threads = 2
            try:
                s = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
                res["max_diff"] = {}
                for size in a.run:
                    h, w = map(int, size.split("x"))
                    x = np.random.RandomState(h * 1000 + w).randn(a.batch, 3, h, w).astype(np.float32)
                    y = s.run(None, {s.get_inputs()[0].name: x})[0]
                    ref = outputs.setdefault(size, y)
                    res["max_diff"][size] = float(np.abs(y - ref).max())
            except Exception as e:  # noqa: BLE001
                ok = False
                res["run"] = f"FAILED: {type(e).__name__}: {e}"[:4000]
        print(json.dumps(res), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
