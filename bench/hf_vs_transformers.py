#!/usr/bin/env python3
"""Benchmark (not a test): segtool serving a Hugging Face folder (`segtool.Segmenter(folder)`,
ONNX Runtime CPU) against what a transformers user runs on the same folder and photos:
`AutoImageProcessor` (transformers 5, torchvision backend) + onnxruntime +
`post_process_semantic_segmentation` at the photo's size.

    source "$(bash scripts/setup.sh)"; bash scripts/python_tests.sh wheel
    pip install --no-deps --force-reinstall target/wheels/segtool-*.whl
    python tests/reference/hf_processors_ref.py --out /tmp/hf            # folders + photos
    python bench/hf_vs_transformers.py --ref /tmp/hf [--cases segformer,mask2former]

What is timed is the whole call, one photo per call, as a user sees it: a uint8 HxWx3 RGB
array in, an HxW class map out. Each contender runs in its own process (one ONNX Runtime
and one thread pool per process), --rounds processes each in alternating order, the same
threads (`threads=N` for segtool, `intra_op_num_threads=N` and `torch.set_num_threads(N)`
for transformers); per photo --warmup calls then --repeats timed calls, pooled over the
rounds. Printed per case and photo: the median (ms) of each, the ratio transformers /
segtool (> 1: segtool faster), and the fraction of mask pixels on which they agree. The
CPU's name is printed with the figures: they change with the machine.
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def photos(ref):
    from PIL import Image
    folder = os.path.join(ref, "images")
    return {
        os.path.splitext(n)[0]: np.asarray(Image.open(os.path.join(folder, n)).convert("RGB"))
        for n in sorted(os.listdir(folder))
    }


def contender(who, folder, ref, threads, warmup, repeats, out):
    """One process's timings: {photo: [ms...]} and its masks in `out` (.npy)."""
    images = photos(ref)
    if who == "segtool":
        import segtool
        seg = segtool.Segmenter(folder, engine="ort", providers=["cpu"], threads=threads)

        def run(rgb):
            return np.asarray(seg.segment(rgb, color="rgb").mask)
    else:
        import onnxruntime as ort
        import torch
        from transformers import AutoImageProcessor
        from transformers.modeling_outputs import SemanticSegmenterOutput
        from types import SimpleNamespace
        torch.set_num_threads(threads)
        proc = AutoImageProcessor.from_pretrained(folder)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), so, providers=["CPUExecutionProvider"])
        names = [o.name for o in sess.get_outputs()]

        def run(rgb):
            from PIL import Image
            inputs = proc(images=Image.fromarray(rgb), return_tensors="pt")
            outs = dict(zip(names, sess.run(None, {"pixel_values": inputs["pixel_values"].numpy()})))
            if "logits" in outs:
                o = SemanticSegmenterOutput(logits=torch.from_numpy(outs["logits"]))
            else:
                o = SimpleNamespace(
                    class_queries_logits=torch.from_numpy(outs["class_queries_logits"]),
                    masks_queries_logits=torch.from_numpy(outs["masks_queries_logits"]),
                )
            return proc.post_process_semantic_segmentation(o, target_sizes=[rgb.shape[:2]])[0].numpy()
    times = {}
    for name, rgb in images.items():
        for _ in range(warmup):
            mask = run(rgb)
        np.save(os.path.join(out, f"{who}-{name}.npy"), mask.astype(np.uint8))
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            run(rgb)
            ts.append((time.perf_counter() - t0) * 1e3)
        times[name] = ts
    print(json.dumps(times))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ref", default="/tmp/hf", help="hf_processors_ref.py's --out")
    ap.add_argument("--cases", default="segformer,mask2former")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--contender", help=argparse.SUPPRESS)
    ap.add_argument("--folder", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.contender:
        contender(args.contender, args.folder, args.ref, args.threads, args.warmup, args.repeats, args.out)
        return
    import tempfile
    print(f"CPU: {cpu_model()}; {args.threads} threads; medians of {args.repeats * args.rounds} calls")
    print("| folder | photo | segtool ms | transformers ms | ratio (transformers / segtool) | masks agree |")
    print("| --- | --- | ---: | ---: | ---: | ---: |")
    for case in args.cases.split(","):
        folder = os.path.join(args.ref, case)
        pooled = {"segtool": {}, "transformers": {}}
        with tempfile.TemporaryDirectory() as out:
            for r in range(args.rounds):
                order = ["segtool", "transformers"] if r % 2 == 0 else ["transformers", "segtool"]
                for who in order:
                    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
                    res = subprocess.run(
                        [sys.executable, __file__, "--contender", who, "--folder", folder, "--ref", args.ref,
                         "--threads", str(args.threads), "--warmup", str(args.warmup),
                         "--repeats", str(args.repeats), "--out", out],
                        env=env, check=True, capture_output=True, text=True)
                    for name, ts in json.loads(res.stdout.strip().splitlines()[-1]).items():
                        pooled[who].setdefault(name, []).extend(ts)
            for name in sorted(pooled["segtool"]):
                a = np.load(os.path.join(out, f"segtool-{name}.npy"))
                b = np.load(os.path.join(out, f"transformers-{name}.npy"))
                s, t = np.median(pooled["segtool"][name]), np.median(pooled["transformers"][name])
                print(f"| {case} | {name} {a.shape[1]}x{a.shape[0]} | {s:.2f} | {t:.2f} | {t / s:.2f}x | {np.mean(a == b):.4%} |")


if __name__ == "__main__":
    main()
