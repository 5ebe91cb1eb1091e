#!/usr/bin/env python3
"""Runs segtool deployment exports (--argmax / --preprocess / --fp16) in ONNX Runtime CPU.

    check_deploy.py masks MODEL.onnx IMAGES.u8 B H W OUT.u8
        IMAGES.u8: raw uint8 [B, H, W, 3] RGB. Feeds them to MODEL (a --preprocess
        export) and writes its first output, which must be a --argmax uint8 mask
        [B, H, W], raw to OUT.u8. Prints one JSON line (output dtype/shape).
    check_deploy.py fp16 REF.onnx FP16.onnx [--sizes 40x56 67x45] [--batch 2] [--seed 0]
        Same random normalised input to both (standard float NCHW input, logits
        output); prints one JSON line per size: argmax agreement, max |logit diff|,
        max |logit| of the reference.
"""
import argparse, json, sys

import numpy as np
import onnxruntime as ort


def session(path):
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    so.log_severity_level = 3
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def masks(a):
    s = session(a.model)
    img = np.fromfile(a.images, dtype=np.uint8).reshape(a.b, a.h, a.w, 3)
    out = s.run(None, {s.get_inputs()[0].name: img})[0]
    out.tofile(a.out)
    print(json.dumps({"dtype": str(out.dtype), "shape": list(out.shape),
                      "output": s.get_outputs()[0].name}))


def fp16(a):
    ref, half = session(a.ref), session(a.fp16)
    rng = np.random.default_rng(a.seed)
    ok = True
    for size in a.sizes:
        h, w = map(int, size.split("x"))
        # Smooth, image-like normalised input (random fields, blurred by upsampling).
        low = rng.standard_normal((a.batch, 3, (h + 7) // 8, (w + 7) // 8)).astype(np.float32)
        x = np.repeat(np.repeat(low, 8, axis=2), 8, axis=3)[:, :, :h, :w]
        x = (x + 0.3 * rng.standard_normal(x.shape)).astype(np.float32)
        r = ref.run(None, {ref.get_inputs()[0].name: x})[0]
        f = half.run(None, {half.get_inputs()[0].name: x})[0]
        res = {
            "size": size,
            "out_dtype": str(f.dtype),
            "agreement": float((r.argmax(1) == f.argmax(1)).mean()),
            "max_diff": float(np.abs(r - f).max()),
            "max_logit": float(np.abs(r).max()),
            "finite": bool(np.isfinite(f).all()),
        }
        ok &= res["finite"]
        print(json.dumps(res))
    return ok


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("masks")
    m.add_argument("model"); m.add_argument("images")
    m.add_argument("b", type=int); m.add_argument("h", type=int); m.add_argument("w", type=int)
    m.add_argument("out")
    f = sub.add_parser("fp16")
    f.add_argument("ref"); f.add_argument("fp16")
    f.add_argument("--sizes", nargs="+", default=["40x56", "67x45"])
    f.add_argument("--batch", type=int, default=2)
    f.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "masks":
        masks(a)
    elif not fp16(a):
        sys.exit(1)


if __name__ == "__main__":
    main()
