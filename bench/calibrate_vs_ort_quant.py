#!/usr/bin/env python3
"""`segtool calibrate` vs onnxruntime.quantization.quantize_static on the same model and
images: argmax agreement with fp32 and ONNX Runtime CPU latency of fp32, segtool's int8
and ORT's int8 (QDQ, symmetric int8 activations and weights, weights per channel), for
the MinMax and Entropy calibrators, and how many Convs ONNX Runtime's optimiser turned
into QLinearConv (int8 kernels) vs left float (from its optimised-model dump).

A model big enough for int8 to matter: ResNet-18 DANet at 256x512, random weights (see
build_model in bench/infer_vs_python_ort.py: danet_ref.py -> segtool import -> export).

    source "$(bash scripts/setup.sh)"
    $SEGTOOL_PYTHON bench/calibrate_vs_ort_quant.py --model m.onnx \
        --calib-images data/images/train --eval-images data/images/val [--samples 16]

Both quantisers see the same calibration images, preprocessed the same way (the spec's
mean/std from the model's metadata, as segtool's runtime does). segtool is taken from
target/release or target/debug unless --segtool is given.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                      QuantType, quantize_static)

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))
from model_input import normalise  # noqa: E402


def spec_of(model_path):
    m = onnx.load(str(model_path), load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    return json.loads(meta["segtool.spec"])


def images_in(folder):
    exts = {".png", ".jpg", ".jpeg", ".bmp"}
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() in exts)


class Reader(CalibrationDataReader):
    def __init__(self, files, spec, input_name):
        self.it = iter([{input_name: normalise(f, spec)} for f in files])

    def get_next(self):
        return next(self.it, None)


def session(path, threads):
    so = ort.SessionOptions()
    if threads:
        so.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def fused_ops(path):
    """Op counts of ONNX Runtime's optimised graph (CPU, all optimisations): how many
    Convs became QLinearConv (int8 kernels) and how many stayed float."""
    out = Path(tempfile.mkdtemp(prefix="calib-opt-")) / "opt.onnx"
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(out)
    so.log_severity_level = 3
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    ops = [n.op_type for n in onnx.load(str(out), load_external_data=False).graph.node]
    return {k: ops.count(k) for k in ("QLinearConv", "ConvInteger", "Conv", "FusedConv")}


def predict(sess, xs):
    name = sess.get_inputs()[0].name
    return [sess.run(None, {name: x})[0].argmax(axis=1) for x in xs]


def latency_ms(sess, x, runs):
    name = sess.get_inputs()[0].name
    for _ in range(3):
        sess.run(None, {name: x})
    t = []
    for _ in range(runs):
        s = time.perf_counter()
        sess.run(None, {name: x})
        t.append((time.perf_counter() - s) * 1e3)
    return float(np.median(t))


def find_segtool(explicit):
    if explicit:
        return explicit
    for profile in ["release", "debug"]:
        p = ROOT / "target" / profile / "segtool"
        if p.exists():
            return str(p)
    sys.exit("segtool binary not found: cargo build --bin segtool, or pass --segtool")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--calib-images", required=True)
    ap.add_argument("--eval-images", required=True)
    ap.add_argument("--samples", type=int, default=16)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--segtool")
    ap.add_argument("--out", help="JSON results")
    args = ap.parse_args()

    segtool = find_segtool(args.segtool)
    spec = spec_of(args.model)
    calib = images_in(args.calib_images)[: args.samples]
    evals = [normalise(f, spec) for f in images_in(args.eval_images)]
    input_name = onnx.load(args.model).graph.input[0].name
    tmp = Path(tempfile.mkdtemp(prefix="calib-bench-"))
    sizes = {}
    models = {"fp32": Path(args.model)}
    for method, ort_method in [("minmax", CalibrationMethod.MinMax), ("entropy", CalibrationMethod.Entropy)]:
        ours = tmp / f"segtool.{method}.onnx"
        t = time.perf_counter()
        subprocess.run([segtool, "calibrate", "--model", args.model, "--images", args.calib_images,
                        "--method", method, "--samples", str(args.samples), "--per-channel",
                        "-o", str(ours), "--quiet", "--latency-runs", "0", "--report-samples", "1"],
                       check=True, stdout=subprocess.DEVNULL)
        t_ours = time.perf_counter() - t
        theirs = tmp / f"ort.{method}.onnx"
        t = time.perf_counter()
        quantize_static(args.model, str(theirs), Reader(calib, spec, input_name),
                        quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                        calibrate_method=ort_method,
                        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
        t_theirs = time.perf_counter() - t
        models[f"segtool-{method}"] = ours
        models[f"ort-{method}"] = theirs
        sizes[f"segtool-{method}"] = t_ours
        sizes[f"ort-{method}"] = t_theirs

    ref = predict(session(args.model, args.threads), evals)
    rows = []
    for name, path in models.items():
        sess = session(path, args.threads)
        pred = predict(sess, evals)
        agree = float(np.mean(np.concatenate([(a == b).ravel() for a, b in zip(pred, ref)])))
        rows.append({
            "model": name,
            "agreement": agree,
            "latency_ms": latency_ms(sess, evals[0], args.runs),
            "bytes": os.path.getsize(path),
            "calibration_s": sizes.get(name),
            "ops": fused_ops(path),
        })
    shape = "x".join(map(str, evals[0].shape))
    print(f"{len(calib)} calibration images, {len(evals)} eval images, input {shape}, ORT {ort.__version__} CPU")
    base = rows[0]["latency_ms"]
    print(f"{'model':<18} {'agreement':>10} {'latency ms':>11} {'speedup':>8} {'bytes':>10} {'calib s':>8}"
          f"  QLinearConv/float Conv")
    for r in rows:
        cs = "" if r["calibration_s"] is None else f"{r['calibration_s']:.2f}"
        o = r["ops"]
        print(f"{r['model']:<18} {r['agreement'] * 100:9.2f}% {r['latency_ms']:11.3f} "
              f"{base / r['latency_ms']:7.2f}x {r['bytes']:10d} {cs:>8}  "
              f"{o['QLinearConv'] + o['ConvInteger']}/{o['Conv'] + o['FusedConv']}")
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
