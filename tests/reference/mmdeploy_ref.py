"""An mmdeploy SDK folder of mmsegmentation's own DANet, and the masks mmdeploy's own SDK
(mmdeploy_runtime.Segmentor, the C++ runtime's Python binding) gives on it: the reference
for "segtool serves an mmdeploy SDK folder as mmdeploy serves it".

    python mmdeploy_ref.py --out DIR

Needs, in the venv, besides mmsegmentation (tests/reference/mmseg_ref.py patches its two
imports): mmdeploy==1.3.1 (the converter, pure Python; installed --no-deps, it needs only
aenum of its declared dependencies for this path) and mmdeploy-runtime==1.3.1 (the SDK:
libmmdeploy with OpenCV 4.5.5 linked in, and its own onnxruntime 1.15.1; no Python
dependencies). No download, no GPU; 10-20 s on 2 cores.

1. The model: mmseg 1.2.2's registry EncoderDecoder, ResNetV1c-18 at width 16 (dilations
   1,1,2,4: output stride 8) with a DAHead (channels 32, pam_channels 4, align_corners
   False), 5 classes, random weights (seeded); PAM/CAM gammas non-zero, the last BN of each
   residual branch scaled small, BN statistics recalibrated (cumulative average) on
   normalised smooth random images like the test images, classifier bias 0, so logits
   are O(1-10) and the class map varies over each image. Saved as DIR/mmseg/danet.pth
   with its config DIR/mmseg/danet_config.py, whose test_pipeline is mmseg's
   [LoadImageFromFile, Resize(scale=(160, 96), keep_ratio=True), LoadAnnotations,
   PackSegInputs] (as in mmseg's configs, e.g. scale (2048, 512), scaled down) and whose
   data_preprocessor has ImageNet mean/std in 0-255 units and bgr_to_rgb=True.
2. The SDK folder DIR/danet_sdk/, written by mmdeploy's own converter as tools/deploy.py
   does it with configs/mmseg/segmentation_onnxruntime_dynamic.py (inlined below):
   `mmdeploy.apis.torch2onnx` (end2end.onnx: input `input` float32 [N,3,H,W], output
   `output` int64 [N,1,H,W], the argmax taken in the graph after mmseg's bilinear resize
   of the logits to the network input's size; opset 11, dynamic batch/height/width) and
   `export2SDK` (deploy.json, pipeline.json, detail.json). One patch: torch >= 2.9 exports
   with the dynamo exporter unless told otherwise, and mmdeploy 1.3.1 (which predates it)
   does not say; its call gets dynamo=False, the TorchScript exporter it was written for.
   ("Can not optimize model, please build torchscipt extension" is mmdeploy's usual
   warning with its pip wheel: the graph is left as torch wrote it.)
3. Three smooth random RGB images DIR/images/{a,b,c}.png, 97x131, 120x90 and 61x143
   (HxW: not multiples of 8 or 32, and none of the 160x96 box's aspect ratio, so
   keep_ratio scales to 96x130 (down, short side bound), 128x96 (up, short side bound)
   and 68x160 (up, long side bound)).
4. For each image, DIR/ref/<image>.npy: the mask from
   mmdeploy_runtime.Segmentor(model_path=DIR/danet_sdk, device_name='cpu') on the image
   in BGR (the SDK's input order, as cv2.imread gives it): uint8 HxW, the image's size
   (Segmentor returns int32 HxW). And DIR/ref/<image>.margin.npy, float32 HxW: the gap
   between the top two logits at each pixel (onnxruntime-Python on the graph's logits
   before its ArgMax, fed by `spec_mask`'s preprocessing, brought to the image's size the
   way the mask is): near-ties are where float32 noise may flip the argmax.
   (mmdeploy-runtime 1.3.1 predates numpy 2: the mask array it returns under numpy 2 has
   strides (0, 0); `sdk_mask` copies the SDK's buffer out correctly.)

`spec_mask` is the SDK's behaviour written out in numpy/cv2 (mmdeploy 1.3.1 csrc:
preprocess/transform/resize.cpp, normalize.cpp, image2tensor.cpp, codebase/mmseg/
segment.cpp; utils/opencv/opencv_utils.cpp): the specification segtool follows. The
script checks it against Segmentor and reports the differing pixels. With --probe N it
also reads the SDK's preprocessed input itself (`probe_preprocess`: a stand-in
end2end.onnx that encodes its input's uint8 RGB, and whether the floats are
(x - mean) * (1/std) or (x - mean) / std, into the class map) on N random images, and
reports how many pixels differ from `preprocess`'s cv2.resize.

Prints one JSON line (everything else goes to stderr): the classes, the Resize box, the
per-image sizes (original, resized), class histogram, logit range, smallest margin, and the
pixels where `spec_mask` differs from Segmentor (all, and where the margin is >= 1e-3);
with --probe, "probe": {images, pixels, resize_differs, mul_inv_std_equal, div_std_equal}.
"""
import argparse
import ctypes
import functools
import json
import os
import sys

