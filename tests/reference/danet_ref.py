"""Independent PyTorch DANet, written from shared/DESIGN.md (DANet v0.5.0), used as the
reference our tch model is checked against. It shares no code with segtool: it reads
only the checkpoint (safetensors + spec JSON) and an input tensor.

Usage: danet_ref.py CHECKPOINT INPUTS OUTPUT [--train] [--grad] [--freeze-bn]
  INPUTS  safetensors with `image` (N,3,H,W) and, for --grad, `target` (N,H,W) class
          indices stored as floats (255 = ignore)
  OUTPUT  safetensors written with `fused`, `position`, `channel`; with --grad also
          `loss` and every parameter's gradient under its state-dict name
          (`pretrained.conv1.weight`, ...), and with --train the BN running statistics
          after the forward under `running/<name>`.

--train: BN uses batch statistics (and updates its running statistics); Dropout2d stays
off on both sides so outputs are deterministic. --grad: loss = sum of the cross-entropy
(mean over non-ignored pixels, ignore 255) of the three outputs, back-propagated.
--freeze-bn: the backbone's BN runs on running statistics and its affine parameters do
not require grad (mmsegmentation's norm_eval + frozen affine), so they get no gradient.
"""
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file, save_file


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride, dilation, previous_dilation, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, dilation, dilation, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, previous_dilation, previous_dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        residual = self.downsample(x) if self.downsample is not None else x
        return F.relu(out + residual)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride, dilation, previous_dilation, downsample):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, dilation, dilation, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.downsample = downsample

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        residual = self.downsample(x) if self.downsample is not None else x
        return F.relu(out + residual)


class ResNet(nn.Module):
    """DANet's dilated ResNet (encoding.models.backbone.resnet, v0.5.0)."""

    def __init__(self, block, layers, width, output_stride, multi_grid, deep_stem=False):
        super().__init__()
        # PyTorch-Encoding's deep_base: three 3x3 convs, the stem ends at 2 * width.
        self.inplanes = 2 * width if deep_stem else width
        if deep_stem:
            self.conv1 = nn.Sequential(
                nn.Conv2d(3, width, 3, 2, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                nn.Conv2d(width, 2 * width, 3, 1, 1, bias=False))
        else:
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        if output_stride == 8:
            self.layer3 = self._make_layer(block, width * 4, layers[2], stride=1, dilation=2)
            self.layer4 = self._make_layer(block, width * 8, layers[3], stride=1, dilation=4,
                                           multi_grid=multi_grid)
        else:
            self.layer3 = self._make_layer(block, width * 4, layers[2], stride=2)
            self.layer4 = self._make_layer(block, width * 8, layers[3], stride=1, dilation=2,
                                           multi_grid=multi_grid)

    def _make_layer(self, block, planes, blocks, stride=1, dilation=1, multi_grid=None):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        if multi_grid:
            first = multi_grid[0]
        else:
            first = 1 if dilation in (1, 2) else 2
        layers = [block(self.inplanes, planes, stride, first, dilation, downsample)]
        self.inplanes = planes * block.expansion
        for i in range(1, blocks):
            d = multi_grid[i] if multi_grid else dilation
            layers.append(block(self.inplanes, planes, 1, d, dilation, None))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))


