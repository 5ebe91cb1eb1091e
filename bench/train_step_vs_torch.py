#!/usr/bin/env python3
"""Benchmark (not a test): one DANet training iteration in segtool's trainer vs a PyTorch
eager loop, side by side in one run. Same model (ResNet-50 DANet, OS8, 19 classes),
crop 384, batch 2, 2 intra-op threads, data already in memory, the same loss (CE on the
three outputs, ignore 255) and optimiser (SGD momentum 0.9, wd 1e-4, head at 10x lr).

    source "$(bash scripts/setup.sh)"
    cargo build --release -p segtool-train --example train_step_bench
    python bench/train_step_vs_torch.py [--steps 5] [--crop 384] [--batch 2] [--threads 2]

Each engine runs in its own subprocess, one after the other (never concurrently: on a
small machine they would steal each other's cores); the step time is the median of
--steps after one warm-up. The PyTorch model is tests/reference/danet_ref.py's DANet.
"""
import argparse, json, os, subprocess, sys, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))

SPEC = {
    "backbone": {"block": "bottleneck", "layers": [3, 4, 6, 3], "width": 64,
                 "output_stride": 8, "deep_stem": False},
    "classes": [f"class{i}" for i in range(19)],
}


def child_torch(a):
    import torch
    import torch.nn.functional as F
    from danet_ref import DANet

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = DANet(SPEC).train()
    backbone = [p for n, p in model.named_parameters() if n.startswith("pretrained.")]
    head = [p for n, p in model.named_parameters() if n.startswith("head.")]
    opt = torch.optim.SGD([{"params": backbone, "lr": 0.003}, {"params": head, "lr": 0.03}],
                          lr=0.003, momentum=0.9, weight_decay=1e-4)
    x = torch.randn(a.batch, 3, a.crop, a.crop)
    y = torch.randint(0, 19, (a.batch, a.crop, a.crop))

    def step():
        opt.zero_grad()
        outs = model(x)
        loss = sum(F.cross_entropy(o, y, ignore_index=255) for o in outs)
        loss.backward()
        opt.step()
        return loss.item()

    step()  # warm-up
    times = []
    for _ in range(a.steps):
        t = time.perf_counter(); step(); times.append(time.perf_counter() - t)
    times.sort()
    print(json.dumps({"engine": "pytorch", "median_step_s": times[len(times) // 2],
                      "torch": torch.__version__}))


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{cmd[0]} failed:\n{p.stderr[-2000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--crop", type=int, default=384)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child_torch(a)
    common = ["--steps", str(a.steps), "--crop", str(a.crop), "--batch", str(a.batch),
              "--threads", str(a.threads)]
    bench = os.path.join(ROOT, "target", "release", "examples", "train_step_bench")
    if not os.path.exists(bench):
        sys.exit(f"{bench} missing: cargo build --release -p segtool-train --example train_step_bench")
    ours = run([bench, "--backbone", "resnet50", *common])
    torch_ = run([sys.executable, __file__, "--child", *common])
    print(f"DANet ResNet-50 OS8, crop {a.crop}, batch {a.batch}, {a.threads} threads, "
          f"median of {a.steps} steps")
    print(f"  segtool train step  {ours['median_step_s']:.3f} s "
          f"(forward {ours['forward_s']:.3f}, backward {ours['backward_s']:.3f}, "
          f"SGD update {ours['update_s']:.3f})")
    print(f"  PyTorch eager step  {torch_['median_step_s']:.3f} s (torch {torch_['torch']})")
    print(f"  ratio PyTorch / segtool = {torch_['median_step_s'] / ours['median_step_s']:.2f}x "
          f"(>1: segtool faster)")


if __name__ == "__main__":
    main()
