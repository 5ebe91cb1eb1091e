"""One training step of mmsegmentation's own DANet, the reference segtool's mmseg presets
are checked against (train/tests/it/mmseg_train_parity.rs). Shares no code with segtool.

Usage: mmseg_train_step.py CONFIG OUT_DIR [--depth 50] [--size 64] [--batch 2] [--seed 0]
                           [--quick]

CONFIG is one of mmseg's own config files (configs/danet/*.py, as installed with
mmsegmentation 1.2.2), by path or by name (`danet_r50-d8_4xb2-80k_cityscapes-512x1024`).
The model is built from mmseg's registry exactly as that config says (EncoderDecoder,
ResNetV1c, DAHead, FCNHead, the CE losses and weights), with only what a one-process CPU
test needs changed: SyncBN -> BN (what SyncBN computes on one process),
`pretrained=None`, `dropout_ratio=0` (Dropout2d masks cannot be shared across frameworks).
The optimiser and PolyLR come from the config's `optim_wrapper` and `param_scheduler`.

Writes to OUT_DIR:
- `<config name>.pth`: `{meta: {CLASSES, PALETTE}, state_dict}` of the random, well
  conditioned model (BN affine in [0.45, 0.95] with each residual branch's last BN x 1/4,
  PAM/CAM gammas 0.7 / -0.4, classifiers at std 3/sqrt(fan_in), so logits are O(1-10));
- `inputs.safetensors`: `image` (N, 3, H, W), already normalised (mmseg's data
  preprocessor is bypassed), `target` (N, H, W) as floats, 255 = ignore;
- `ref64.safetensors`: the step in float64: `loss/<key>` for every loss mmseg reports and
  `loss/total` (mmseg's `parse_losses`), `grad/<name>` per parameter, `new/<name>` a few
  parameters after one optimiser step at iteration 0, `running/<name>` every BN running
  statistic after it, `max_abs_logit/<output>`; and `noise/grad/<name>`, `noise/loss/<key>`:
  the same step of mmseg in float32 against float64 (the float32 noise floor; not with
  --quick);
- `lr.safetensors` (not with --quick): `iters` and `lr` of the config's PolyLR at a few iterations (the
  scheduler stepped once per iteration, as mmengine's IterBasedTrainLoop does).
"""
import argparse
import copy
import logging
import os
import sys

import torch

# mmseg_ref.import_mmseg: the two patches (mmseg 1.2.2's mmcv version assert, and a
# stand-in for the compiled `mmcv.ops` some of mmseg's other heads import), nothing else.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmseg_ref import import_mmseg  # noqa: E402

import_mmseg()

from mmengine.config import Config  # noqa: E402
from mmengine.optim import build_optim_wrapper  # noqa: E402
from mmengine.optim.scheduler import PolyLR  # noqa: E402
from mmengine.structures import PixelData  # noqa: E402
from mmseg.registry import MODELS  # noqa: E402
from mmseg.structures import SegDataSample  # noqa: E402
from mmseg.utils import register_all_modules  # noqa: E402
from safetensors.torch import save_file  # noqa: E402


def build(cfg, depth):
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.pop("data_preprocessor", None)
    model_cfg.pretrained = None
    model_cfg.backbone.depth = depth
    bn = dict(type="BN", requires_grad=True)
    for part in ("backbone", "decode_head", "auxiliary_head"):
        model_cfg[part].norm_cfg = bn
    for part in ("decode_head", "auxiliary_head"):
        model_cfg[part].dropout_ratio = 0.0
    model = MODELS.build(model_cfg)
    model.init_weights()
    return model


