"""torch.optim.SGD over the parameters and per-step gradients in a safetensors file.

Input tensors: `param.<name>` (initial values) and `grad.<step>.<name>`; parameters whose
name starts with `head.` form a second group at `--head-lr-mult` x the lr. Writes the
parameters after every step as `step.<k>.<name>`.
"""
import argparse

import torch
from safetensors.torch import load_file, save_file

ap = argparse.ArgumentParser()
ap.add_argument("inp")
ap.add_argument("out")
ap.add_argument("--lrs", required=True, help="comma-separated backbone lr per step")
ap.add_argument("--head-lr-mult", type=float, default=10.0)
ap.add_argument("--momentum", type=float, required=True)
ap.add_argument("--weight-decay", type=float, required=True)
ap.add_argument("--nesterov", action="store_true")
a = ap.parse_args()

t = load_file(a.inp)
names = sorted(k[len("param."):] for k in t if k.startswith("param."))
params = {n: torch.nn.Parameter(t["param." + n].double()) for n in names}
lrs = [float(x) for x in a.lrs.split(",")]
groups = [
    {"params": [params[n] for n in names if not n.startswith("head.")], "lr": lrs[0]},
    {"params": [params[n] for n in names if n.startswith("head.")], "lr": lrs[0] * a.head_lr_mult},
]
opt = torch.optim.SGD(groups, lr=lrs[0], momentum=a.momentum,
                      weight_decay=a.weight_decay, nesterov=a.nesterov)
out = {}
for step, lr in enumerate(lrs):
    groups_lr = [lr, lr * a.head_lr_mult]
    for g, glr in zip(opt.param_groups, groups_lr):
        g["lr"] = glr
    for n in names:
        params[n].grad = t[f"grad.{step}.{n}"].double()
    opt.step()
    for n in names:
        out[f"step.{step}.{n}"] = params[n].detach().float().contiguous()
save_file(out, a.out)
