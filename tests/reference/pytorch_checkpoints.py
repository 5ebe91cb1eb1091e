"""Writes PyTorch-made checkpoints for train/tests/it/import_pytorch.rs, the way users get
them: torch.save of a state dict (zip and legacy formats), a DataParallel training
checkpoint, safetensors.torch.save_file, a torchvision-named ImageNet ResNet, and broken
files. The model is the independent reference DANet (danet_ref.py), never segtool.

Usage: pytorch_checkpoints.py SPEC_JSON OUTDIR
  SPEC_JSON  a segtool model spec (the DANet to build)
Writes into OUTDIR:
  danet.pth              torch.save(model.state_dict())            (zip format)
  danet_legacy.pth       the same, _use_new_zipfile_serialization=False (PyTorch < 1.6)
  danet.pth.tar          {"state_dict": {"module." + k: v}, "epoch": 3, "best_pred": numpy
                         float, "optimizer": SGD state with momenta, "args": Namespace}
  danet_cuda.pth         state dict whose storages say "cuda:0" (saved from a GPU)
  danet.safetensors      safetensors.torch.save_file(model.state_dict())
  bad_shape.pth          state dict with head.conv5a.0.weight of shape [8, 4, 1, 1]
  resnet_tv.pth          torchvision-named basic-block ResNet [2, 2, 2, 2], width 16, with
                         fc (10 classes): conv1.weight, bn1.*, layerK.I.*, fc.*
  input.safetensors      `image` (2, 3, 64, 80)
  logits.safetensors     `fused`, `position`, `channel` of the model in eval mode on
                         `image`, computed in float64
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn as nn
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from danet_ref import DANet, ResNet, BasicBlock  # noqa: E402


def randomise(model):
    """Random everything, as a trained network has: BN affine and running statistics,
    conv biases, and non-zero attention gammas (zero ones would hide PAM and CAM)."""
    with torch.no_grad():
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if name.endswith("num_batches_tracked"):
                t.fill_(7)
            elif name.endswith("running_var"):
                t.copy_(torch.rand_like(t) + 0.5)
            elif name.endswith("running_mean") or name.endswith(".bias"):
                t.copy_(torch.randn_like(t) * 0.1)
            elif name.endswith("gamma"):
                t.fill_(0.7 if ".sa." in name else -0.4)
            elif t.dim() == 1:
                t.copy_(torch.rand_like(t) * 0.5 + 0.45)


def main():
    spec_path, out = sys.argv[1:3]
    with open(spec_path) as f:
        spec = json.load(f)
    torch.manual_seed(11)
    model = DANet(spec)
    randomise(model)
    model.eval()
    sd = model.state_dict()
    p = lambda name: os.path.join(out, name)

    torch.save(sd, p("danet.pth"))
    torch.save(sd, p("danet_legacy.pth"), _use_new_zipfile_serialization=False)
    save_file({k: v.contiguous() for k, v in sd.items()}, p("danet.safetensors"))

    saved = {k: v.clone() for k, v in sd.items()}  # sd shares storage with the model
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model(torch.randn(1, 3, 32, 32))[0].sum().backward()
    opt.step()  # momenta in the optimizer state, then put the weights back
    model.load_state_dict(saved)
    torch.save({"state_dict": {"module." + k: v for k, v in saved.items()}, "epoch": 3,
                "best_pred": np.float64(0.8123), "optimizer": opt.state_dict(),
                "args": argparse.Namespace(lr=0.01, backbone="tiny")}, p("danet.pth.tar"))

    location_tag = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(model.state_dict(), p("danet_cuda.pth"))
    finally:
        torch.serialization.location_tag = location_tag

    bad = dict(saved)
    bad["head.conv5a.0.weight"] = torch.zeros(8, 4, 1, 1)
    torch.save(bad, p("bad_shape.pth"))

    resnet = ResNet(BasicBlock, [2, 2, 2, 2], 16, 8, None)
    resnet.fc = nn.Linear(128, 10)
    randomise(resnet)
    torch.save(resnet.state_dict(), p("resnet_tv.pth"))

    image = torch.randn(2, 3, 64, 80)
    save_file({"image": image}, p("input.safetensors"))
    with torch.no_grad():
        fused, position, channel = model.double()(image.double())
    save_file({"fused": fused.float(), "position": position.float(), "channel": channel.float()},
              p("logits.safetensors"))


if __name__ == "__main__":
    main()