import cv2
import numpy as np
import torch
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mmseg_ref import MEAN, STD, import_mmseg  # noqa: E402  (mmseg's two import patches)

CLASSES = 5
SCALE = (160, 96)  # mmseg's Resize scale: (w, h), i.e. (long, short) bounds with keep_ratio
IMAGES = {"a": (97, 131), "b": (120, 90), "c": (61, 143)}  # (h, w)
BASE = 16  # ResNetV1c-18 stem/stage width (64 in the zoo)

# configs/mmseg/segmentation_onnxruntime_dynamic.py of mmdeploy 1.3.1, with its bases
DEPLOY_CFG = dict(
    onnx_config=dict(
        type="onnx", export_params=True, keep_initializers_as_inputs=False, opset_version=11,
        save_file="end2end.onnx", input_names=["input"], output_names=["output"],
        input_shape=None, optimize=True,
        dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"},
                      "output": {0: "batch", 2: "height", 3: "width"}}),
    codebase_config=dict(type="mmseg", task="Segmentation", with_argmax=True),
    backend_config=dict(type="onnxruntime"),
)


def model_config():
    norm_cfg = dict(type="BN", requires_grad=True)
    top = BASE * 8  # layer4's channels (BasicBlock: expansion 1)
    data_preprocessor = dict(type="SegDataPreProcessor", mean=MEAN, std=STD, bgr_to_rgb=True,
                             pad_val=0, seg_pad_val=255)
    model = dict(
        type="EncoderDecoder", data_preprocessor=data_preprocessor,
        backbone=dict(
            type="ResNetV1c", depth=18, num_stages=4, out_indices=(0, 1, 2, 3),
            stem_channels=BASE, base_channels=BASE, dilations=(1, 1, 2, 4),
            strides=(1, 2, 1, 1), norm_cfg=norm_cfg, norm_eval=False, style="pytorch",
            contract_dilation=True),
        decode_head=dict(
            type="DAHead", in_channels=top, in_index=3, channels=top // 4,
            pam_channels=top // 32, dropout_ratio=0.1, num_classes=CLASSES,
            norm_cfg=norm_cfg, align_corners=False,
            loss_decode=dict(type="CrossEntropyLoss", use_sigmoid=False, loss_weight=1.0)),
        train_cfg=dict(), test_cfg=dict(mode="whole"))
    test_pipeline = [dict(type="LoadImageFromFile"),
                     dict(type="Resize", scale=SCALE, keep_ratio=True),
                     dict(type="LoadAnnotations"), dict(type="PackSegInputs")]
    return dict(default_scope="mmseg", model=model, data_preprocessor=data_preprocessor,
                test_pipeline=test_pipeline)


def smooth_image(rng, h, w):
    small = rng.integers(0, 256, size=(h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = Image.fromarray(small).resize((w, h), Image.BILINEAR)
    noise = rng.integers(-12, 13, size=(h, w, 3))
    return np.clip(np.asarray(img, dtype=np.int32) + noise, 0, 255).astype(np.uint8)


def well_conditioned(model, seed):
    g = torch.Generator().manual_seed(seed)
    rng = np.random.default_rng(seed + 100)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)

    def batch():
        return torch.stack([(torch.from_numpy(smooth_image(rng, 96, 128)).permute(2, 0, 1).float()
                             - mean) / std for _ in range(4)])

    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d) and m.out_channels == CLASSES:
                m.weight.normal_(0, 1.0 / m.in_channels ** 0.5, generator=g)
                m.bias.zero_()
        model.decode_head.pam.gamma.scale.fill_(0.7)  # mmseg initialises both to 0
        model.decode_head.cam.gamma.scale.fill_(0.4)
        for name, m in model.named_modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.reset_running_stats()
                m.momentum = None  # cumulative average
                if name.startswith("backbone.layer") and name.endswith(".bn2"):
                    m.weight.uniform_(0.05, 0.15, generator=g)  # residual branches end small
                else:
                    m.weight.uniform_(0.5, 1.5, generator=g)
                m.bias.uniform_(-0.2, 0.2, generator=g)
        model.train()
        for _ in range(4):
            model._forward(batch())
    model.eval()


