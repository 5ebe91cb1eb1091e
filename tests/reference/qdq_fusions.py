#!/usr/bin/env python3
"""What ONNX Runtime's CPU graph optimiser makes of QDQ files, against onnxruntime's own
quantiser on the same fp32 model and images.

    qdq_fusions.py FP32.onnx CALIB_DIR VAL_DIR OURS.onnx [OURS2.onnx ...]

Quantises FP32.onnx with `onnxruntime.quantization.quantize_static` twice: its defaults
(QDQ, int8 activations and weights, per channel, MinMax) and the configuration that ran
fastest on a DANet-R18 (uint8 asymmetric activations, Conv/Add/Relu/MaxPool only,
attention and logits left float). For every file, including ours, prints JSON: the op
counts of ORT's optimised graph (ORT_ENABLE_ALL, CPU; domains dropped: QLinearConv,
QLinearAdd, float Conv, Relu, Add...) and the argmax agreement with fp32 on VAL_DIR.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model_input import normalise  # noqa: E402


def images(folder):
    return sorted(p for p in Path(folder).iterdir() if p.suffix.lower() == ".png")


class Reader(CalibrationDataReader):
    def __init__(self, xs, name):
        self.it = iter([{name: x} for x in xs])

    def get_next(self):
        return next(self.it, None)


def optimised_ops(path, work):
    out = os.path.join(work, Path(path).stem + ".opt.onnx")
    so = ort.SessionOptions()
    so.optimized_model_filepath = out
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    counts = {}
    for n in onnx.load(out, load_external_data=False).graph.node:
        counts[n.op_type] = counts.get(n.op_type, 0) + 1
    return counts


def decisions(path, xs):
    s = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = s.get_inputs()[0].name
    return [s.run(None, {name: x})[0].argmax(axis=1) for x in xs]


def main():
    fp32, calib_dir, val_dir, *ours = sys.argv[1:]
    model = onnx.load(fp32, load_external_data=False)
    spec = json.loads({p.key: p.value for p in model.metadata_props}["segtool.spec"])
    name = model.graph.input[0].name
    calib = [normalise(p, spec) for p in images(calib_dir)]
    val = [normalise(p, spec) for p in images(val_dir)]
    work = tempfile.mkdtemp(prefix="qdq-fusions-")
    theirs = {
        "quantize_static default": dict(),
        "quantize_static uint8 CNN ops": dict(
            activation_type=QuantType.QUInt8,
            op_types_to_quantize=["Conv", "Add", "Relu", "MaxPool"],
            extra_options={"ActivationSymmetric": False, "WeightSymmetric": True},
        ),
    }
    files = {}
    for label, extra in theirs.items():
        out = os.path.join(work, label.replace(" ", "_") + ".onnx")
        quantize_static(fp32, out, Reader(calib, name), quant_format=QuantFormat.QDQ,
                        per_channel=True, weight_type=QuantType.QInt8, **extra)
        files[label] = out
    for p in ours:
        files[p] = p
    reference = decisions(fp32, val)
    report = {}
    for label, path in files.items():
        got = decisions(path, val)
        same = sum(int((a == b).sum()) for a, b in zip(got, reference))
        total = sum(a.size for a in reference)
        report[label] = {"ops": optimised_ops(path, work), "agreement": same / total}
    print(json.dumps(report, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
