"""A Hugging Face SegFormer folder as `transformers` users export it, and the masks its
own processor gives: the reference for segtool serving such a folder.

    HF_HUB_OFFLINE=1 python segformer_ref.py --out DIR

Needs transformers 5.x (5.25.0 when written; no download, no hub access). Builds a small
random `SegformerForSemanticSegmentation` (seeded: hidden sizes 16/32/64/128, one block
per stage, 5 labels with id2label names, initializer_range 0.1 so that the argmax varies
over the image), then scales the classifier so that the logits span about 12 (near-ties
far above float32 noise). Exports it with `torch.onnx.export` (the TorchScript exporter,
opset 17): input `pixel_values` (N, 3, H, W), output `logits` (N, 5, H/4, W/4), dynamic
batch, height and width. Writes DIR/segformer/ as a user's folder: model.onnx,
config.json (`model.config.save_pretrained`, with the architectures and dtype that
`model.save_pretrained` adds) and preprocessor_config.json
(`SegformerImageProcessor(size={"height": 128, "width": 128}).save_pretrained`: resample
2 = bilinear, rescale 1/255, ImageNet mean and std).

Test images DIR/images/<name>.png (smooth random RGB fields, sizes not multiples of 4):
`up` 93x115 (both axes upscaled to 128), `down` 201x171 (both downscaled), `mixed` 77x213
(rows upscaled, columns downscaled).

For each image, the pipeline a user runs: `AutoImageProcessor.from_pretrained(DIR/segformer)`
(in transformers 5 the torchvision backend, `SegformerImageProcessor`: the uint8 image
resized by torch's native antialiased-bilinear uint8 kernel, as on an AVX2/AVX512 or
arm64 CPU, then float32 (x - 255 mean) / (255 std); `torch_aa_resize` below restates the
resize in numpy and the script checks that it reproduces the processor's input exactly;
other CPUs resize in float and round, another result, so the script refuses them),
`processor(images=img, return_tensors="pt")`, onnxruntime (CPU) on model.onnx, then
`processor.post_process_semantic_segmentation(out, target_sizes=[(h, w)],
return_segmentation_scores=True)` (logits bilinearly upsampled to the image's size,
align_corners=False, then argmax). Writes DIR/ref/<name>.npy (uint8 mask, h x w),
<name>.margin.npy (float32 gap between the top two upsampled logits per pixel: where
float32 noise may flip the argmax) and <name>.input.npy (the float32 pixel_values,
1 x 3 x 128 x 128, to check the preprocessing alone). Prints one JSON line.
"""
import argparse
import json
import os
import platform

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from transformers import (  # noqa: E402
    AutoImageProcessor,
    SegformerConfig,
    SegformerForSemanticSegmentation,
    SegformerImageProcessor,
)

LABELS = ["background", "road", "building", "vegetation", "sky"]
SIZE = 128
IMAGES = {"up": (93, 115), "down": (201, 171), "mixed": (77, 213)}