def convert(out, seed):
    """Model, checkpoint and config in DIR/mmseg; the SDK folder by mmdeploy's converter."""
    from mmengine.config import Config

    MODELS = import_mmseg()
    cfg = Config(model_config())
    model = MODELS.build(cfg.model)
    well_conditioned(model, seed)
    mm = os.path.join(out, "mmseg")
    os.makedirs(mm, exist_ok=True)
    cfg_path, pth = os.path.join(mm, "danet_config.py"), os.path.join(mm, "danet.pth")
    cfg.dump(cfg_path)
    meta = dict(dataset_meta=dict(classes=[f"thing{i}" for i in range(CLASSES)],
                                  palette=[[(37 * i) % 256, (91 * i) % 256, (151 * i) % 256]
                                           for i in range(CLASSES)]))
    torch.save(dict(meta=meta, state_dict=model.state_dict()), pth)

    torch.onnx.export = functools.partial(torch.onnx.export, dynamo=False)
    from mmdeploy.apis import torch2onnx
    from mmdeploy.backend.sdk.export_info import export2SDK

    sdk = os.path.join(out, "danet_sdk")
    os.makedirs(sdk, exist_ok=True)
    deploy_cfg = Config(DEPLOY_CFG)
    trace_img = smooth_image(np.random.default_rng(seed + 200), *IMAGES["a"])
    torch2onnx(trace_img, sdk, "end2end.onnx", deploy_cfg, cfg_path, pth, "cpu")
    export2SDK(deploy_cfg, cfg_path, sdk, pth=pth, device="cpu")
    return sdk


# --- the specification: mmdeploy 1.3.1's SDK, CPU device, this pipeline ---

def resized_size(h, w, size):
    """transform/resize.cpp, keep_ratio: pipeline "size" [w, h] bounds the long side by the
    larger and the short side by the smaller entry; C++ doubles, int(x + 0.5)."""
    long_edge, short_edge = max(size), min(size)
    f = min(long_edge / max(h, w), short_edge / min(h, w))
    return int(h * f + 0.5), int(w * f + 0.5)


def nearest_index(src, dst):
    """cv::resize INTER_NEAREST (OpenCV 4.5.5 resizeNN): sx = min(floor(x * (1 / (dst / src))),
    src - 1), in doubles."""
    ifx = 1.0 / (dst / src)
    return np.minimum(np.floor(np.arange(dst) * ifx).astype(np.int64), src - 1)


def preprocess(rgb, size, mean, std):
    """LoadImageFromFile (uint8 BGR as given), Resize (cv::resize INTER_LINEAR on the uint8
    image, skipped when the size is unchanged), Normalize (to_rgb: channels swapped, then
    (x - mean) * (1.f / std) in float32), ImageToTensor (HWC -> 1x3xHxW). No Pad."""
    h, w = rgb.shape[:2]
    nh, nw = resized_size(h, w, size)
    bgr = np.ascontiguousarray(rgb[:, :, ::-1])
    if (nh, nw) != (h, w):
        bgr = cv2.resize(bgr, (nw, nh), interpolation=cv2.INTER_LINEAR)
    inv = np.float32(1.0) / np.asarray(std, np.float32)
    x = (bgr[:, :, ::-1].astype(np.float32) - np.asarray(mean, np.float32)) * inv
    return np.ascontiguousarray(x.transpose(2, 0, 1)[None])


def spec_mask(session, rgb, size, mean, std):
    """The network's int64 [1,1,h',w'] class map (low 32 bits, as int32) brought to the
    image's size by nearest neighbour (codebase/mmseg/segment.cpp, ResizeMask)."""
    h, w = rgb.shape[:2]
    cls = session.run(["output"], {"input": preprocess(rgb, size, mean, std)})[0][0, 0]
    cls = cls.astype(np.int32)
    return cls[nearest_index(cls.shape[0], h)[:, None], nearest_index(cls.shape[1], w)[None, :]]


