"""Builds the trained DANet-R18 the INT8, bf16 and QAT accuracy tables use.

Random or BN-recalibrated weights have near-ties everywhere (on a recalibrated R18, 13%
of pixels sit within 0.1 std of a tie), so agreement figures from them say little about
a trained model. This trains a DANet-R18 (output stride 8, plain 7x7 stem, from scratch:
no ImageNet weights can be downloaded) on the built-in `shapes` task at 256x256, where
layer4's 32x32 positions give the position attention real work, then exports it.

The checkpoint and its ONNX file are cached outside the clone, under
$SEGTOOL_HOME/bench/danet-r18-shapes-<hash of the settings>/, and reused while the
settings are the same. It prints the validation mIoU (segtool's own evaluation, whole
256x256 images), the iterations and the CPU time they took.

    python3 bench/build_r18.py [--segtool target/debug/segtool] [--iterations 1000]
        [--batch 4] [--size 256] [--threads 2]

Measured: see book/src/int8.md (the CPU is named there with each figure).
"""

import argparse
import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path


def config_text(a):
    return f"""# DANet-R18 (OS8) on the shapes task at {a.size}x{a.size}: bench/build_r18.py.
name = "danet-r18-shapes"
seed = 0

[model]
backbone = "resnet18"
output_stride = 8
deep_stem = false
attention = "explicit"

[data]
dataset = "shapes"
shapes_size = {a.size}
shapes_train_count = 4000
shapes_val_count = 100
workers = 1
prefetch = 4

[augment]
flip = true
base_size = {a.size}
color_jitter = 0.0
blur_prob = 0.0

[optim]
iterations = {a.iterations}
batch_size = {a.batch}
world_size = 1
accumulation = 1
# From scratch, as the demo's tiny model: 10x the published 0.003.
lr = 0.03
head_lr_mult = 10.0
momentum = 0.9
weight_decay = 1e-4
nesterov = false
poly_power = 0.9
warmup_iters = 0
loss_weights = [1.0, 1.0, 1.0]
ohem = false
amp = false
sync_bn = false
lr_scaling = "none"
lr_reference_batch = {a.batch}

[checkpoint]
every = 100
keep = 2

[eval]
every = {a.iterations}
mode = "whole"
flip = false
scales = [1.0]
batch_size = 4

[log]
every = 10
plot_every = 100
"""


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--segtool", default="target/debug/segtool")
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--size", type=int, default=256)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args()
    segtool = str(Path(a.segtool).resolve())
    text = config_text(a)
    key = hashlib.sha256(text.encode()).hexdigest()[:12]
    home = Path(os.environ.get("SEGTOOL_HOME", Path.home() / ".cache" / "segtool"))
    work = home / "bench" / f"danet-r18-shapes-{key}"
    work.mkdir(parents=True, exist_ok=True)
    done = work / "built.json"
    if done.exists():
        print(done.read_text())
        return
    (work / "config.toml").write_text(text)
    run = work / "runs" / "danet-r18-shapes"
    resume = run / "last.safetensors"
    cmd = [segtool, "train", "--threads", str(a.threads)]
    # A run cut off (the budget, a closed session) goes on from its last checkpoint.
    cmd += ["--resume", str(resume)] if resume.exists() else ["--config", "config.toml"]
    t0, cpu0 = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    print("+", " ".join(cmd), f"(in {work})", flush=True)
    subprocess.run(cmd, cwd=work, check=True)
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    onnx = work / "danet_r18.onnx"
    subprocess.run([segtool, "export", "--checkpoint", str(resume), "--onnx", str(onnx)],
                   check=True)
    miou = read_miou(run)
    built = {
        "checkpoint": str(resume),
        "onnx": str(onnx),
        "size": a.size,
        "iterations": a.iterations,
        "batch": a.batch,
        "threads": a.threads,
        "val_miou": miou,
        "wall_s_this_call": round(time.time() - t0, 1),
        "cpu_s_this_call": round(cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime, 1),
        "cpu": cpu_name(),
    }
    done.write_text(json.dumps(built, indent=2))
    print(json.dumps(built, indent=2))


def read_miou(run):
    """The last validation's mIoU from the run's metrics log."""
    for name in ("metrics.jsonl", "eval.jsonl"):
        path = run / name
        if path.exists():
            rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            for row in reversed(rows):
                for k in ("miou", "val_miou", "mIoU"):
                    if k in row:
                        return row[k]
    sys.exit(f"{run}: no validation mIoU found (metrics.jsonl / eval.jsonl)")


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()