class PAM(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.query_conv = nn.Conv2d(dim, dim // 8, 1)
        self.key_conv = nn.Conv2d(dim, dim // 8, 1)
        self.value_conv = nn.Conv2d(dim, dim, 1)
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        b, c, h, w = x.size()
        q = self.query_conv(x).view(b, -1, w * h).permute(0, 2, 1)
        k = self.key_conv(x).view(b, -1, w * h)
        attention = torch.softmax(torch.bmm(q, k), dim=-1)
        v = self.value_conv(x).view(b, -1, w * h)
        out = torch.bmm(v, attention.permute(0, 2, 1)).view(b, c, h, w)
        return self.gamma * out + x


class CAM(nn.Module):
    def __init__(self):
        super().__init__()
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        b, c, h, w = x.size()
        q = x.view(b, c, -1)
        energy = torch.bmm(q, x.view(b, c, -1).permute(0, 2, 1))
        energy_new = torch.max(energy, -1, keepdim=True)[0].expand_as(energy) - energy
        attention = torch.softmax(energy_new, dim=-1)
        out = torch.bmm(attention, x.view(b, c, -1)).view(b, c, h, w)
        return self.gamma * out + x


def conv_bn_relu(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class DANetHead(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        inter = in_channels // 4
        self.conv5a = conv_bn_relu(in_channels, inter)
        self.conv5c = conv_bn_relu(in_channels, inter)
        self.sa = PAM(inter)
        self.sc = CAM()
        self.conv51 = conv_bn_relu(inter, inter)
        self.conv52 = conv_bn_relu(inter, inter)
        self.conv6 = nn.Sequential(nn.Dropout2d(0.1, False), nn.Conv2d(inter, out_channels, 1))
        self.conv7 = nn.Sequential(nn.Dropout2d(0.1, False), nn.Conv2d(inter, out_channels, 1))
        self.conv8 = nn.Sequential(nn.Dropout2d(0.1, False), nn.Conv2d(inter, out_channels, 1))

    def forward(self, x):
        sa_conv = self.conv51(self.sa(self.conv5a(x)))
        sc_conv = self.conv52(self.sc(self.conv5c(x)))
        return self.conv8(sa_conv + sc_conv), self.conv6(sa_conv), self.conv7(sc_conv)


class DANet(nn.Module):
    def __init__(self, spec):
        super().__init__()
        bb = spec["backbone"]
        block = BasicBlock if bb["block"] == "basic" else Bottleneck
        self.pretrained = ResNet(block, bb["layers"], bb["width"], bb["output_stride"],
                                 bb.get("multi_grid"), bb.get("deep_stem", False))
        in_channels = bb["width"] * 8 * block.expansion
        self.head = DANetHead(in_channels, len(spec["classes"]))

    def forward(self, x):
        size = x.shape[2:]
        outs = self.head(self.pretrained(x))
        return [F.interpolate(o, size, mode="bilinear", align_corners=True) for o in outs]


def main():
    ckpt, inputs, output = sys.argv[1:4]
    train = "--train" in sys.argv
    grad = "--grad" in sys.argv
    freeze_bn = "--freeze-bn" in sys.argv
    with safe_open(ckpt, "pt") as f:
        spec = json.loads(f.metadata()["segtool.spec"])
    torch.manual_seed(0)
    model = DANet(spec).double()
    state = {k: v.double() if v.is_floating_point() else v for k, v in load_file(ckpt).items()}
    model.load_state_dict(state, strict=True)
    model.train(train)
    if train:  # dropout off, BN in batch-statistics mode
        for m in model.modules():
            if isinstance(m, nn.Dropout2d):
                m.eval()
    if freeze_bn:
        for m in model.pretrained.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()
                for p in m.parameters():
                    p.requires_grad_(False)
    tensors = load_file(inputs)
    x = tensors["image"].double()
    with torch.set_grad_enabled(grad):
        fused, position, channel = model(x)
    result = {"fused": fused, "position": position, "channel": channel}
    if grad:
        target = tensors["target"].long()
        loss = sum(F.cross_entropy(o, target, ignore_index=255) for o in (fused, position, channel))
        loss.backward()
        result["loss"] = loss.reshape(1)
        for name, p in model.named_parameters():
            if p.grad is not None:
                result[name] = p.grad
    if train:
        for name, b in model.named_buffers():
            if b.is_floating_point():
                result["running/" + name] = b
    save_file({k: v.detach().float().contiguous() for k, v in result.items()}, output)


if __name__ == "__main__":
    main()