def sdk_mask(segmentor, bgr):
    """Segmentor's mask, int32 HxW. mmdeploy-runtime 1.3.1's pybind11 predates numpy 2 and
    reads the dtype's item size from numpy 1's struct layout: under numpy 2 the array it
    returns has the right shape, dtype and data pointer but strides (0, 0) (every element
    reads the first). The data itself is right: copied out here while the array (which
    holds the SDK's buffer) is alive."""
    out = segmentor(bgr)
    h, w = out.shape
    assert out.dtype == np.int32, out.dtype
    if out.strides == (4 * w, 4):
        return np.array(out)
    buf = (ctypes.c_int32 * (h * w)).from_address(out.__array_interface__["data"][0])
    mask = np.frombuffer(buf, np.int32).reshape(h, w).copy()
    del out
    return mask


def probe_preprocess(out, sdk, size, mean, std, count, seed):
    """Reads the SDK's preprocessing directly: a copy of the SDK folder whose end2end.onnx
    returns, per pixel of the network input, the uint8 RGB it encodes (round(v * std +
    mean)) in bits 0-23, bit 24 set where the float input equals (x - mean) * (1/std) in
    float32, bit 25 where it equals (x - mean) / std. Segmentor's mask then carries them
    (nearest-resized, so at `nearest_index` positions). Compared with `preprocess`'s
    cv2.resize on `count` images of random sizes, half smooth, half noise."""
    import shutil

    import onnx
    from onnx import TensorProto as T
    from onnx import helper as H

    path = os.path.join(out, "probe_sdk")
    shutil.rmtree(path, ignore_errors=True)
    shutil.copytree(sdk, path)
    mean32, std32 = np.asarray(mean, np.float32), np.asarray(std, np.float32)
    c = lambda name, v: H.make_tensor(name, T.FLOAT, [1, 3, 1, 1], [float(x) for x in v])
    i = lambda name, v: H.make_tensor(name, T.INT64, [], [v])
    n = H.make_node
    nodes = [
        n("Mul", ["input", "std"], ["a"]), n("Add", ["a", "mean"], ["b"]), n("Add", ["b", "half"], ["b2"]),
        n("Floor", ["b2"], ["x"]), n("Sub", ["x", "mean"], ["xm"]),
        n("Mul", ["xm", "inv"], ["v1"]), n("Div", ["xm", "std"], ["v2"]),
        n("Equal", ["input", "v1"], ["e1"]), n("Equal", ["input", "v2"], ["e2"]),
        n("Cast", ["e1"], ["f1"], to=T.FLOAT), n("Cast", ["e2"], ["f2"], to=T.FLOAT),
        n("ReduceMin", ["f1"], ["g1"], axes=[1], keepdims=1), n("ReduceMin", ["f2"], ["g2"], axes=[1], keepdims=1),
        n("Mul", ["x", "w"], ["d"]), n("ReduceSum", ["d"], ["rgb"], axes=[1], keepdims=1),
        n("Cast", ["rgb"], ["irgb"], to=T.INT64), n("Cast", ["g1"], ["i1"], to=T.INT64),
        n("Cast", ["g2"], ["i2"], to=T.INT64), n("Mul", ["i1", "b24"], ["j1"]), n("Mul", ["i2", "b25"], ["j2"]),
        n("Add", ["irgb", "j1"], ["s1"]), n("Add", ["s1", "j2"], ["output"])]
    inits = [c("std", std32), c("mean", mean32), c("inv", np.float32(1) / std32), c("w", [1, 256, 65536]),
             H.make_tensor("half", T.FLOAT, [], [0.5]), i("b24", 1 << 24), i("b25", 1 << 25)]
    graph = H.make_graph(nodes, "probe", [H.make_tensor_value_info("input", T.FLOAT, ["n", 3, "h", "w"])],
                         [H.make_tensor_value_info("output", T.INT64, ["n", 1, "h", "w"])], inits)
    model = H.make_model(graph, opset_imports=[H.make_opsetid("", 11)])
    model.ir_version = 6
    onnx.save(model, os.path.join(path, "end2end.onnx"))

    import mmdeploy_runtime

    segmentor = mmdeploy_runtime.Segmentor(model_path=path, device_name="cpu", device_id=0)
    rng = np.random.default_rng(seed + 300)
    report = {"images": count, "pixels": 0, "resize_differs": 0, "mul_inv_std_equal": 0,
              "div_std_equal": 0}
    for k in range(count):
        h, w = (int(v) for v in rng.integers(2, 400, 2))
        rgb = smooth_image(rng, h, w) if k % 2 else rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        got = sdk_mask(segmentor, np.ascontiguousarray(rgb[:, :, ::-1])).astype(np.int64) & 0xFFFFFFFF
        got_rgb = np.stack([got & 255, (got >> 8) & 255, (got >> 16) & 255], -1)
        nh, nw = resized_size(h, w, size)
        want = cv2.resize(rgb, (nw, nh), interpolation=cv2.INTER_LINEAR) if (nh, nw) != (h, w) else rgb
        want = want[nearest_index(nh, h)[:, None], nearest_index(nw, w)[None, :]]
        report["pixels"] += h * w
        report["resize_differs"] += int((got_rgb != want).any(-1).sum())
        report["mul_inv_std_equal"] += int(((got >> 24) & 1).sum())
        report["div_std_equal"] += int(((got >> 25) & 1).sum())
    shutil.rmtree(path)
    return report


