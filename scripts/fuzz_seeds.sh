#!/usr/bin/env bash
# Seeds for the fuzz targets (fuzz/, scripts/fuzz.sh), from real files, into
# ${1:-$SEGTOOL_HOME/fuzz-seeds}/<target>/ (outside the clone):
#   onnx, safetensors  a small real checkpoint (DaNet at width 4, `checkpoint::save`) and
#                      its `segtool export`, the runtime's test graphs (tests/
#                      fuzz_regression.rs's ignored write_fuzz_seeds), the demo's
#                      danet_tiny.onnx / .safetensors when out/demo has them
#   pickle             tests/reference/hostile_pth.py's torch.save files (zip and legacy;
#                      the small hostile ones), and a real mmsegmentation DANet
#                      (tests/reference/mmseg_ref.py: ResNetV1c-50 at width 2, with meta)
#   config             configs/*.toml
#   images             the demo's images and masks, and PIL-written PNG (RGB, RGBA, grey,
#                      16-bit, palette, interlaced) and JPEG (baseline, progressive, grey)
#   raw_frames         `WxH` lines and frames
#   trt_cache          TensorRT cache texts in the layout `segtool calibrate` writes
#   card_*             mmdeploy's pipeline.json and transformers' preprocessor_config.json +
#                      config.json as those tools wrote them (tests/it/foreign_folders.rs's
#                      fixtures under target/tmp, when present), and sidecar TOML cards
#   capi               call programs (see fuzz/targets/capi.rs)
#   cdr, mcap_bag      a rosbags-written bag (tests/reference/ros2_bags.py, 2 frames) and
#                      its raw CDR messages
# Needs the venv of scripts/setup.sh (torch, PIL, rosbags, mcap). Takes about a minute
# here (2 cores) once the workspace's test build is there.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SEGTOOL_HOME:-$HOME/.cache/segtool}"
out="${1:-$home/fuzz-seeds}"
: "${SEGTOOL_PYTHON:?source the env file of scripts/setup.sh first}"
py="$SEGTOOL_PYTHON"
log() { echo "[fuzz-seeds] $*" >&2; }
rm -rf "$out"
mkdir -p "$out"
seed_dir() { mkdir -p "$out/$1"; echo "$out/$1"; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

log "Rust-made seeds (small checkpoint, its export, test graphs)"
(cd "$root" && SEGTOOL_FUZZ_SEEDS="$out" cargo test -q --test it -- \
    --ignored --exact fuzz_regression::write_fuzz_seeds >&2)
if [ -f "$root/out/demo/danet_tiny.onnx" ]; then
    cp "$root/out/demo/danet_tiny.onnx" "$(seed_dir onnx)/"
    cp "$root/out/demo/danet_tiny.safetensors" "$(seed_dir safetensors)/"
fi

log "PyTorch files (hostile_pth.py, mmseg_ref.py)"
"$py" "$root/tests/reference/hostile_pth.py" "$tmp" >&2
for f in zip.pth legacy.pth self_list_zip.pth numel_2e62_zip.pth numel_1tb_zip.pth deflate_4gb_zip.pth; do
    cp "$tmp/$f" "$(seed_dir pickle)/"
done
if "$py" "$root/tests/reference/mmseg_ref.py" checkpoint "$tmp/mmseg" --depth 50 --base 2 \
    --classes 3 --aux 0 --height 32 --width 32 --batch 1 >&2 2>"$tmp/mmseg.log"; then
    cp "$tmp/mmseg/mmseg.pth" "$(seed_dir pickle)/mmseg_r50_w2.pth"
else
    log "  mmseg_ref.py failed (no mmsegmentation in the venv?): no mmseg seed"; tail -3 "$tmp/mmseg.log" >&2
fi

log "configs, images, raw frames, caches, cards, C ABI programs"
cp "$root"/configs/*.toml "$(seed_dir config)/"
OUT="$out" ROOT="$root" "$py" - <<'EOF'
import io, json, os, struct
from pathlib import Path
from PIL import Image

out, root = Path(os.environ["OUT"]), Path(os.environ["ROOT"])
def put(target, name, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())

# images: selector byte (bit 0: .jpg, bit 1: read_mask), then the file.
def enc(img, fmt, **kw):
    b = io.BytesIO(); img.save(b, fmt, **kw); return b.getvalue()
rgb = Image.frombytes("RGB", (13, 9), bytes((i * 7) % 256 for i in range(13 * 9 * 3)))
files = {
    "rgb.png": (0, enc(rgb, "PNG")),
    "rgba.png": (0, enc(rgb.convert("RGBA"), "PNG")),
    "optimized.png": (0, enc(rgb, "PNG", optimize=True)),
    "grey16.png": (2, enc(rgb.convert("I;16"), "PNG")),
    "palette.png": (2, enc(rgb.convert("P", palette=Image.ADAPTIVE, colors=5), "PNG")),
    "mask1bit.png": (2, enc(rgb.convert("1"), "PNG")),
    "grey.png": (2, enc(rgb.convert("L"), "PNG")),
    "baseline.jpg": (1, enc(rgb, "JPEG", quality=80)),
    "progressive.jpg": (1, enc(rgb, "JPEG", progressive=True)),
    "grey.jpg": (3, enc(rgb.convert("L"), "JPEG")),
}
for name, (sel, data) in files.items():
    put("images", name, bytes([sel]) + data)
demo = root / "out/demo/data"
if demo.is_dir():
    pics = sorted(p for p in demo.rglob("*.png") if p.stat().st_size < 64 << 10)
    for p in pics[:2] + [q for q in pics if "mask" in str(q)][:2]:
        kind = "mask" if "mask" in str(p) else "image"
        put("images", f"demo_{kind}_{p.parent.name}_{p.name}", bytes([2 if kind == "mask" else 0]) + p.read_bytes())

# raw_frames: "WxH\n" then frames
put("raw_frames", "2x1_two_frames", b"2x1\n" + bytes(range(12)))
put("raw_frames", "3x2_cut", b"3x2\n" + bytes(range(20)))
put("raw_frames", "empty_stream", b"320x136\n")

# trt_cache: `segtool calibrate`'s layout (trt_cache::cache_text)
names = ["image", "/pretrained/conv1/Conv_output_0", "/head/pam/MatMul_output_0", "logits"]
text = "TRT-8601-EntropyCalibration2\n" + "".join(
    f"{n}: {struct.unpack('<I', struct.pack('<f', 0.01 * (i + 1)))[0]:08x}\n" for i, n in enumerate(names))
put("trt_cache", "segtool.cache", text)
put("trt_cache", "no_colon.cache", "TRT-8601-EntropyCalibration2\nname_only\n:3c000000\n")

# cards
fx = root / "target/tmp"
pipe = fx / "foreign_mmdeploy/danet_sdk/pipeline.json"
if pipe.is_file():
    put("card_mmdeploy", "mmdeploy_danet.json", pipe.read_bytes())
tasks = lambda transforms, post: json.dumps({"pipeline": {"tasks": [
    {"module": "Transform", "transforms": [{"type": "LoadImageFromFile"}] + transforms},
    {"module": "Net", "input_map": {"img": "input"}},
    {"component": "ResizeMask", "params": post}]}})
put("card_mmdeploy", "fixed_resize_pad.json", tasks([
    {"type": "Resize", "keep_ratio": False, "size": [64, 48]},
    {"type": "Normalize", "mean": [123.675, 116.28, 103.53], "std": [58.395, 57.12, 57.375], "to_rgb": False},
    {"type": "Pad", "size_divisor": 32}, {"type": "DefaultFormatBundle"}, {"type": "Collect", "keys": ["img"]}],
    {"num_classes": 4, "with_argmax": False, "align_corners": True}))
hf = fx / "foreign_segformer/segformer"
if (hf / "preprocessor_config.json").is_file():
    put("card_huggingface", "segformer", (hf / "preprocessor_config.json").read_bytes() + b"\0" + (hf / "config.json").read_bytes())
put("card_huggingface", "dpt_like", json.dumps({"do_resize": True, "size": {"height": 32, "width": 48},
    "do_rescale": True, "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5] * 3,
    "image_std": [0.5] * 3, "image_processor_type": "DPTImageProcessorPil"}) + "\0" +
    json.dumps({"id2label": {"0": "a", "1": "b", "2": "c", "3": "d"}}))
put("card_sidecar", "full.toml", '''classes = ["background", "person", "car", "sky"]
palette = [[0, 0, 0], [220, 20, 60], [0, 0, 142], [70, 130, 180]]
[input]
name = "input"
layout = "nchw"
dtype = "float32"
channels = "bgr"
scale = 1.0
mean = [103.53, 116.28, 123.675]
std = [57.375, 57.12, 58.395]
size = [32, 48]
fit = "resize"
resize_filter = "pillow"
[output]
name = "out"
kind = "logits"
align_corners = false
''')
put("card_sidecar", "pad.toml", 'num_classes = 4\n[input]\nmean = [0.485, 0.456, 0.406]\nstd = [0.229, 0.224, 0.225]\n'
    'size_divisor = 32\nkeep_ratio = [64, 48]\nmin_short_side = 16\n[output]\nkind = "probabilities"\n')

# capi: op programs (fuzz/targets/capi.rs): segment 17x11, accessors, open/close with
# options, a live session (open, submit, next, stats, finish, close), NULL handles.
u32 = lambda v: struct.pack("<I", v)
fill = bytes(range(64))  # an image argument's pixels
seg = bytes([0, 2, 17, 11]) + fill
info = bytes([20, 1, 21]) + u32(7) + bytes([22, 0x94])
opn = bytes([30, 5, 0x0b, 2]) + b"cuda:0,cpu\0" + bytes([1, 24, 16]) + fill
opn_auto = bytes([34, 5, 0x07, 0]) + b"cuda:0\0" + bytes([0]) + fill
opn_card = bytes([32, 4, 0x13, 0]) + b"tensorrt-fp16:0\0" + bytes([2]) + \
    b"num_classes = 4\n[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\0" + fill
live = bytes([40, 5, 0, 1, 0, 1, 1]) + bytes([45, 2, 16, 8]) + fill + \
    bytes([45, 0]) + u32(4) + u32(4) + u32(0) + fill + bytes([55, 15, 61, 64, 55, 0, 67])
put("capi", "segment", seg)
put("capi", "accessors", info + bytes([0x94]))
put("capi", "open_options", opn + opn_auto + opn_card)
put("capi", "live", live)
put("capi", "mixed", seg + info + live + bytes([100]))
EOF

log "ROS 2 bag (rosbags) and its CDR messages"
if "$py" "$root/tests/reference/ros2_bags.py" write "$tmp/ros2" --frames 2 >&2 2>"$tmp/ros2.log"; then
    bag="$(seed_dir mcap_bag)"
    mcap="$(ls "$tmp"/ros2/bag/*.mcap | head -1)"
    { printf '\x00'; cat "$mcap"; } >"$bag/rosbags.mcap"
    { printf '\x03'; cat "$mcap"; } >"$bag/rosbags_copy_zstd.mcap"
    { printf '\x01'; sed 's/- .*\.mcap$/- bag.mcap/' "$tmp/ros2/bag/metadata.yaml"; printf '\x00'; cat "$mcap"; } \
        >"$bag/rosbag2_folder"
    MCAP="$mcap" OUT="$out" "$py" - <<'EOF'
import os
from pathlib import Path
from mcap.reader import make_reader

out = Path(os.environ["OUT"]) / "cdr"
out.mkdir(parents=True, exist_ok=True)
seen = {}
with open(os.environ["MCAP"], "rb") as f:
    for schema, channel, message in make_reader(f).iter_messages():
        name = schema.name if schema else ""
        if name not in ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage"):
            continue
        key = (channel.topic, name)
        seen[key] = seen.get(key, 0) + 1
        if seen[key] > 1:
            continue
        sel = 1 if name.endswith("CompressedImage") else 0
        tag = channel.topic.strip("/").replace("/", "_")
        (out / f"{tag}_msgs").write_bytes(bytes([sel]) + message.data)
        (out / f"{tag}_rustdds").write_bytes(bytes([sel | 2]) + message.data)
EOF
else
    log "  ros2_bags.py failed (no rosbags in the venv?): no bag seeds"; tail -3 "$tmp/ros2.log" >&2
fi
log "seeds in $out: $(find "$out" -type f | wc -l) files, $(du -sh "$out" | cut -f1)"
