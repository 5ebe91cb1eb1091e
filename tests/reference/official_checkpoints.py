"""Writes DANet checkpoints in the official format, for tests/it/import_official.rs: what
DANet v0.5.0's training writes (a `.pth.tar` with `epoch`, `state_dict`, `optimizer`,
`best_pred`; DataParallel's `module.` prefixes; parameter names `pretrained.*` and
`head.*`; the ResNet's unused `pretrained.fc.*` classifier). The model is the independent
reference DANet (danet_ref.py), never segtool.

Usage: official_checkpoints.py OUTDIR
For each case NAME of CASES, writes into OUTDIR:
  NAME.pth.tar              the checkpoint
  NAME.input.safetensors    `image` (1, 3, H, W) float32
  NAME.logits.safetensors   `fused`, `position`, `channel` in eval mode, float64
  NAME.torch32.safetensors  the same outputs from PyTorch in float32 (the noise floor)
  NAME.scaled.safetensors   `fused` of the same weights with PAM's and CAM's energies
                            divided by sqrt(d) (a temperature bug), float64
and cases.json: each case's architecture, for the test to check the imported spec.

Weights are well conditioned, as a trained network's: random convs, BN affine parameters
and conv biases, then BN running statistics recalibrated on random inputs (train mode,
momentum None: the cumulative average over the batches), residual branches ending in a
small BN scale, attention gammas non-zero, so that logits are O(1-10) and float32 rounding
stays far below the tests' tolerance. Widths are reduced (16: layer4 gives 512 channels) to keep the
tests cheap; block counts are the real ones.
"""
import copy
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from danet_ref import CAM, DANet, PAM  # noqa: E402

CASES = {
    # The released DANet101's layout: ResNet-101, OS8, multi-grid (4, 8, 16), 7x7 stem.
    "r101_os8_mg": dict(layers=[3, 4, 23, 3], output_stride=8, multi_grid=[4, 8, 16],
                        deep_stem=False, classes=19, size=(64, 64), seed=1),
    "r50_os8": dict(layers=[3, 4, 6, 3], output_stride=8, multi_grid=None,
                    deep_stem=False, classes=21, size=(64, 80), seed=2),
    "r50_deep_os16": dict(layers=[3, 4, 6, 3], output_stride=16, multi_grid=None,
                          deep_stem=True, classes=7, size=(96, 96), seed=3),
}
WIDTH = 16


def spec_of(case):
    return {
        "backbone": {"block": "bottleneck", "layers": case["layers"], "width": WIDTH,
                     "output_stride": case["output_stride"], "multi_grid": case["multi_grid"],
                     "deep_stem": case["deep_stem"]},
        "classes": [f"c{i}" for i in range(case["classes"])],
    }


def randomise(model):
    with torch.no_grad():
        for name, t in model.named_parameters():
            if name.endswith("gamma"):
                t.fill_(0.8 if ".sa." in name else 0.5)
            elif name.endswith(".bn3.weight"):
                # The last BN of each residual branch scales small, as in trained ResNets
                # (torchvision's bn3 weights are mostly 0.0-0.3). With O(1) scales a random
                # 33-block ResNet is chaotic: it amplifies float32 rounding ~50x, to a
                # 2e-4 .. 4e-4 relative floor (PyTorch fp32 against fp64); with these,
                # 3e-6 .. 6e-6, while every branch still moves the logits by percents.
                t.copy_(torch.rand_like(t) * 0.1 + 0.05)
            elif t.dim() == 1 and name.endswith(".weight"):  # other BN scales
                t.copy_(torch.rand_like(t) * 0.5 + 0.5)
            elif t.dim() == 1:  # BN shift, conv bias
                t.copy_(torch.randn_like(t) * 0.1)
            elif name.startswith("head.conv6") or name.startswith("head.conv7") or \
                    name.startswith("head.conv8"):
                # Classifiers at the scale training gives them: logits of a few units.
                t.normal_(0, 2.0 / math.sqrt(t.shape[1]))
            # other conv weights keep PyTorch's (random) default init