def smooth_image(rng, h, w):
    small = rng.integers(0, 256, size=(h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BILINEAR)
    noise = rng.integers(-12, 13, size=(h, w, 3))
    return Image.fromarray(np.clip(np.asarray(img, dtype=np.int32) + noise, 0, 255).astype(np.uint8))


def torch_aa_resize(img, out_h, out_w, precision=None):
    """torch's CPU kernel for F.interpolate(uint8, "bilinear", antialias=True,
    align_corners=False) (UpSampleKernel.cpp `_compute_index_ranges_int16_weights` and the
    AVX/NEON uint8 loops), img uint8 (H, W, C). Pillow's BILINEAR triangle filter (width
    scaled by the reduction factor, renormalised per output) with int16 weights: a pass
    along x when the width changes, to uint8, then along y. Per axis the precision p is the
    largest (< 22) with round(w_max * 2^p) < 2^15; each output is
    clamp((2^(p-1) + sum(w_q * v)) >> p, 0, 255). precision=22 gives Pillow's own resize."""
    x = img.astype(np.int64)
    for axis, out in ((1, out_w), (0, out_h)):
        n = x.shape[axis]
        if n == out:
            continue
        scale = n / out
        support = scale if scale >= 1.0 else 1.0
        inv = 1.0 / scale if scale >= 1.0 else 1.0
        taps, w_max = [], 0.0
        for i in range(out):
            center = scale * (i + 0.5)
            lo = max(int(center - support + 0.5), 0)  # int() truncates toward 0, as C's cast
            size = min(max(min(int(center + support + 0.5), n) - lo, 0), int(np.ceil(support)) * 2 + 1)
            ws = [max(0.0, 1.0 - abs(((j + lo) - center + 0.5) * inv)) for j in range(size)]
            total = 0.0
            for w in ws:
                total += w
            if total != 0.0:
                ws = [w / total for w in ws]
                w_max = max([w_max] + ws)
            taps.append((lo, ws))
        p = precision
        if p is None:
            p = 0
            while p < 22 and int(0.5 + w_max * (1 << (p + 1))) < (1 << 15):
                p += 1
        src = np.moveaxis(x, axis, 0)
        res = np.empty((out,) + src.shape[1:], np.int64)
        for i, (lo, ws) in enumerate(taps):
            acc = np.full(src.shape[1:], 1 << (p - 1), np.int64)
            for j, w in enumerate(ws):
                acc += int(0.5 + w * (1 << p)) * src[lo + j]
            res[i] = np.clip(acc >> p, 0, 255)
        x = np.moveaxis(res, 0, axis)
    return x.astype(np.uint8)


def normalise(u8, mean, std):
    """The processor's fused rescale and normalise: float32 (x - f32(mean) * 255) / (f32(std) * 255)."""
    m = np.asarray(mean, np.float32) * np.float32(255.0)
    s = np.asarray(std, np.float32) * np.float32(255.0)
    return ((u8.astype(np.float32) - m) / s).transpose(2, 0, 1)[None]


class Logits(torch.nn.Module):
    """The model's output object, as the tensor the exporter names."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, pixel_values):
        return self.model(pixel_values=pixel_values).logits


class Outputs:
    """What post_process_semantic_segmentation reads from a model's output."""

    def __init__(self, logits):
        self.logits = logits


def build_model(gen, target=12.0):
    config = SegformerConfig(
        depths=[1, 1, 1, 1], hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 1, 2, 4],
        mlp_ratios=[2, 2, 2, 2], decoder_hidden_size=64, num_labels=len(LABELS),
        id2label=dict(enumerate(LABELS)), label2id={n: i for i, n in enumerate(LABELS)},
        initializer_range=0.1, drop_path_rate=0.0, classifier_dropout_prob=0.0)
    model = SegformerForSemanticSegmentation(config).eval()
    with torch.no_grad():
        x = torch.nn.functional.interpolate(
            torch.randn(2, 3, 12, 12, generator=gen), size=(SIZE, SIZE), mode="bilinear")
        out = model(pixel_values=x).logits
        factor = target / float(out.max() - out.min())
        model.decode_head.classifier.weight.mul_(factor)
        model.decode_head.classifier.bias.mul_(factor)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if not (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
            or platform.machine() in ("aarch64", "arm64")):
        raise SystemExit("torchvision resizes uint8 through float on this CPU: not the reference")
    torch.manual_seed(0)
    torch.set_num_threads(2)
    gen = torch.Generator().manual_seed(0)
    rng = np.random.default_rng(0)
    folder = os.path.join(args.out, "segformer")
    ref_dir = os.path.join(args.out, "ref")
    for d in (folder, ref_dir, os.path.join(args.out, "images")):
        os.makedirs(d, exist_ok=True)

    model = build_model(gen)
    # what `model.save_pretrained` adds to config.json (the weights live in model.onnx)
    model.config.architectures = [type(model).__name__]
    model.config.dtype = torch.float32
    model.config.save_pretrained(folder)
    SegformerImageProcessor(size={"height": SIZE, "width": SIZE}).save_pretrained(folder)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(
        Logits(model).eval(), (torch.randn(1, 3, SIZE, SIZE, generator=gen),), path,
        dynamo=False, opset_version=17, input_names=["pixel_values"], output_names=["logits"],
        dynamic_axes={"pixel_values": {0: "N", 2: "H", 3: "W"}, "logits": {0: "N", 2: "h", 3: "w"}})

    processor = AutoImageProcessor.from_pretrained(folder)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    report = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "processor": type(processor).__name__, "backend": processor.backend,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
        "size": [SIZE, SIZE], "labels": LABELS, "images": {},
    }
    for name, (h, w) in IMAGES.items():
        img = smooth_image(rng, h, w)
        img.save(os.path.join(args.out, "images", f"{name}.png"))
        img = Image.open(os.path.join(args.out, "images", f"{name}.png"))
        pixel_values = processor(images=img, return_tensors="pt")["pixel_values"]
        spec = normalise(torch_aa_resize(np.asarray(img), SIZE, SIZE), processor.image_mean, processor.image_std)
        assert np.array_equal(spec, pixel_values.numpy()), f"{name}: torch_aa_resize is not the processor's resize"
        logits = session.run(["logits"], {"pixel_values": pixel_values.numpy()})[0]
        post = processor.post_process_semantic_segmentation(
            Outputs(torch.from_numpy(logits)), target_sizes=[(h, w)], return_segmentation_scores=True)[0]
        mask = post.segmentation.numpy().astype(np.uint8)
        top2 = torch.sort(post.segmentation_scores, dim=0).values[-2:].numpy()
        margin = (top2[1] - top2[0]).astype(np.float32)
        np.save(os.path.join(ref_dir, f"{name}.npy"), mask)
        np.save(os.path.join(ref_dir, f"{name}.margin.npy"), margin)
        np.save(os.path.join(ref_dir, f"{name}.input.npy"), pixel_values.numpy().astype(np.float32))
        report["images"][name] = {
            "hw": [h, w], "logits_hw": list(logits.shape[2:]),
            "logit_range": float(logits.max() - logits.min()),
            "classes": np.bincount(mask.ravel(), minlength=len(LABELS)).tolist(),
            "min_margin": float(margin.min()),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