def condition(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
                n = m.num_features
                m.weight.copy_(torch.rand(n, generator=g) * 0.5 + 0.45)
                m.bias.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_mean.copy_(torch.randn(n, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
                # The last BN of each residual branch (bn3 of a Bottleneck) x 1/4.
                if name.startswith("backbone.layer") and name.endswith("bn3"):
                    m.weight.mul_(0.25)
        for name, p in model.named_parameters():
            if name.endswith("gamma.scale"):
                p.fill_(0.7 if ".pam." in name else -0.4)
            if "conv_seg" in name and name.endswith("weight"):
                p.copy_(torch.randn(p.shape, generator=g) * 3.0 / p.shape[1] ** 0.5)
            if "conv_seg" in name and name.endswith("bias"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def batch(n, size, classes, seed):
    g = torch.Generator().manual_seed(seed + 1)
    image = torch.randn(n, 3, size, size, generator=g)
    target = torch.randint(0, classes, (n, size, size), generator=g)
    ignore = torch.rand(n, size, size, generator=g) < 0.1
    target[ignore] = 255
    target[:, : size // 8, : size // 4] = 255  # an ignored block, as a padded border is
    return image, target


# Parameters whose value after the optimiser step is kept (the SGD update is the same
# elementwise rule for every tensor; these cover the backbone, both heads, BN and gammas).
UPDATED = (
    "backbone.stem.0.weight",
    "backbone.layer3.1.conv2.weight",
    "backbone.layer4.0.bn1.weight",
    "decode_head.pam.gamma.scale",
    "decode_head.cam.gamma.scale",
    "decode_head.conv_seg.bias",
    "auxiliary_head.conv_seg.weight",
)


def step(cfg, base, image, target, dtype):
    model = copy.deepcopy(base).to(dtype)
    model.train()
    samples = []
    for t in target:
        s = SegDataSample()
        s.gt_sem_seg = PixelData(data=t[None].clone())
        samples.append(s)
    optim = build_optim_wrapper(model, copy.deepcopy(cfg.optim_wrapper))
    x = image.to(dtype)
    losses = model.loss(x, samples)
    loss, _ = model.parse_losses(losses)
    optim.backward(loss)
    out = {"loss/total": loss.detach().double().reshape(1)}
    for k, v in losses.items():
        if "loss" in k:
            out[f"loss/{k}"] = v.detach().double().reshape(1)
    for name, p in model.named_parameters():
        out[f"grad/{name}"] = p.grad.detach().double().clone()
    optim.step()
    params = dict(model.named_parameters())
    for name in UPDATED:
        out[f"new/{name}"] = params[name].detach().double().clone()
    for name, b in model.named_buffers():
        if "running_" in name:
            out[f"running/{name}"] = b.detach().double().clone()
    with torch.no_grad():
        feats = model.extract_feat(x)
        for key, logits in zip(("pam_cam", "pam", "cam"), model.decode_head(feats)):
            out[f"max_abs_logit/{key}"] = logits.abs().max().double().reshape(1)
    return out


def noise_floor(ref64, ref32):
    """mmseg's own float32 error against its float64 step, per tensor: what float32
    rounding alone leaves (`noise/grad/<name>`: L2-relative; `noise/loss/<key>`: relative)."""
    out = {}
    for k, r in ref64.items():
        if k.startswith("grad/"):
            err = (ref32[k] - r).norm() / r.norm().clamp_min(1e-30)
        elif k.startswith("loss/"):
            err = (ref32[k] - r).abs() / r.abs().clamp_min(1e-30)
        else:
            continue
        out[f"noise/{k}"] = err.double().reshape(1)
    return out


def poly_lrs(cfg):
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=cfg.optim_wrapper.optimizer.lr)
    (sched_cfg,) = cfg.param_scheduler
    kw = {k: v for k, v in sched_cfg.items() if k != "type"}
    sched = PolyLR(opt, **kw)
    end = sched_cfg["end"]
    wanted = {0, 1, 2, 100, end // 4, end // 2, end - 2, end - 1}
    iters, lrs = [], []
    for it in range(end):
        if it in wanted:
            iters.append(it)
            lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return torch.tensor(iters, dtype=torch.float64), torch.tensor(lrs, dtype=torch.float64)


parser = argparse.ArgumentParser()
parser.add_argument("config")
parser.add_argument("out")
parser.add_argument("--depth", type=int, default=50)
parser.add_argument("--size", type=int, default=64)
parser.add_argument("--batch", type=int, default=2)
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--quick", action="store_true", help="float64 only: no noise floor, no PolyLR")
args = parser.parse_args()

register_all_modules()
logging.getLogger("mmengine").setLevel(logging.WARNING)  # init_weights logs every tensor
torch.manual_seed(args.seed)
config = args.config
if not os.path.exists(config):  # a bare name: mmseg's own configs/danet/<name>.py
    import mmseg

    root = os.path.join(os.path.dirname(mmseg.__file__), ".mim", "configs", "danet")
    config = os.path.join(root, config if config.endswith(".py") else config + ".py")
cfg = Config.fromfile(config)
model = build(cfg, args.depth)
condition(model, args.seed)
state = {k: v.clone() for k, v in model.state_dict().items()}
classes = cfg.model.decode_head.num_classes
os.makedirs(args.out, exist_ok=True)
stem = os.path.splitext(os.path.basename(config))[0]
meta = {
    "CLASSES": tuple(f"c{i}" for i in range(classes)),
    "PALETTE": [[i, 2 * i, 3 * i] for i in range(classes)],
}
torch.save({"meta": meta, "state_dict": state}, os.path.join(args.out, f"{stem}.pth"))
image, target = batch(args.batch, args.size, classes, args.seed)
save_file(
    {"image": image.contiguous(), "target": target.float().contiguous()},
    os.path.join(args.out, "inputs.safetensors"),
)
ref64 = step(cfg, model, image, target, torch.float64)
if not args.quick:
    ref32 = step(cfg, model, image, target, torch.float32)
    ref64.update(noise_floor(ref64, ref32))
save_file({k: v.contiguous() for k, v in ref64.items()}, os.path.join(args.out, "ref64.safetensors"))
for k in sorted(ref64):
    if k.startswith(("loss/", "max_abs_logit/", "noise/loss/")):
        print(f"{k} = {ref64[k].item():.6g}", file=sys.stderr)
if not args.quick:
    iters, lrs = poly_lrs(cfg)
    save_file({"iters": iters, "lr": lrs}, os.path.join(args.out, "lr.safetensors"))
