"""mmsegmentation 1.2.2's own DANet, built from its registry, for segtool's parity tests.

Two patches, and only these: mmseg asserts mmcv < 2.2.0 (mmcv-lite 2.2.0 is the release
without compiled ops, and DANet needs none), and some of mmseg's other heads import
`mmcv.ops` (compiled CUDA/C++ ops) at module import time; a stand-in module provides
those names and raises if one is ever used. Nothing of DANet's code path is touched.

    python mmseg_ref.py checkpoint OUT_DIR --depth 50 --classes 5 --align-corners 0 [--aux 1]
        writes, from one well-conditioned random model (see well_conditioned):
        OUT_DIR/mmseg.pth          {meta: {CLASSES, PALETTE, config}, state_dict}, float32
        OUT_DIR/input.safetensors  `image` (N, 3, H, W), normalised
        OUT_DIR/logits.safetensors `fused` (EncoderDecoder.encode_decode: the logits at the
                                   input size, as predict has them before argmax) and `aux`
                                   (the FCN head, resized the same way), float64
        OUT_DIR/torch32.safetensors the same in float32 (the noise floor)
        OUT_DIR/scaled.safetensors `fused` with PAM's energies scaled by 1/sqrt(d) (mmseg's
                                   matmul_norm): what a temperature bug would give
        OUT_DIR/flipped.safetensors `fused` with the other align_corners
"""
import argparse
import os
import sys
import types

import numpy as np
import torch


def import_mmseg():
    import mmcv

    mmcv.__version__ = "2.1.0"  # mmseg 1.2.2's version assert (mmcv < 2.2.0)

    class _Unavailable:
        def __init__(self, *a, **k):
            raise RuntimeError("mmcv.ops is not available in mmcv-lite")

    def unavailable(name):  # PEP 562: `from mmcv.ops import X`
        if name.startswith("__"):
            raise AttributeError(name)
        return _Unavailable

    ops = types.ModuleType("mmcv.ops")
    ops.__getattr__ = unavailable
    sys.modules["mmcv.ops"] = ops
    import mmseg  # noqa: F401
    from mmseg.utils import register_all_modules

    register_all_modules()
    from mmseg.registry import MODELS

    return MODELS


MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


def config(depth, classes, align_corners, aux=True, test_cfg=None, base=64):
    """configs/_base_/models/danet_r50-d8.py with BN for SyncBN (one process: the same).
    `base` < 64 narrows every width by base/64 (stem, stages, heads) for cheap tests; the
    block counts, dilations and structure stay the zoo's."""
    norm_cfg = dict(type="BN", requires_grad=True)
    top = base * 32  # layer4's channels: 2048 at base 64
    cfg = dict(
        type="EncoderDecoder",
        data_preprocessor=dict(
            type="SegDataPreProcessor", mean=MEAN, std=STD, bgr_to_rgb=True, pad_val=0,
            seg_pad_val=255),
        backbone=dict(
            type="ResNetV1c", depth=depth, num_stages=4, out_indices=(0, 1, 2, 3),
            stem_channels=base, base_channels=base,
            dilations=(1, 1, 2, 4), strides=(1, 2, 1, 1), norm_cfg=norm_cfg, norm_eval=False,
            style="pytorch", contract_dilation=True),
        decode_head=dict(
            type="DAHead", in_channels=top, in_index=3, channels=top // 4, pam_channels=top // 32,
            dropout_ratio=0.1, num_classes=classes, norm_cfg=norm_cfg,
            align_corners=align_corners,
            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)),
        train_cfg=dict(),
        test_cfg=test_cfg or dict(mode="whole"),
    )
    if aux:
        cfg["auxiliary_head"] = dict(
            type="FCNHead", in_channels=top // 2, in_index=2, channels=top // 8, num_convs=1,
            concat_input=False, dropout_ratio=0.1, num_classes=classes, norm_cfg=norm_cfg,
            align_corners=align_corners,
            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=0.4))
    return cfg


def pretty(cfg):
    """The config text mmseg 0.x stores in a checkpoint's meta (`config`)."""
    from mmengine.config import Config

    return Config(dict(model=cfg)).pretty_text