def recalibrate(model, size, batches=4):
    """BN running statistics = the cumulative average of batch statistics on random
    inputs, so every BN normalises its input as in a trained network."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None
    model.train()
    for m in model.modules():
        if isinstance(m, nn.Dropout2d):
            m.eval()
    with torch.no_grad():
        for _ in range(batches):
            model(torch.randn(2, 3, *size, dtype=torch.float64))
    model.eval()


class ScaledPAM(PAM):
    """PAM with the 1/sqrt(d) DANet does not have."""

    def forward(self, x):
        b, c, h, w = x.size()
        q = self.query_conv(x).view(b, -1, w * h).permute(0, 2, 1)
        k = self.key_conv(x).view(b, -1, w * h)
        attention = torch.softmax(torch.bmm(q, k) / math.sqrt(q.shape[-1]), dim=-1)
        v = self.value_conv(x).view(b, -1, w * h)
        out = torch.bmm(v, attention.permute(0, 2, 1)).view(b, c, h, w)
        return self.gamma * out + x


class ScaledCAM(CAM):
    def forward(self, x):
        b, c, h, w = x.size()
        q = x.view(b, c, -1)
        energy = torch.bmm(q, q.permute(0, 2, 1))
        energy_new = torch.max(energy, -1, keepdim=True)[0].expand_as(energy) - energy
        attention = torch.softmax(energy_new / math.sqrt(h * w), dim=-1)
        out = torch.bmm(attention, q).view(b, c, h, w)
        return self.gamma * out + x


def write_case(out, name, case):
    torch.manual_seed(case["seed"])
    spec = spec_of(case)
    model = DANet(spec).double()
    randomise(model)
    recalibrate(model, case["size"])
    # Files hold float32, as the released ones do; the reference runs on exactly those.
    sd = {k: v.float() if v.is_floating_point() else v for k, v in model.state_dict().items()}
    model.load_state_dict({k: v.double() if v.is_floating_point() else v for k, v in sd.items()})

    in_channels = WIDTH * 8 * 4
    fc = nn.Linear(in_channels, 1000)
    state = {"module." + k: v for k, v in sd.items()}
    state["module.pretrained.fc.weight"] = fc.weight.detach().clone()
    state["module.pretrained.fc.bias"] = fc.bias.detach().clone()
    optimizer = torch.optim.SGD(list(model.parameters()), lr=0.003, momentum=0.9)
    torch.save({"epoch": 240, "state_dict": state, "optimizer": optimizer.state_dict(),
                "best_pred": np.float64(0.7993)}, os.path.join(out, f"{name}.pth.tar"))

    image = torch.randn(1, 3, *case["size"])
    save_file({"image": image}, os.path.join(out, f"{name}.input.safetensors"))
    with torch.no_grad():
        fused, position, channel = model(image.double())
        save_file({"fused": fused.contiguous(), "position": position.contiguous(),
                   "channel": channel.contiguous()},
                  os.path.join(out, f"{name}.logits.safetensors"))
        # PyTorch's own float32 run: the noise floor any float32 implementation has.
        outs = copy.deepcopy(model).float()(image)
        save_file({k: o.contiguous() for k, o in zip(("fused", "position", "channel"), outs)},
                  os.path.join(out, f"{name}.torch32.safetensors"))
        scaled = model.head
        sa, sc = ScaledPAM(scaled.sa.query_conv.in_channels).double(), ScaledCAM().double()
        sa.load_state_dict(scaled.sa.state_dict())
        sc.load_state_dict(scaled.sc.state_dict())
        scaled.sa, scaled.sc = sa, sc
        save_file({"fused": model(image.double())[0].contiguous()},
                  os.path.join(out, f"{name}.scaled.safetensors"))


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(2)
    for name, case in CASES.items():
        write_case(out, name, case)
    with open(os.path.join(out, "cases.json"), "w") as f:
        json.dump({n: {**c, "width": WIDTH} for n, c in CASES.items()}, f, indent=1)


if __name__ == "__main__":
    main()
