"""torchvision's segmentation models as their users export them, and the masks
onnxruntime-Python gives with torchvision's own preprocessing: the reference of
tests/it/foreign_models.rs.

    python torchvision_ref.py --out DIR

For each of fcn_resnet50, deeplabv3_mobilenet_v3_large (both with their auxiliary head)
and lraspp_mobilenet_v3_large: random weights (seeded, no download), batch-norm running
statistics recalibrated on random images (cumulative averages over 8 batches in train
mode), then the classifier convs scaled so that the logits span about 10 (not
He-initialised thousands, nor the 0.8 a recalibrated MobileNet head gives); then
`torch.onnx.export` (the TorchScript exporter, as mmdeploy and most deployment guides
use it) with input `input` and outputs `out` (and `aux`), dynamic batch, height and
width. Writes DIR/<model>.onnx, two RGB test images DIR/images/*.png (smooth random
colour fields, 96x128 and 80x112: sizes that are not multiples of the output stride),
and per model and image DIR/ref/<model>/<image>.npy: the argmax of `out` from
onnxruntime on torchvision's preprocessing (`SemanticSegmentation(resize_size=None)`:
to float in 0-1, ImageNet mean and std, RGB), and <image>.margin.npy, the gap between the
top two logits at each pixel (near-ties are where float32 noise may flip the argmax).
Prints one JSON line: the models, their classes, and the smallest logit range seen.
"""
import argparse
import json
import os

import numpy as np
import onnxruntime as ort
import torch
import torchvision
from PIL import Image
from torchvision.transforms._presets import SemanticSegmentation

CLASSES = 6
MODELS = {
    "fcn_resnet50": lambda: torchvision.models.segmentation.fcn_resnet50(
        weights=None, weights_backbone=None, num_classes=CLASSES, aux_loss=True),
    "deeplabv3_mobilenet_v3_large": lambda: torchvision.models.segmentation.deeplabv3_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=CLASSES, aux_loss=True),
    "lraspp_mobilenet_v3_large": lambda: torchvision.models.segmentation.lraspp_mobilenet_v3_large(
        weights=None, weights_backbone=None, num_classes=CLASSES),
}


def recalibrate(model, gen):
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            m.reset_running_stats()
            m.momentum = None  # cumulative average
    model.train()
    with torch.no_grad():
        for _ in range(8):
            model(torch.randn(4, 3, 96, 96, generator=gen))
    model.eval()


def spread_logits(model, gen, target=10.0):
    """Scales the classifier convs (those with CLASSES outputs, aux included) so that the
    logits span about `target`: argmax ties then sit far above float32 noise."""
    with torch.no_grad():
        out = model(torch.randn(2, 3, 96, 128, generator=gen))["out"]
        factor = target / float(out.max() - out.min())
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and m.out_channels == CLASSES:
                m.weight.mul_(factor)
                if m.bias is not None:
                    m.bias.mul_(factor)


def smooth_image(rng, h, w):
    small = rng.integers(0, 256, size=(h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BILINEAR)
    noise = rng.integers(-12, 13, size=(h, w, 3))
    return Image.fromarray(np.clip(np.asarray(img, dtype=np.int32) + noise, 0, 255).astype(np.uint8))


class Wrapped(torch.nn.Module):
    """The dict torchvision returns, as the tuple the exporter names."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        y = self.model(x)
        return tuple(y[k] for k in ("out", "aux") if k in y)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    images = {}
    for name, (h, w) in {"a": (96, 128), "b": (80, 112)}.items():
        img = smooth_image(rng, h, w)
        img.save(os.path.join(args.out, "images", f"{name}.png"))
        images[name] = img
    preprocess = SemanticSegmentation(resize_size=None)
    report = {"models": {}, "classes": CLASSES}
    for model_name, make in MODELS.items():
        model = make()
        recalibrate(model, gen)
        spread_logits(model, gen)
        wrapped = Wrapped(model).eval()
        outputs = ["out", "aux"] if getattr(model, "aux_classifier", None) is not None else ["out"]
        path = os.path.join(args.out, f"{model_name}.onnx")
        dims = {0: "N", 2: "H", 3: "W"}
        torch.onnx.export(
            wrapped, (torch.randn(1, 3, 96, 128),), path, dynamo=False, opset_version=17,
            input_names=["input"], output_names=outputs,
            dynamic_axes={n: dims for n in ["input", *outputs]})
        session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        ref_dir = os.path.join(args.out, "ref", model_name)
        os.makedirs(ref_dir, exist_ok=True)
        ranges = []
        for name, img in images.items():
            x = preprocess(img).unsqueeze(0).numpy()
            out = session.run(["out"], {"input": x})[0][0]
            top2 = np.sort(out, axis=0)[-2:]
            np.save(os.path.join(ref_dir, f"{name}.npy"), out.argmax(axis=0).astype(np.uint8))
            np.save(os.path.join(ref_dir, f"{name}.margin.npy"), (top2[1] - top2[0]).astype(np.float32))
            ranges.append(float(out.max() - out.min()))
        report["models"][model_name] = {"outputs": outputs, "logit_range": min(ranges)}
    print(json.dumps(report))


if __name__ == "__main__":
    main()
