"""Hugging Face segmentation folders for every image processor a semantic or universal
segmentation checkpoint ships, and the masks each processor's own pipeline gives on real
photos: the reference for segtool serving such folders (segformer_ref.py generalised).

    HF_HUB_OFFLINE=1 python hf_processors_ref.py --out DIR

Needs transformers 5.x (5.25.0 when written), torch, torchvision, onnxruntime, OpenCV and
Pillow; downloads nothing. The photos come from the clip named by $SEGTOOL_CLIP (default
/root/.cache/segtool/clips/bikes.mp4, 640x272 H.264, decoded frame by frame with OpenCV,
BGR -> RGB) and are written as RGB PNGs to DIR/images/<name>.png:
`wide` the whole frame 30 (640x272), `tall` frame 90 rows 5..268 x cols 200..381 (181x263,
portrait), `small` frame 150 rows 60..121 x cols 230..327 (97x61, smaller than every model
size) and `square` frame 210 rows 0..271 x cols 240..540 (300x271). Each model size lies
between some of them, so every processor both up- and downscales.

For each case below the script writes DIR/<case>/ as a transformers user's folder:
- model.onnx: a tiny random seeded torch net exported by `torch.onnx.export` (the
  TorchScript exporter, opset 17), input `pixel_values` (N, 3, H, W) with dynamic batch,
  height and width. Per-pixel cases: convolutions whose strides give the output stride
  of the real architecture, output `logits` (N, 6, H/s, W/s), the classifier whitened
  over the `wide` photo (each class wins somewhere) and scaled so that the logits span 10
  there (near-ties far above float32 noise, not one-hot). Mask-classification cases
  (maskformer, mask2former, oneformer): outputs `class_queries_logits` (N, 8, 7) from
  global average pooling of the features then a linear layer (so the classes depend on
  the image; query q < 6 leans to class q, the two spare ones to "no object") and
  `masks_queries_logits` (N, 8, H/4, W/4), whitened and scaled to at most 5 in magnitude
  on the `wide` photo. *_pil cases export the same net as their twin (same seed, same
  calibration input, prepared by the torchvision backend). The real OneFormer also
  takes `task_inputs`; this graph takes `pixel_values` only, the task being fixed to
  semantic (the processor is still called with task_inputs=["semantic"], whose text it
  returns but nobody feeds).
- config.json: written by the model type's own config class (`SegformerConfig`,
  `UperNetConfig`, `MobileViTV2Config`, `Data2VecVisionConfig`, ...) with 6 labels and
  their names, plus the architectures and dtype that `model.save_pretrained` adds.
- preprocessor_config.json: `<ProcessorClass>(**KWARGS).save_pretrained(folder)`, with
  the kwargs the canonical hub checkpoint's preprocessor_config.json ships (the dicts in
  CASES, each commented with its hub repo and where the values come from).
  OneFormer: the hub's processor names class_info_file "ade20k_panoptic.json" in the hub
  dataset repo_path "shi-labs/oneformer_demo", which `OneFormerImageProcessor.__init__`
  downloads at load time, so offline it cannot load. Here the class info of the 6 labels
  is written to DIR/oneformer/class_info.json and the kwargs say
  repo_path=<absolute DIR/oneformer>, class_info_file="class_info.json" (so the folder
  loads offline but only where it was written; moved elsewhere, edit repo_path). The
  class info is only used to build training targets, never for inference.

The *_pil cases reuse the hub kwargs of their torchvision twin: `save_pretrained` of a
`...ImageProcessorPil` writes the same JSON (image_processor_type without "Pil"), and
`AutoImageProcessor.from_pretrained(folder)` gives back the torchvision class; a user gets
the PIL class only with `backend="pil"` (even a folder naming the `...Pil` class loads the
torchvision one), which is how these cases load it.

Reference per case and photo, the pipeline a user runs: `AutoImageProcessor
.from_pretrained(folder)` (the class it returns is asserted and reported), `processor(
images=PIL image, return_tensors="pt")` (task_inputs=["semantic"] for OneFormer),
onnxruntime (CPU) on model.onnx, the outputs wrapped in the model's own output class
(`SemanticSegmenterOutput`, `MaskFormerForInstanceSegmentationOutput`,
`Mask2FormerForUniversalSegmentationOutput`, `OneFormerForUniversalSegmentationOutput`),
then `processor.post_process_semantic_segmentation(outputs, target_sizes=[(h, w)],
return_segmentation_scores=True)`. Writes DIR/<case>/ref/<photo>.npy (uint8 mask h x w)
and <photo>.margin.npy (float32 gap between the two largest scores per pixel, after the
processor's own upsampling to the photo's size: where float32 noise may flip the argmax).
Note what post-processing does not undo: a centre crop (mobilevit, mobilenetv2,
beit_crop) or a centre pad (dpt_pad) or the bottom/right pad to size_divisor is simply
stretched to the photo's size; Mask2Former first resizes the mask logits to a fixed
384x384, OneFormer resizes with torchvision's antialiased resize instead of
F.interpolate.

Like segformer_ref.py it refuses CPUs on which torchvision resizes uint8 through float
(neither AVX2/AVX512 nor arm64). Prints one JSON line: {"transformers", "torch",
"cpu_capability", "photos": {photo: [h, w]}, "cases": {case: {"processor" (class the
user's loader returns), "auto_default" (what AutoImageProcessor gives without backend=),
"repo", "preprocessor_config" (the saved dict), "inputs": {photo: [N, C, H, W]},
"outputs": {photo: output shapes}, "agreement_with_argmax" (fraction of pixels where the
processor's mask equals the argmax of its scores, 1.0 expected), "margin_min",
"classes": {photo: pixel count per class}}}}.
"""
import argparse
import inspect
import json
import os
import platform
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from PIL import Image  # noqa: E402
from transformers import (  # noqa: E402
    AutoImageProcessor,
    BeitConfig,
    BeitImageProcessor,
    BeitImageProcessorPil,
    Data2VecVisionConfig,
    DetrConfig,
    DetrImageProcessor,
    DPTConfig,
    DPTImageProcessor,
    EomtConfig,
    EomtImageProcessor,
    Mask2FormerConfig,
    Mask2FormerImageProcessor,
    MaskFormerConfig,
    MaskFormerImageProcessor,
    MobileNetV2Config,
    MobileNetV2ImageProcessor,
    MobileViTConfig,
    MobileViTImageProcessor,
    MobileViTV2Config,
    OneFormerConfig,
    OneFormerImageProcessor,
    Sapiens2Config,
    Sapiens2ImageProcessor,
    SegformerConfig,
    SegformerImageProcessor,
    SegformerImageProcessorPil,
    Tipsv2DptConfig,
    Tipsv2DptImageProcessor,
    UperNetConfig,
)
from transformers.modeling_outputs import SemanticSegmenterOutput  # noqa: E402
from transformers.models.detr.modeling_detr import DetrSegmentationOutput  # noqa: E402
from transformers.models.eomt.modeling_eomt import EomtForUniversalSegmentationOutput  # noqa: E402
from transformers.models.mask2former.modeling_mask2former import (  # noqa: E402
    Mask2FormerForUniversalSegmentationOutput,
)
from transformers.models.maskformer.modeling_maskformer import (  # noqa: E402
    MaskFormerForInstanceSegmentationOutput,
)
from transformers.models.oneformer.modeling_oneformer import (  # noqa: E402
    OneFormerForUniversalSegmentationOutput,
)