def well_conditioned(model, shape, seed):
    """Random weights a parity test can trust: BN statistics recalibrated on random inputs
    (cumulative average), residual branches ending in a small BN scale, attention gammas
    non-zero (mmseg initialises them to 0, which would hide PAM and CAM), classifiers
    scaled so logits are O(1-10)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and m.out_channels == model.decode_head.num_classes:
                m.weight.normal_(0, 1.0 / m.in_channels ** 0.5, generator=g)
                m.bias.uniform_(-0.5, 0.5, generator=g)
        model.decode_head.pam.gamma.scale.fill_(0.7)
        model.decode_head.cam.gamma.scale.fill_(0.4)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.reset_running_stats()
                m.momentum = None
                if name.endswith(".bn3"):
                    # The last BN of each residual branch scales small, as in trained
                    # ResNets: with O(1) scales a random deep ResNet is chaotic and
                    # amplifies float32 rounding to ~1e-4 .. 2.4e-4
                    # relative; with these, ~1e-6, while every branch still counts.
                    m.weight.uniform_(0.05, 0.15, generator=g)
                else:
                    m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.2, 0.2, generator=g)
        model.train()
        for _ in range(3):
            model._forward(torch.randn(*shape, generator=g))
    model.eval()


def eval_logits(model, x):
    """EncoderDecoder's whole-image logits at the input size (predict before argmax)."""
    with torch.no_grad():
        metas = [dict(img_shape=tuple(x.shape[2:]), ori_shape=tuple(x.shape[2:]))] * x.shape[0]
        return model.encode_decode(x, metas)


def aux_logits(model, x):
    from mmseg.models.utils import resize

    with torch.no_grad():
        feats = model.extract_feat(x)
        out = model.auxiliary_head.forward(feats)
        return resize(out, size=x.shape[2:], mode="bilinear",
                      align_corners=model.auxiliary_head.align_corners)


def save_checkpoint(model, path, classes, palette, config_text):
    meta = dict(CLASSES=tuple(classes), PALETTE=[list(p) for p in palette], config=config_text)
    tmp = path + ".tmp"
    torch.save(dict(meta=meta, state_dict=model.state_dict()), tmp)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("what", choices=["checkpoint", "pspnet"])
    ap.add_argument("out")
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--classes", type=int, default=5)
    ap.add_argument("--align-corners", type=int, default=0)
    ap.add_argument("--aux", type=int, default=1)
    ap.add_argument("--height", type=int, default=64)
    ap.add_argument("--width", type=int, default=80)
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--base", type=int, default=64, help="stem/stage width (64: the zoo's)")
    ap.add_argument("--no-config", action="store_true",
                    help="leave the config out of the meta (the file name must tell)")
    a = ap.parse_args()
    from safetensors.torch import save_file

    torch.manual_seed(a.seed)
    torch.set_num_threads(2)
    MODELS = import_mmseg()
    align = bool(a.align_corners)
    cfg = config(a.depth, a.classes, align, bool(a.aux), base=a.base)
    if a.what == "pspnet":
        # a near miss: mmseg's PSPNet, same backbone, another decode head
        cfg["decode_head"] = dict(
            type="PSPHead", in_channels=2048, in_index=3, channels=64, pool_scales=(1, 2),
            dropout_ratio=0.1, num_classes=a.classes, norm_cfg=dict(type="BN"),
            align_corners=False)
        model = MODELS.build(cfg)
        os.makedirs(a.out, exist_ok=True)
        save_checkpoint(model, os.path.join(a.out, "pspnet.pth"), [f"c{i}" for i in range(a.classes)],
                        [(i, i, i) for i in range(a.classes)], pretty(cfg))
        return
    model = MODELS.build(cfg)
    shape = (a.batch, 3, a.height, a.width)
    well_conditioned(model, shape, a.seed)
    os.makedirs(a.out, exist_ok=True)
    classes = [f"thing{i}" for i in range(a.classes)]
    palette = [((37 * i) % 256, (91 * i) % 256, (151 * i) % 256) for i in range(a.classes)]
    save_checkpoint(model, os.path.join(a.out, "mmseg.pth"), classes, palette,
                    None if a.no_config else pretty(cfg))
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(a.seed + 1))
    out = lambda name: os.path.join(a.out, name)
    save_file({"image": x.contiguous()}, out("input.safetensors"))

    def outputs(m, x):
        r = {"fused": eval_logits(m, x)}
        if a.aux:
            r["aux"] = aux_logits(m, x)
        return {k: v.contiguous() for k, v in r.items()}

    save_file(outputs(model, x), out("torch32.safetensors"))
    # the temperature bug and the other align_corners, in float32 (they only need to differ)
    model.decode_head.pam.matmul_norm = True
    save_file({"fused": eval_logits(model, x).contiguous()}, out("scaled.safetensors"))
    model.decode_head.pam.matmul_norm = False
    model.decode_head.align_corners = not align
    model.align_corners = not align
    save_file({"fused": eval_logits(model, x).contiguous()}, out("flipped.safetensors"))
    model.decode_head.align_corners = align
    model.align_corners = align
    model.double()
    save_file(outputs(model, x.double()), out("logits.safetensors"))


if __name__ == "__main__":
    main()