def logits_session(onnx_path):
    """end2end.onnx with the ArgMax's input (the logits at the network input's size) as
    the graph's output, for margins."""
    import onnx
    import onnxruntime as ort

    m = onnx.load(onnx_path)
    argmax = next(n for n in m.graph.node if n.op_type == "ArgMax")
    del m.graph.output[:]
    m.graph.output.append(onnx.helper.make_tensor_value_info(argmax.input[0], onnx.TensorProto.FLOAT, None))
    return ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--probe", type=int, default=0, metavar="N",
                    help="also read the SDK's preprocessing on N random images (probe_preprocess)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(2)
    out = os.path.abspath(args.out)
    # mmengine's logger and the SDK's spdlog write to stdout: keep it for the JSON line
    stdout = os.dup(1)
    os.dup2(2, 1)
    try:
        report = run(out, args.seed, args.probe)
    finally:
        sys.stdout.flush()
        os.dup2(stdout, 1)
    print(json.dumps(report))


def run(out, seed, probe):
    import onnxruntime as ort

    sdk = convert(out, seed)
    with open(os.path.join(sdk, "pipeline.json")) as f:
        transforms = json.load(f)["pipeline"]["tasks"][0]["transforms"]
    resize = next(t for t in transforms if t["type"] == "Resize")
    norm = next(t for t in transforms if t["type"] == "Normalize")
    assert resize["keep_ratio"] and norm["to_rgb"], transforms
    size, mean, std = resize["size"], norm["mean"], norm["std"]

    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    os.makedirs(os.path.join(out, "ref"), exist_ok=True)
    rng = np.random.default_rng(seed)
    images = {}
    for name, (h, w) in IMAGES.items():
        images[name] = smooth_image(rng, h, w)
        Image.fromarray(images[name]).save(os.path.join(out, "images", f"{name}.png"))

    import mmdeploy_runtime

    segmentor = mmdeploy_runtime.Segmentor(model_path=sdk, device_name="cpu", device_id=0)
    session = ort.InferenceSession(os.path.join(sdk, "end2end.onnx"), providers=["CPUExecutionProvider"])
    logits = logits_session(os.path.join(sdk, "end2end.onnx"))
    report = {"classes": CLASSES, "resize_size": size, "images": {}}
    for name, rgb in images.items():
        h, w = rgb.shape[:2]
        mask = sdk_mask(segmentor, np.ascontiguousarray(rgb[:, :, ::-1]))
        assert mask.shape == (h, w) and 0 <= mask.min() and mask.max() < CLASSES
        np.save(os.path.join(out, "ref", f"{name}.npy"), mask.astype(np.uint8))
        lg = logits.run(None, {"input": preprocess(rgb, size, mean, std)})[0][0]
        top2 = np.sort(lg, axis=0)[-2:]
        gap = top2[1] - top2[0]
        gap = gap[nearest_index(gap.shape[0], h)[:, None], nearest_index(gap.shape[1], w)[None, :]]
        np.save(os.path.join(out, "ref", f"{name}.margin.npy"), gap.astype(np.float32))
        spec = spec_mask(session, rgb, size, mean, std)
        report["images"][name] = {
            "size": [h, w], "resized": list(resized_size(h, w, size)),
            "class_pixels": np.bincount(mask.ravel(), minlength=CLASSES).tolist(),
            "logit_range": float(lg.max() - lg.min()), "min_margin": float(gap.min()),
            "spec_differs": int((spec != mask).sum()),
            "spec_differs_margin_ge_1e-3": int(((spec != mask) & (gap >= 1e-3)).sum()),
        }
    if probe:
        report["probe"] = probe_preprocess(out, sdk, size, mean, std, probe, seed)
    return report


if __name__ == "__main__":
    main()
