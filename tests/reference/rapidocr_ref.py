"""rapidocr-onnxruntime's PP-OCRv4 text detector on a real photo, and the binary text
mask that rapidocr's own preprocessing and threshold give: the reference for running
that detector in segtool with a model card (scale 1/255, mean and std 0.5, BGR, short
side resized to 736 and each side snapped to a multiple of 32, threshold 0.3).

    python rapidocr_ref.py --out DIR

Needs rapidocr-onnxruntime==1.4.4 (installed with --no-deps, plus opencv-python,
pyclipper, shapely, six, PyYAML, tqdm to import it), matplotlib and torch; downloads
nothing. The model is the one the wheel ships, rapidocr_onnxruntime/models/
ch_PP-OCRv4_det_infer.onnx (input `x` [N,3,H,W] float32, output `sigmoid_0.tmp_0`
[N,1,H,W]: the text probability at the input's size), and the photo is matplotlib's
sample `grace_hopper.jpg` (512 wide, 600 high; her name tag "COMO HOPPER" is text the
detector finds).

Writes
  DIR/ppocr_det.onnx            a copy of the shipped model, byte for byte;
  DIR/images/grace_hopper.png   the photo decoded once by Pillow, as RGB PNG, so that
                                segtool and this script see identical pixels;
  DIR/ref/grace_hopper.resized.npy  rapidocr's own mask, uint8 0/1 at the network's
                                size [H',W']: `pred > thresh` as DBPostProcess does it;
  DIR/ref/grace_hopper.npy      the mask at the image's size [h,w], uint8 0/1: the
                                probability map upsampled with
                                torch.nn.functional.interpolate(bilinear,
                                align_corners=False, no antialias), then `> thresh`;
  DIR/ref/grace_hopper.margin.npy   |upsampled probability - thresh| per pixel, float32
                                (near-ties are where float32 noise may flip the mask).

Everything rapidocr does is rapidocr's own code, called directly: its config.yaml
(read_yaml, update_model_path), LoadImage (PIL RGB -> BGR with cv2.cvtColor, as
RapidOCR.__call__ reads a PIL image), TextDetector.get_preprocess -> DetPreProcess
(cv2.resize INTER_LINEAR of the uint8 BGR image, (x*(1/255) - mean)/std, HWC -> NCHW
float32), TextDetector.infer (its OrtInferSession) and DBPostProcess.thresh. The steps of
RapidOCR.__call__ before detection (shrink if the long side > max_side_len 2000, grow if
the short side < min_side_len 30, letterbox if h <= min_height 30 or w/h > 8) are
checked to leave this photo untouched. Prints one JSON line: image and resized sizes,
the threshold, the fraction of text pixels and how many lie within 1e-4 of it.
"""
import argparse
import json
import os
import shutil

import matplotlib.cbook
import numpy as np
import rapidocr_onnxruntime
import torch
from PIL import Image
from rapidocr_onnxruntime.ch_ppocr_det import TextDetector
from rapidocr_onnxruntime.utils import LoadImage, read_yaml, update_model_path

PHOTOS = {"grace_hopper": "grace_hopper.jpg"}  # name -> matplotlib sample_data file


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.set_num_threads(2)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    os.makedirs(os.path.join(args.out, "ref"), exist_ok=True)

    root = os.path.dirname(rapidocr_onnxruntime.__file__)
    config = update_model_path(read_yaml(os.path.join(root, "config.yaml")))
    det_cfg, glob = config["Det"], config["Global"]
    shutil.copyfile(det_cfg["model_path"], os.path.join(args.out, "ppocr_det.onnx"))
    detector = TextDetector(det_cfg)
    thresh = detector.postprocess_op.thresh
    load = LoadImage()

    report = {
        "model": os.path.basename(det_cfg["model_path"]),
        "limit_side_len": det_cfg["limit_side_len"], "limit_type": det_cfg["limit_type"],
        "mean": det_cfg["mean"], "std": det_cfg["std"], "thresh": thresh, "images": {},
    }
    for name, sample in PHOTOS.items():
        path = matplotlib.cbook.get_sample_data(sample, asfileobj=False)
        rgb = Image.open(path).convert("RGB")
        png = os.path.join(args.out, "images", f"{name}.png")
        rgb.save(png)
        img = load(Image.open(png))  # BGR uint8, exactly as RapidOCR reads a PIL image
        assert np.array_equal(img[..., ::-1], np.asarray(rgb))
        h, w = img.shape[:2]
        # RapidOCR.__call__'s own steps before detection must not touch this photo.
        assert max(h, w) <= glob["max_side_len"] and min(h, w) >= glob["min_side_len"]
        assert h > glob["min_height"] and w / h <= glob["width_height_ratio"]

        pre = detector.get_preprocess(max(h, w))
        x = pre(img)  # [1,3,H',W'] float32, BGR
        prob = detector.infer(x)[0]  # [1,1,H',W']
        assert prob.shape == (1, 1) + x.shape[2:], prob.shape
        resized = (prob[:, 0, :, :] > thresh)[0].astype(np.uint8)  # DBPostProcess's
        up = torch.nn.functional.interpolate(
            torch.from_numpy(prob), size=(h, w), mode="bilinear",
            align_corners=False)[0, 0].numpy()
        mask = (up > thresh).astype(np.uint8)
        margin = np.abs(up.astype(np.float64) - thresh).astype(np.float32)

        ref = os.path.join(args.out, "ref", name)
        np.save(ref + ".npy", mask)
        np.save(ref + ".resized.npy", resized)
        np.save(ref + ".margin.npy", margin)
        report["images"][name] = {
            "source": sample, "size_hw": [h, w], "resized_hw": list(x.shape[2:]),
            "text_fraction": float(mask.mean()),
            "text_fraction_resized": float(resized.mean()),
            "near_ties_1e-4": int((margin < 1e-4).sum()),
            "near_ties_1e-4_resized": int((np.abs(prob[0, 0].astype(np.float64) - thresh) < 1e-4).sum()),
            "prob_range": [float(prob.min()), float(prob.max())],
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
