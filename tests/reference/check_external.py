#!/usr/bin/env python3
"""Checks an export that keeps its weights in ONNX external data against the same export inline.

    python tests/reference/check_external.py INLINE.onnx EXTERNAL.onnx [--run HxW ...] [--batch 2]

EXTERNAL.onnx is checked by path, so that the side file named by each tensor's `location`
resolves against the model's directory:
  - onnx.checker.check_model(path, full_check=True);
  - onnx.load(path, load_external_data=False): counts the tensors stored externally and
    checks their offsets are 4096-aligned and inside the side file;
  - onnx.load(path): every initialiser (external data loaded) equals INLINE's bit for bit;
  - with --run, ONNX Runtime (CPU) sessions opened from both paths run the same random
    input per size; "max_diff" is the max abs difference of their first outputs.
Prints one JSON line; exit status 1 if any check fails.
"""
import argparse, json, os, sys

import numpy as np
import onnx
from onnx import external_data_helper, numpy_helper


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("inline")
    ap.add_argument("external")
    ap.add_argument("--run", nargs="*", default=[])
    ap.add_argument("--batch", type=int, default=2)
    a = ap.parse_args()
    res = {"path": a.external}
    ok = True

    def fail(key, e):
        nonlocal ok
        ok = False
        res[key] = f"FAILED: {type(e).__name__}: {e}"[:4000]

    try:
        onnx.checker.check_model(a.external, full_check=True)
        res["checker"] = "ok"
    except Exception as e:  # noqa: BLE001
        fail("checker", e)
    try:
        bare = onnx.load(a.external, load_external_data=False)
        base = os.path.dirname(os.path.abspath(a.external))
        ext = [t for t in bare.graph.initializer if external_data_helper.uses_external_data(t)]
        res["external_tensors"] = len(ext)
        locations = set()
        for t in ext:
            info = {e.key: e.value for e in t.external_data}
            assert not t.HasField("raw_data"), f"{t.name} has raw_data"
            offset, length = int(info["offset"]), int(info["length"])
            assert offset % 4096 == 0, f"{t.name}: offset {offset} not 4096-aligned"
            size = os.path.getsize(os.path.join(base, info["location"]))
            assert offset + length <= size, f"{t.name}: past the end of the side file"
            locations.add(info["location"])
        res["locations"] = sorted(locations)
        full = onnx.load(a.external)
        ref = {t.name: t for t in onnx.load(a.inline).graph.initializer}
        assert len(ref) == len(full.graph.initializer)
        for t in full.graph.initializer:
            x, y = numpy_helper.to_array(t), numpy_helper.to_array(ref[t.name])
            assert x.dtype == y.dtype and x.shape == y.shape, t.name
            assert x.tobytes() == y.tobytes(), f"{t.name} differs from the inline export"
        res["load"] = "ok"
    except Exception as e:  # noqa: BLE001
        fail("load", e)
    if a.run:
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = 2
        try:
            s_in = ort.InferenceSession(a.inline, so, providers=["CPUExecutionProvider"])
            s_ex = ort.InferenceSession(a.external, so, providers=["CPUExecutionProvider"])
            res["max_diff"] = {}
            for size in a.run:
                h, w = map(int, size.split("x"))
                x = np.random.RandomState(h * 1000 + w).randn(a.batch, 3, h, w).astype(np.float32)
                name = s_in.get_inputs()[0].name
                y_in = s_in.run(None, {name: x})[0]
                y_ex = s_ex.run(None, {name: x})[0]
                res["max_diff"][size] = float(np.abs(y_in - y_ex).max())
        except Exception as e:  # noqa: BLE001
            fail("run", e)
    print(json.dumps(res), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
