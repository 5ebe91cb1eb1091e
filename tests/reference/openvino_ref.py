"""OpenVINO's own Python API on an ONNX file: the reference of segtool's OpenVINO engine
(tests/it/parity.rs). Compiles the model for the CPU with the same properties segtool sets,
runs one float32 NCHW batch, and writes the output (raw float32) and a JSON file with its
shape, the inference precision the compiled model reports and each node's runtime
precision (the runtime model's rt_info, which segtool reads through the C API's
profiling rows instead).

    openvino_ref.py MODEL INPUT.f32 N C H W OUT --precision f32|bf16 --threads N
"""
import argparse
import json

import numpy as np
import openvino as ov

p = argparse.ArgumentParser()
p.add_argument("model")
p.add_argument("input")
p.add_argument("dims", type=int, nargs=4)
p.add_argument("out")
p.add_argument("--precision", default="f32")
p.add_argument("--threads", type=int, default=1)
a = p.parse_args()

core = ov.Core()
compiled = core.compile_model(a.model, "CPU", {
    "PERFORMANCE_HINT": "LATENCY",
    "INFERENCE_PRECISION_HINT": a.precision,
    "INFERENCE_NUM_THREADS": a.threads,
})
x = np.fromfile(a.input, dtype="<f4").reshape(a.dims)
y = compiled.create_infer_request().infer({0: x})[compiled.output(0)]
np.ascontiguousarray(y, dtype="<f4").tofile(a.out + ".f32")
nodes = {}
for op in compiled.get_runtime_model().get_ordered_ops():
    info = op.get_rt_info()
    if "runtimePrecision" in info:
        nodes[op.get_friendly_name()] = info["runtimePrecision"].astype(str)
json.dump({
    "version": ov.get_version(),
    "shape": list(y.shape),
    "precision": compiled.get_property("INFERENCE_PRECISION_HINT").to_string(),
    "nodes": nodes,
}, open(a.out + ".json", "w"))
