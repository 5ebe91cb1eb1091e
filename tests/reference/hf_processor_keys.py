"""Every image processor a transformers segmentation checkpoint can load, with the keys and
defaults it serialises: what segtool must read (or knowingly ignore) in a
preprocessor_config.json.

    HF_HUB_OFFLINE=1 python hf_processor_keys.py > keys.json

Needs transformers 5.x (5.25.0 when written) with torchvision; downloads nothing. Walks the
model types of MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES and
MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES, looks each up in
IMAGE_PROCESSOR_MAPPING_NAMES (the auto mapping, with its hand-written additions such as
upernet -> Segformer, data2vec-vision -> Beit, mobilevitv2 -> MobileViT) and, for every
backend it lists (torchvision, pil), instantiates the class without arguments. Why the
class attributes too: `to_dict()` (hence save_pretrained and the hub's JSON) leaves out
attributes that are None, and several processors act on class attributes a JSON never
mentions (MobileViT's do_flip_channel_order and missing normalisation, DPT's do_pad /
size_divisor, the resample each class falls back to), so a reader that only knows the
JSON keys can miss a step.

Prints one JSON line: {"transformers": version, "processors": {class name: {"model_types":
[...], "backend": "torchvision" | "pil", "keys": sorted keys of Class().to_dict(),
"defaults": Class().to_dict(), "class_attrs": {attr: value} for the attributes below that
the class defines (None kept as null)} or {"model_types", "backend", "error": message}
when it does not instantiate}, "unmapped_model_types": model types with no image
processor}.
"""
import enum
import json
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import transformers  # noqa: E402
from transformers.models.auto.image_processing_auto import (  # noqa: E402
    IMAGE_PROCESSOR_MAPPING_NAMES,
    get_image_processor_class_from_name,
)
from transformers.models.auto.modeling_auto import (  # noqa: E402
    MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES,
    MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES,
)

CLASS_ATTRS = ["do_normalize", "do_center_crop", "do_flip_channel_order", "do_pad", "size_divisor",
               "resample", "crop_size", "keep_aspect_ratio", "ensure_multiple_of", "pad_size",
               "do_convert_rgb"]


def plain(value):
    """JSON-able form: enums to their value, dict-likes (SizeDict) to dicts, tuples to lists."""
    if isinstance(value, enum.Enum):
        return plain(value.value)
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if hasattr(value, "keys") and hasattr(value, "__getitem__") and not isinstance(value, str):
        return {str(k): plain(value[k]) for k in value.keys()}
    if isinstance(value, (list, tuple, set)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def main():
    semantic = list(MODEL_FOR_SEMANTIC_SEGMENTATION_MAPPING_NAMES)
    model_types = semantic + [t for t in MODEL_FOR_UNIVERSAL_SEGMENTATION_MAPPING_NAMES if t not in semantic]
    found, unmapped = {}, []
    for model_type in model_types:
        mapping = IMAGE_PROCESSOR_MAPPING_NAMES.get(model_type)
        if not mapping:
            unmapped.append(model_type)
            continue
        for backend, class_name in mapping.items():
            if class_name is None:
                continue
            entry = found.setdefault(class_name, {"model_types": [], "backend": backend})
            entry["model_types"].append(model_type)
    processors = {}
    for class_name, entry in found.items():
        record = {"model_types": entry["model_types"], "backend": entry["backend"]}
        try:
            cls = get_image_processor_class_from_name(class_name)
            if cls is None:
                raise ImportError(f"{class_name} not importable")
            defaults = plain(cls().to_dict())
            record["keys"] = sorted(defaults)
            record["defaults"] = defaults
            record["class_attrs"] = {a: plain(getattr(cls, a)) for a in CLASS_ATTRS if hasattr(cls, a)}
        except Exception as e:  # record, do not stop: one broken class says something too
            record["error"] = f"{type(e).__name__}: {e}"
        processors[class_name] = record
    print(json.dumps({"transformers": transformers.__version__, "processors": processors,
                      "unmapped_model_types": unmapped}))


if __name__ == "__main__":
    main()