LABELS = ["background", "road", "person", "bicycle", "car", "building"]
QUERIES = 8
CLIP = os.environ.get("SEGTOOL_CLIP", "/root/.cache/segtool/clips/bikes.mp4")
# name: (frame, rows, cols) of the crop; None = the whole frame
PHOTOS = {
    "wide": (30, None, None),
    "tall": (90, (5, 268), (200, 381)),
    "small": (150, (60, 121), (230, 327)),
    "square": (210, (0, 271), (240, 540)),
}

IMAGENET_DEFAULT_MEAN = [0.485, 0.456, 0.406]
IMAGENET_DEFAULT_STD = [0.229, 0.224, 0.225]
IMAGENET_STANDARD = [0.5, 0.5, 0.5]
# detectron2's PIXEL_MEAN / PIXEL_STD divided by 255 in float32, as the MaskFormer,
# Mask2Former and OneFormer conversion scripts compute them
# ((torch.tensor(cfg.MODEL.PIXEL_MEAN) / 255).tolist()), so the hub JSONs hold these digits
D2_MEAN = (torch.tensor([123.675, 116.28, 103.53]) / 255).tolist()
D2_STD = (torch.tensor([58.395, 57.12, 57.375]) / 255).tolist()

# Legacy keys of the feature-extractor era are written under their current names
# ("reduce_labels" -> do_reduce_labels, "size_divisibility" -> size_divisor, an int size ->
# the dict it expands to). Sources: "search" = found with the search tool (mostly the
# transformers conversion script that built and pushed the processor, or the default of
# the class that saved it at the time); "memory" = not found, recalled.
SEGFORMER_ADE = {
    # nvidia/segformer-b0-finetuned-ade-512-512 (SegformerFeatureExtractor era). search: the
    # sibling nvidia/segformer-b0-finetuned-cityscapes-1024-1024 JSON (size 512, resample 2,
    # ImageNet mean/std, reduce_labels false); reduce_labels true for ADE: memory.
    "do_resize": True, "size": {"height": 512, "width": 512}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD,
    "do_reduce_labels": True,
}
UPERNET = {
    # openmmlab/upernet-convnext-small. search: convert_convnext_upernet_to_pytorch.py pushes
    # `SegformerImageProcessor()`, i.e. the class defaults written out here.
    "do_resize": True, "size": {"height": 512, "width": 512}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD,
    "do_reduce_labels": False,
}
MOBILEVIT = {
    # apple/deeplabv3-mobilevit-small. search: convert_mlcvnets_to_pytorch.py builds
    # MobileViTImageProcessor(crop_size=512, size=512 + 32) for the deeplabv3 models;
    # resample 2 = the class default then (BILINEAR; transformers 5 defaults to BICUBIC,
    # so the explicit value matters): memory. No normalisation, BGR flip.
    "do_resize": True, "size": {"shortest_edge": 544}, "resample": 2,
    "do_center_crop": True, "crop_size": {"height": 512, "width": 512},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_flip_channel_order": True,
}
MOBILEVITV2 = {
    # apple/mobilevitv2-1.0-voc-deeplabv3. search: the mobilevitv2 convert_mlcvnets_to_pytorch.py
    # builds MobileViTImageProcessor(crop_size=config.image_size, size=config.image_size + 32)
    # with image_size 512 for voc_deeplabv3; resample 2 = class default then: memory.
    "do_resize": True, "size": {"shortest_edge": 544}, "resample": 2,
    "do_center_crop": True, "crop_size": {"height": 512, "width": 512},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_flip_channel_order": True,
}
DPT_ADE = {
    # Intel/dpt-large-ade. search: convert_dpt_to_pytorch.py uses size 480 for the ade model;
    # DPTFeatureExtractor of that time defaulted to resample=BILINEAR (2),
    # keep_aspect_ratio False, ensure_multiple_of 1, mean/std 0.5. So bilinear, not bicubic
    # (DPTImageProcessor's default today): inferred from those sources, not the JSON itself.
    "do_resize": True, "size": {"height": 480, "width": 480}, "resample": 2,
    "keep_aspect_ratio": False, "ensure_multiple_of": 1,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
DPT_KEEP = {
    # depth-style DPT (Intel/dpt-large, Intel/dpt-hybrid-midas, depth-anything): keep the
    # aspect ratio, snap to a multiple. search: depth-anything ships keep_aspect_ratio true,
    # ensure_multiple_of 14, resample 3; here 256x256 and multiple 32 as the brief asks,
    # mean/std 0.5 as the Intel ones (memory).
    "do_resize": True, "size": {"height": 256, "width": 256}, "resample": 3,
    "keep_aspect_ratio": True, "ensure_multiple_of": 32,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
DPT_PAD = {
    # not a hub checkpoint: keep the aspect ratio without snapping (224 target), then
    # centre-pad (zeros after normalisation) to a multiple of 32.
    "do_resize": True, "size": {"height": 224, "width": 224}, "resample": 3,
    "keep_aspect_ratio": True, "ensure_multiple_of": 1,
    "do_pad": True, "size_divisor": 32,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
BEIT_ADE = {
    # microsoft/beit-base-finetuned-ade-640-640. search: convert_beit_unilm_to_pytorch.py
    # builds BeitImageProcessor(size=config.image_size (640), do_center_crop=False) for
    # ade20k; BeitFeatureExtractor then defaulted to resample BICUBIC (3), crop_size 224,
    # mean/std 0.5 (all saved). reduce_labels true: memory. Kept at 640 (fast enough).
    "do_resize": True, "size": {"height": 640, "width": 640}, "resample": 3,
    "do_center_crop": False, "crop_size": {"height": 224, "width": 224},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
    "do_reduce_labels": True,
}
BEIT_CROP = {
    # not a hub checkpoint: the BeitFeatureExtractor-style resize-then-centre-crop.
    "do_resize": True, "size": {"height": 256, "width": 256}, "resample": 3,
    "do_center_crop": True, "crop_size": {"height": 224, "width": 224},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
DATA2VEC = {
    # facebook/data2vec-vision-base (the checkpoint Data2VecVisionForSemanticSegmentation's
    # docstring loads; no data2vec semantic fine-tune is known on the hub). search: its
    # conversion script builds BeitImageProcessor(size=config.image_size (224),
    # do_center_crop=False); resample 3 and mean/std 0.5 = the defaults then.
    "do_resize": True, "size": {"height": 224, "width": 224}, "resample": 3,
    "do_center_crop": False,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
MOBILENETV2 = {
    # google/deeplabv3_mobilenet_v2_1.0_513. search: convert_original_tf_checkpoint_to_pytorch.py
    # builds MobileNetV2ImageProcessor(crop_size=513x513, size={"shortest_edge": 513 + 32}),
    # so 545, not 513; resample 2 and mean/std 0.5 = the class defaults then (memory).
    "do_resize": True, "size": {"shortest_edge": 545}, "resample": 2,
    "do_center_crop": True, "crop_size": {"height": 513, "width": 513},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_STANDARD, "image_std": IMAGENET_STANDARD,
}
MASKFORMER = {
    # facebook/maskformer-swin-base-ade. search: the MaskFormer conversion script builds
    # MaskFormerFeatureExtractor(image_mean/std = PIXEL_MEAN/STD / 255, size=MIN_SIZE_TEST,
    # max_size=MAX_SIZE_TEST, num_labels=NUM_CLASSES, ignore_index=255,
    # size_divisibility=32); 640 / 2560 (the ADE swin configs' MIN/MAX_SIZE_TEST) and
    # reduce_labels true: memory. num_labels 150 -> 6 to match this model.
    "do_resize": True, "size": {"shortest_edge": 640, "longest_edge": 2560}, "resample": 2,
    "size_divisor": 32, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": D2_MEAN, "image_std": D2_STD,
    "ignore_index": 255, "do_reduce_labels": True, "num_labels": len(LABELS),
}
MASK2FORMER = {
    # facebook/mask2former-swin-tiny-ade-semantic. search: the Mask2Former conversion script
    # (same as MaskFormer, ignore_index left out "#check"); 512 / 2048 for the ADE configs,
    # ignore_index 255 and reduce_labels true: memory. num_labels 150 -> 6.
    "do_resize": True, "size": {"shortest_edge": 512, "longest_edge": 2048}, "resample": 2,
    "size_divisor": 32, "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": D2_MEAN, "image_std": D2_STD,
    "ignore_index": 255, "do_reduce_labels": True, "num_labels": len(LABELS),
}
ONEFORMER = {
    # shi-labs/oneformer_ade20k_swin_tiny. search: convert_to_hf_oneformer.py builds
    # OneFormerImageProcessor(image_mean/std = PIXEL_MEAN/STD / 255, size=MIN_SIZE_TEST,
    # max_size=MAX_SIZE_TEST, num_labels=NUM_CLASSES, ignore_index=255,
    # class_info_file="ade20k_panoptic.json") (repo_path default shi-labs/oneformer_demo);
    # 512 / 2048 and num_text 134 (150 queries - 16 context tokens): memory. num_labels
    # 150 -> 6; class_info_file / repo_path replaced by a local file (see the module
    # docstring). No size_divisor: OneFormer has none.
    "do_resize": True, "size": {"shortest_edge": 512, "longest_edge": 2048}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": D2_MEAN, "image_std": D2_STD,
    "ignore_index": 255, "do_reduce_labels": False, "num_labels": len(LABELS),
    "num_text": 134, "class_info_file": "class_info.json",  # repo_path set at run time
}
SAPIENS2 = {
    # Sapiens2 body-part segmentation (facebook/sapiens2-seg-*): the class defaults
    # (1024 x 768, bilinear, ImageNet mean/std, no pad, no crop), as a processor built with
    # no arguments saves them; the hub JSON itself was not checked (memory).
    "do_resize": True, "size": {"height": 1024, "width": 768}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD,
    "do_pad": False, "do_center_crop": False,
}
TIPSV2_DPT = {
    # TIPSv2's DPT segmentation head (google/tipsv2-*-dpt): the class defaults (448 x 448,
    # bilinear, rescaled, not normalised); the hub JSON itself was not checked (memory).
    "do_resize": True, "size": {"height": 448, "width": 448}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": False,
}
DETR_PANOPTIC = {
    # facebook/detr-resnet-50-panoptic (DetrFeatureExtractor era). search: the DETR
    # conversion script builds DetrImageProcessor(format="coco_panoptic") for the panoptic
    # models, the class defaults otherwise (800 / 1333, bilinear, ImageNet mean/std, pad).
    "do_resize": True, "size": {"shortest_edge": 800, "longest_edge": 1333}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD,
    "do_pad": True, "format": "coco_panoptic",
}
EOMT = {
    # EoMT without its sliding crops (do_split_image false, as the panoptic and instance
    # checkpoints such as tue-mps/coco_panoptic_eomt_large_640 ship it: memory; the
    # semantic ADE checkpoints split, which segtool refuses by name). 512 here: the masks
    # are resized to 512 x 512 before the final resize, a quirk kept.
    "do_resize": True, "size": {"shortest_edge": 512, "longest_edge": 512}, "resample": 2,
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": IMAGENET_DEFAULT_MEAN, "image_std": IMAGENET_DEFAULT_STD,
    "do_split_image": False, "do_pad": False,
}

# name: (hub repo, processor class saved, backend loaded, config class, architecture,
#        kwargs, kind, output stride)
CASES = {
    "segformer": ("nvidia/segformer-b0-finetuned-ade-512-512", SegformerImageProcessor, None,
                  SegformerConfig, "SegformerForSemanticSegmentation", SEGFORMER_ADE, "logits", 4),
    "segformer_pil": ("nvidia/segformer-b0-finetuned-ade-512-512", SegformerImageProcessorPil, "pil",
                      SegformerConfig, "SegformerForSemanticSegmentation", SEGFORMER_ADE, "logits", 4),
    "upernet": ("openmmlab/upernet-convnext-small", SegformerImageProcessor, None,
                UperNetConfig, "UperNetForSemanticSegmentation", UPERNET, "logits", 4),
    "mobilevit": ("apple/deeplabv3-mobilevit-small", MobileViTImageProcessor, None,
                  MobileViTConfig, "MobileViTForSemanticSegmentation", MOBILEVIT, "logits", 16),
    "mobilevitv2": ("apple/mobilevitv2-1.0-voc-deeplabv3", MobileViTImageProcessor, None,
                    MobileViTV2Config, "MobileViTV2ForSemanticSegmentation", MOBILEVITV2, "logits", 16),
    "dpt": ("Intel/dpt-large-ade", DPTImageProcessor, None,
            DPTConfig, "DPTForSemanticSegmentation", DPT_ADE, "logits", 2),
    "dpt_keep": ("(depth-style DPT)", DPTImageProcessor, None,
                 DPTConfig, "DPTForSemanticSegmentation", DPT_KEEP, "logits", 2),
    "dpt_pad": ("(none)", DPTImageProcessor, None,
                DPTConfig, "DPTForSemanticSegmentation", DPT_PAD, "logits", 2),
    "beit": ("microsoft/beit-base-finetuned-ade-640-640", BeitImageProcessor, None,
             BeitConfig, "BeitForSemanticSegmentation", BEIT_ADE, "logits", 4),
    "beit_pil": ("microsoft/beit-base-finetuned-ade-640-640", BeitImageProcessorPil, "pil",
                 BeitConfig, "BeitForSemanticSegmentation", BEIT_ADE, "logits", 4),
    "beit_crop": ("(none)", BeitImageProcessor, None,
                  BeitConfig, "BeitForSemanticSegmentation", BEIT_CROP, "logits", 4),
    "data2vec": ("facebook/data2vec-vision-base", BeitImageProcessor, None,
                 Data2VecVisionConfig, "Data2VecVisionForSemanticSegmentation", DATA2VEC, "logits", 4),
    "mobilenetv2": ("google/deeplabv3_mobilenet_v2_1.0_513", MobileNetV2ImageProcessor, None,
                    MobileNetV2Config, "MobileNetV2ForSemanticSegmentation", MOBILENETV2, "logits", 8),
    "maskformer": ("facebook/maskformer-swin-base-ade", MaskFormerImageProcessor, None,
                   MaskFormerConfig, "MaskFormerForInstanceSegmentation", MASKFORMER, "maskformer", 4),
    "mask2former": ("facebook/mask2former-swin-tiny-ade-semantic", Mask2FormerImageProcessor, None,
                    Mask2FormerConfig, "Mask2FormerForUniversalSegmentation", MASK2FORMER, "mask2former", 4),
    "oneformer": ("shi-labs/oneformer_ade20k_swin_tiny", OneFormerImageProcessor, None,
                  OneFormerConfig, "OneFormerForUniversalSegmentation", ONEFORMER, "oneformer", 4),
    "detr": ("facebook/detr-resnet-50-panoptic", DetrImageProcessor, None,
             DetrConfig, "DetrForSegmentation", DETR_PANOPTIC, "detr", 4),
    "eomt": ("tue-mps/coco_panoptic_eomt_large_640 (at 512)", EomtImageProcessor, None,
             EomtConfig, "EomtForUniversalSegmentation", EOMT, "eomt", 4),
    "sapiens2": ("(Sapiens2 class defaults)", Sapiens2ImageProcessor, None,
                 Sapiens2Config, "Sapiens2ForSemanticSegmentation", SAPIENS2, "logits", 4),
    "tipsv2_dpt": ("(TIPSv2 DPT class defaults)", Tipsv2DptImageProcessor, None,
                   Tipsv2DptConfig, "Tipsv2DptForSemanticSegmentation", TIPSV2_DPT, "logits", 4),
}
OUTPUT_CLASSES = {
    "maskformer": MaskFormerForInstanceSegmentationOutput,
    "mask2former": Mask2FormerForUniversalSegmentationOutput,
    "oneformer": OneFormerForUniversalSegmentationOutput,
}
# the graph's output names of each mask-classification kind: (class logits, mask logits)
OUTPUT_NAMES = {"detr": ("logits", "pred_masks")}


def read_photos(path):
    """The four RGB crops, frames decoded in order (no seeking: exact frame numbers)."""
    wanted = {frame: name for name, (frame, _, _) in PHOTOS.items()}
    cap = cv2.VideoCapture(path)
    if not cap.isOpened():
        raise SystemExit(f"cannot open {path}")
    photos, index = {}, 0
    while len(photos) < len(PHOTOS):
        ok, bgr = cap.read()
        if not ok:
            raise SystemExit(f"{path}: ended at frame {index}")
        if index in wanted:
            name = wanted[index]
            _, rows, cols = PHOTOS[name]
            if rows is not None:
                bgr = bgr[rows[0]:rows[1], cols[0]:cols[1]]
            photos[name] = np.ascontiguousarray(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        index += 1
    cap.release()
    return photos


def conv(cin, cout, stride):
    return torch.nn.Sequential(torch.nn.Conv2d(cin, cout, 3, stride, 1), torch.nn.ReLU())


@torch.no_grad()
def whiten(layer, out):
    """Fold the whitening of a 1x1 conv's output channels over the calibration image into
    the conv: random ReLU features share a large common part, so the raw channels are
    nearly proportional and their argmax hardly varies; whitened, each channel wins
    somewhere and the gap between the top two is a sizeable part of the span."""
    y = out.permute(1, 0, 2, 3).reshape(out.shape[1], -1).double()
    mean = y.mean(dim=1)
    vals, vecs = torch.linalg.eigh(torch.cov(y))
    w = (vecs @ torch.diag(vals.clamp_min(1e-12).rsqrt()) @ vecs.T).float()
    c_out, c_in = layer.weight.shape[:2]
    layer.weight.copy_((w @ layer.weight.reshape(c_out, c_in)).reshape(layer.weight.shape))
    layer.bias.copy_(w @ (layer.bias - mean.float()))


class TinyLogits(torch.nn.Module):
    """Convolutions with `stride` = 2^k overall, 6 output channels named `logits`."""

    def __init__(self, stride, width=16):
        super().__init__()
        layers = [conv(3, width, 1)]
        for _ in range(int(np.log2(stride))):
            layers.append(conv(width, width, 2))
        layers.append(conv(width, width, 1))
        self.body = torch.nn.Sequential(*layers)
        self.head = torch.nn.Conv2d(width, len(LABELS), 1)

    def forward(self, pixel_values):
        return self.head(self.body(pixel_values))

    @torch.no_grad()
    def calibrate(self, x, span=10.0):
        """Whiten the class logits over the calibration image, then scale the span."""
        whiten(self.head, self(x))
        out = self(x)
        factor = span / float(out.max() - out.min())
        self.head.weight.mul_(factor)
        self.head.bias.mul_(factor)


class TinyMaskClassifier(torch.nn.Module):
    """Features at 1/4; per query a class distribution from the pooled features (so it
    depends on the image) and a mask from a 1x1 projection."""

    def __init__(self, width=16):
        super().__init__()
        self.body = torch.nn.Sequential(conv(3, width, 1), conv(width, width, 2), conv(width, width, 2),
                                        conv(width, width, 1))
        self.masks = torch.nn.Conv2d(width, QUERIES, 1)
        self.classes = torch.nn.Linear(width, QUERIES * (len(LABELS) + 1))

    def forward(self, pixel_values):
        f = self.body(pixel_values)
        pooled = f.mean(dim=(2, 3))
        classes = self.classes(pooled).reshape(-1, QUERIES, len(LABELS) + 1)
        return classes, self.masks(f)

    @torch.no_grad()
    def calibrate(self, x, mask_bound=5.0, class_spread=1.0, lean=4.0):
        whiten(self.masks, self(x)[1])
        classes, masks = self(x)
        m = mask_bound / float(masks.abs().max())
        self.masks.weight.mul_(m)
        self.masks.bias.mul_(m)
        centred = classes - classes.mean(dim=-1, keepdim=True)
        c = class_spread / float(centred.std())
        self.classes.weight.mul_(c)
        self.classes.bias.mul_(c)
        # as a trained model would, query q < 6 leans to class q and the spare queries to
        # "no object" (the last class); the image still moves the probabilities through the
        # pooled features
        bias = self.classes.bias.view(QUERIES, len(LABELS) + 1)
        for q in range(QUERIES):
            bias[q, min(q, len(LABELS))] += lean


def write_config(config_class, architecture, folder):
    config = config_class(num_labels=len(LABELS), id2label=dict(enumerate(LABELS)),
                          label2id={n: i for i, n in enumerate(LABELS)})
    # what `model.save_pretrained` adds to config.json (the weights live in model.onnx)
    config.architectures = [architecture]
    config.dtype = torch.float32
    config.save_pretrained(folder)


def export(model, kind, folder, x):
    path = os.path.join(folder, "model.onnx")
    if kind == "logits":
        names = ["logits"]
        axes = {"pixel_values": {0: "N", 2: "H", 3: "W"}, "logits": {0: "N", 2: "h", 3: "w"}}
    else:
        classes, masks = OUTPUT_NAMES.get(kind, ("class_queries_logits", "masks_queries_logits"))
        names = [classes, masks]
        axes = {"pixel_values": {0: "N", 2: "H", 3: "W"}, classes: {0: "N"},
                masks: {0: "N", 2: "h", 3: "w"}}
    torch.onnx.export(model.eval(), (x,), path, dynamo=False, opset_version=17,
                      input_names=["pixel_values"], output_names=names, dynamic_axes=axes)
    return path


def top2_margin(scores):
    top = torch.topk(scores, 2, dim=0).values
    return (top[0] - top[1]).numpy().astype(np.float32)


def run_case(name, spec, photos, out_dir, gen_seed):
    repo, proc_class, backend, config_class, architecture, kwargs, kind, stride = spec
    folder = os.path.join(out_dir, name)
    ref_dir = os.path.join(folder, "ref")
    os.makedirs(ref_dir, exist_ok=True)
    kwargs = dict(kwargs)
    if name == "oneformer":
        info = {str(i): {"name": n, "isthing": int(n in ("person", "bicycle", "car"))}
                for i, n in enumerate(LABELS)}
        with open(os.path.join(folder, kwargs["class_info_file"]), "w") as f:
            json.dump(info, f, indent=2)
        kwargs["repo_path"] = os.path.abspath(folder)
    write_config(config_class, architecture, folder)
    proc_class(**kwargs).save_pretrained(folder)
    with open(os.path.join(folder, "preprocessor_config.json")) as f:
        saved = json.load(f)

    load_kwargs = {} if backend is None else {"backend": backend}
    processor = AutoImageProcessor.from_pretrained(folder, **load_kwargs)
    assert type(processor).__name__ == proc_class.__name__, (name, type(processor).__name__)
    call_kwargs = {"task_inputs": ["semantic"]} if kind == "oneformer" else {}

    torch.manual_seed(gen_seed)
    model = TinyLogits(stride) if kind == "logits" else TinyMaskClassifier()
    # calibrated on the `wide` photo as the default (torchvision) backend prepares it, so
    # that a *_pil case exports the very same net as its twin
    default = AutoImageProcessor.from_pretrained(folder)
    calib = default(images=Image.fromarray(photos["wide"]), return_tensors="pt", **call_kwargs)["pixel_values"]
    model.calibrate(calib)
    path = export(model, kind, folder, calib)
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]

    has_scores = "return_segmentation_scores" in inspect.signature(
        processor.post_process_semantic_segmentation).parameters
    report = {"processor": type(processor).__name__, "auto_default": type(default).__name__, "repo": repo,
              "preprocessor_config": saved, "return_segmentation_scores": has_scores,
              "inputs": {}, "outputs": {}, "classes": {}}
    agree, pixels, margin_min = 0, 0, float("inf")
    for photo, rgb in photos.items():
        h, w = rgb.shape[:2]
        img = Image.open(os.path.join(out_dir, "images", f"{photo}.png"))
        pixel_values = processor(images=img, return_tensors="pt", **call_kwargs)["pixel_values"]
        outs = session.run(names, {"pixel_values": pixel_values.numpy()})
        if kind == "logits":
            wrapped = SemanticSegmenterOutput(logits=torch.from_numpy(outs[0]))
        elif kind == "eomt":
            wrapped = EomtForUniversalSegmentationOutput(class_queries_logits=torch.from_numpy(outs[0]),
                                                         masks_queries_logits=torch.from_numpy(outs[1]),
                                                         patch_offsets=None)
        elif kind == "detr":
            wrapped = DetrSegmentationOutput(logits=torch.from_numpy(outs[0]),
                                             pred_masks=torch.from_numpy(outs[1]))
        else:
            wrapped = OUTPUT_CLASSES[kind](class_queries_logits=torch.from_numpy(outs[0]),
                                           masks_queries_logits=torch.from_numpy(outs[1]))
        if has_scores:
            post = processor.post_process_semantic_segmentation(
                wrapped, target_sizes=[(h, w)], return_segmentation_scores=True)[0]
            mask, scores = post.segmentation, post.segmentation_scores
        else:  # not reached with transformers 5.25: every processor here has the argument
            raise SystemExit(f"{name}: post_process_semantic_segmentation has no return_segmentation_scores")
        mask = mask.numpy()
        assert mask.shape == (h, w), (name, photo, mask.shape)
        margin = top2_margin(scores)
        agree += int((mask == scores.argmax(dim=0).numpy()).sum())
        pixels += mask.size
        margin_min = min(margin_min, float(margin.min()))
        np.save(os.path.join(ref_dir, f"{photo}.npy"), mask.astype(np.uint8))
        np.save(os.path.join(ref_dir, f"{photo}.margin.npy"), margin)
        report["inputs"][photo] = list(pixel_values.shape)
        report["outputs"][photo] = [list(o.shape) for o in outs]
        report["classes"][photo] = np.bincount(mask.ravel(), minlength=len(LABELS)).tolist()
    report["agreement_with_argmax"] = agree / pixels
    report["margin_min"] = margin_min
    return report


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default=",".join(CASES), help="comma-separated subset (default: all)")
    args = ap.parse_args()
    if not (torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")
            or platform.machine() in ("aarch64", "arm64")):
        raise SystemExit("torchvision resizes uint8 through float on this CPU: not the reference")
    start = time.time()
    torch.set_num_threads(2)
    os.makedirs(os.path.join(args.out, "images"), exist_ok=True)
    photos = read_photos(CLIP)
    for photo, rgb in photos.items():
        Image.fromarray(rgb).save(os.path.join(args.out, "images", f"{photo}.png"))
    report = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "onnxruntime": ort.__version__,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(), "machine": platform.machine(),
        "clip": CLIP, "labels": LABELS,
        "photos": {p: list(rgb.shape[:2]) for p, rgb in photos.items()}, "cases": {},
    }
    for name in args.cases.split(","):
        seed = list(CASES).index(name.removesuffix("_pil"))  # a *_pil twin gets its twin's net
        report["cases"][name] = run_case(name, CASES[name], photos, args.out, seed)
    report["seconds"] = round(time.time() - start, 1)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
