"""The same answer from every door: one set of models and frames through every front end,
each on ONNX Runtime with one thread, and the class maps compared bit for bit with
Python's `Segmenter.segment` (or, where that refuses a frame, every door must refuse it).

The doors: the CLI (`segtool infer`, one process per image, and one process for all the
images in batches), Python `segment` and `segment_batch`, C `segtool_segment` (a small
program compiled here against capi/include/segtool.h and linked to libsegtool.so), the
GStreamer element (`gst-launch-1.0 ... pngdec ! segtoolseg output=mask ! filesink`, the
plugin found through GST_PLUGIN_PATH), and ROS 2 without ROS 2: `segtool-ros2 bag` on a
bag `rosbags` wrote, and the live node, fed and read over Cyclone DDS
(tests/reference/every_door_ros2.py, in the project venv: SEGTOOL_PYTHON).

The models: a dynamic export, a fixed-size export (`--input-size 32x48`) fed frames of
other sizes, its INT8 calibration, a Hugging Face folder whose graph takes 1x3x32x32
only (SegFormer's processor resizes to it, logits at 1/4), and an mmdeploy SDK folder
(keep-ratio resize, 0-255 normalisation, Pad size_divisor, the ArgMax in the graph). The
exports come from conftest's tiny DANet, its last classifier re-centred and scaled (2
iterations leave it answering "background" everywhere, which would make every door
agree for nothing).

The frames: two 40x56 and one 33x47 (odd: padding and strides), written as PNGs for the
doors that read files. Every process loads the same libonnxruntime (the onnxruntime
package's, the one the wheel uses: ORT_DYLIB_PATH for the others).

A door that cannot be driven here (no C compiler, no gst-launch-1.0, no SEGTOOL_PYTHON, no
DDS discovery) fails under `make test` (SEGTOOL_REQUIRE_REFERENCES=1) and is a skip with
its reason elsewhere. Each door's test prints the model x door table so far (`same`,
`refused`, `DIFFERS n px`, ...)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import onnx
import pytest
from onnx import TensorProto, helper

import segtool
from conftest import REPO, SEGTOOL, frames, segtool as run_segtool, varied_checkpoint

Mask = npt.NDArray[np.uint8]
ClassIds = Union[npt.NDArray[np.uint8], npt.NDArray[np.uint16]]  # a mask: uint16 past 256 classes
BIN_DIR = Path(SEGTOOL).parent
ROS2_SCRIPT = REPO / "tests" / "reference" / "every_door_ros2.py"
FIXED = (32, 48)  # the fixed-size export's H x W: no frame has it
CLASSES = ["sky", "road", "car", "tree"]  # the foreign folders'
LIMIT_S = 60.0  # one process of a door


@dataclass
class Refused:
    why: str


Outcome = Union[ClassIds, Refused]


@dataclass
class Model:
    name: str
    path: Path


@dataclass
class Frames:
    arrays: List[Mask]  # H x W x 3 RGB
    png_dir: Path  # f<k>.png
    npy_dir: Path  # f<k>.npy (the ROS 2 helper's input)
    raw: List[Path]  # packed rgb24 (the C program's input)


def required() -> bool:
    return os.environ.get("SEGTOOL_REQUIRE_REFERENCES") == "1"


def cannot_drive(door: str, why: str) -> None:
    """A door this machine cannot drive: a failure under `make test`, a skip elsewhere."""
    message = f"the {door} door cannot be driven here: {why}"
    if required():
        pytest.fail(message + " (SEGTOOL_REQUIRE_REFERENCES=1: every door must run)")
    pytest.skip(message)


def tail(text: Union[str, bytes], lines: int = 6) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return " | ".join(line.strip() for line in text.strip().splitlines()[-lines:])


def newest(name: str) -> Path:
    """`name` as cargo built it: target/<profile>/ or its deps/, whichever is newer
    (`cargo test` rebuilds only the copy in deps/)."""
    found = [p for p in (BIN_DIR / name, BIN_DIR / "deps" / name) if p.is_file()]
    if not found:
        raise FileNotFoundError(f"{name} not in {BIN_DIR} (cargo build --workspace builds it)")
    return max(found, key=lambda p: p.stat().st_mtime)


def ort_library() -> str:
    """The libonnxruntime the wheel loads (the onnxruntime package's)."""
    for path, source in segtool.ort_library_candidates():
        if source == "the onnxruntime package":
            return path
    raise AssertionError(f"no onnxruntime package library: {segtool.ort_library_candidates()}")


def door_env(**extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env["ORT_DYLIB_PATH"] = ort_library()
    env.pop("SEGTOOL_ORT_LIB", None)
    env.update(extra)
    return env


def run(cmd: Sequence[Union[str, Path]]) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([str(c) for c in cmd], capture_output=True, timeout=LIMIT_S, env=door_env())


# --- models ------------------------------------------------------------------------------

def conv_weights(seed: int, shape: Tuple[int, ...], scale: float) -> onnx.TensorProto:
    w = (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)
    return helper.make_tensor(f"w{seed}", TensorProto.FLOAT, w.shape, w.flatten().tolist())


def save(graph: onnx.GraphProto, path: Path, opset: int) -> None:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="pytorch")
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))


def hugging_face_folder(d: Path) -> Path:
    """A SegFormer-like Hugging Face folder whose graph takes 1x3x32x32 only: its
    processor resizes every image to 32x32; logits come out at 8x8."""
    d.mkdir()
    c = len(CLASSES)
    w1, w2 = conv_weights(1, (8, 3, 3, 3), 0.6), conv_weights(2, (c, 8, 4, 4), 0.3)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["pixel_values", w1.name], ["h"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Conv", ["r", w2.name], ["logits"], strides=[4, 4])],
        "segformer_fixed",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, [1, 3, 32, 32])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, c, 8, 8])],
        [w1, w2])
    save(graph, d / "model.onnx", 17)
    (d / "config.json").write_text(json.dumps({
        "model_type": "segformer",
        "id2label": {str(i): n for i, n in enumerate(CLASSES)},
        "label2id": {n: i for i, n in enumerate(CLASSES)},
    }))
    (d / "preprocessor_config.json").write_text(json.dumps({
        "image_processor_type": "SegformerImageProcessor",
        "do_resize": True, "size": {"height": 32, "width": 32}, "resample": 2,
        "do_rescale": True, "rescale_factor": 1 / 255,
        "do_normalize": True, "image_mean": [0.485, 0.456, 0.406],
        "image_std": [0.229, 0.224, 0.225], "do_reduce_labels": False,
    }))
    return d


def mmdeploy_folder(d: Path) -> Path:
    """An mmdeploy SDK folder as tools/deploy.py --dump-info writes it for mmseg:
    deploy.json, pipeline.json (keep-ratio Resize into 64x48, Normalize in 0-255 with
    to_rgb, Pad to a multiple of 8; ResizeMask with the argmax in the graph) and
    detail.json, beside end2end.onnx (input `input` float32 [N,3,H,W], output `output`
    int64 [N,1,H,W])."""
    d.mkdir()
    c = len(CLASSES)
    w1, w2 = conv_weights(3, (8, 3, 3, 3), 0.6), conv_weights(4, (c, 8, 3, 3), 0.3)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["input", w1.name], ["h"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("Conv", ["r", w2.name], ["seg_logits"], pads=[1, 1, 1, 1]),
         helper.make_node("ArgMax", ["seg_logits"], ["output"], axis=1, keepdims=1)],
        "end2end",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, "height", "width"])],
        [helper.make_tensor_value_info("output", TensorProto.INT64, ["batch", 1, "height", "width"])],
        [w1, w2])
    save(graph, d / "end2end.onnx", 11)
    (d / "deploy.json").write_text(json.dumps({
        "version": "1.3.1", "task": "Segmentor",
        "models": [{"name": "danet", "net": "end2end.onnx", "weights": "", "backend": "onnxruntime",
                    "precision": "FP32", "batch_size": 1, "dynamic_shape": True}],
        "customs": [],
    }))
    mean, std = [123.675, 116.28, 103.53], [58.395, 57.12, 57.375]
    (d / "pipeline.json").write_text(json.dumps({"pipeline": {
        "input": ["img"], "output": ["post_output"],
        "tasks": [
            {"type": "Task", "module": "Transform", "name": "Preprocess", "input": ["img"],
             "output": ["prep_output"], "transforms": [
                 {"type": "LoadImageFromFile"},
                 {"type": "Resize", "keep_ratio": True, "size": [64, 48]},
                 {"type": "Normalize", "mean": mean, "std": std, "to_rgb": True},
                 {"type": "Pad", "size_divisor": 8},
                 {"type": "ImageToTensor", "keys": ["img"]},
                 {"type": "Collect", "keys": ["img"], "meta_keys": ["img_shape", "ori_shape"]}]},
            {"name": "danet", "type": "Task", "module": "Net", "is_batched": False,
             "input": ["prep_output"], "output": ["infer_output"],
             "input_map": {"img": "input"}, "output_map": {}},
            {"type": "Task", "module": "mmseg", "name": "postprocess", "component": "ResizeMask",
             "params": {"with_argmax": True, "num_classes": c},
             "output": ["post_output"], "input": ["prep_output", "infer_output"]}]}}))
    (d / "detail.json").write_text(json.dumps({
        "version": "1.3.1", "codebase": {"task": "Segmentation", "type": "mmseg"},
        "onnx_config": {"type": "onnx", "input_names": ["input"], "output_names": ["output"],
                        "opset_version": 11, "save_file": "end2end.onnx"},
        "backend_config": {"type": "onnxruntime"},
    }))
    return d


@pytest.fixture(scope="module")
def door_frames(tmp_path_factory: pytest.TempPathFactory) -> Frames:
    d = tmp_path_factory.mktemp("door-frames")
    arrays = frames(2, 40, 56, seed=21) + frames(1, 33, 47, seed=22)
    import cv2

    png, npy = d / "png", d / "npy"
    png.mkdir()
    npy.mkdir()
    raw = []
    for k, img in enumerate(arrays):
        assert cv2.imwrite(str(png / f"f{k}.png"), np.ascontiguousarray(img[:, :, ::-1]))
        np.save(npy / f"f{k}.npy", img)
        raw.append(d / f"f{k}.rgb")
        raw[-1].write_bytes(img.tobytes())
    return Frames(arrays, png, npy, raw)


@pytest.fixture(scope="module")
def door_models(work: Path, checkpoint: Path, door_frames: Frames) -> List[Model]:
    varied = varied_checkpoint(work, checkpoint, door_frames.arrays, "door")
    dynamic, fixed = work / "door-dynamic.onnx", work / "door-fixed.onnx"
    run_segtool("export", "--checkpoint", str(varied), "--onnx", str(dynamic), cwd=work)
    run_segtool("export", "--checkpoint", str(varied), "--onnx", str(fixed),
                "--input-size", f"{FIXED[0]}x{FIXED[1]}", cwd=work)
    int8 = work / "door-dynamic.int8.onnx"
    run_segtool("calibrate", "--model", str(dynamic), "--images", str(door_frames.png_dir),
                "--out", str(int8), "--threads", "1", "--latency-runs", "0", "--quiet", cwd=work)
    return [
        Model("dynamic export", dynamic),
        Model(f"fixed {FIXED[0]}x{FIXED[1]} export", fixed),
        Model("INT8", int8),
        Model("HF fixed graph", hugging_face_folder(work / "door-hf")),
        Model("mmdeploy folder", mmdeploy_folder(work / "door-mmdeploy")),
    ]


# --- the doors ---------------------------------------------------------------------------

def python_segment(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
    try:
        seg = segtool.Segmenter(str(model.path), engine="ort", threads=1)
    except segtool.Error as e:
        return [Refused(f"Segmenter(): {e}")] * len(fr.arrays)
    assert seg.engine == "onnxruntime" and seg.options["threads"] == 1, seg.options
    out: List[Outcome] = []
    for img in fr.arrays:
        try:
            out.append(seg.segment(img).mask)
        except segtool.Error as e:
            out.append(Refused(f"segment(): {e}"))
    return out


def python_batch(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
    try:
        seg = segtool.Segmenter(str(model.path), engine="ort", threads=1)
        return [r.mask for r in seg.segment_batch(fr.arrays)]
    except segtool.Error as e:
        return [Refused(f"segment_batch(): {e}")] * len(fr.arrays)


def cli_labels(out: Path, k: int) -> Optional[Mask]:
    import cv2

    path = out / f"f{k}_labels.png"
    if not path.is_file():
        return None
    mask = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert mask is not None and mask.ndim == 2, path
    return np.asarray(mask, dtype=np.uint8)


CLI_FLAGS = ["--engine", "ort", "--threads", "1", "--labels", "--no-overlay", "--quiet"]


def cli_one_by_one(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
    out: List[Outcome] = []
    for k in range(len(fr.arrays)):
        dest = tmp / f"one-{k}"
        p = run([SEGTOOL, "infer", "--model", model.path, "--input", fr.png_dir / f"f{k}.png",
                 "--out", dest, "--batch-size", "1", *CLI_FLAGS])
        mask = cli_labels(dest, k) if p.returncode == 0 else None
        out.append(mask if mask is not None else Refused(f"exit {p.returncode}: {tail(p.stderr)}"))
        assert p.returncode != 0 or b"engine onnxruntime" in p.stderr, p.stderr.decode()
    return out


def cli_batch(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
    dest = tmp / "batch"
    p = run([SEGTOOL, "infer", "--model", model.path, "--input", fr.png_dir, "--out", dest,
             "--batch-size", "4", *CLI_FLAGS])
    assert p.returncode != 0 or b"engine onnxruntime" in p.stderr, p.stderr.decode()
    out: List[Outcome] = []
    for k in range(len(fr.arrays)):
        mask = cli_labels(dest, k) if p.returncode == 0 else None
        out.append(mask if mask is not None else Refused(f"exit {p.returncode}: {tail(p.stderr)}"))
    return out


C_PROGRAM = r"""
/* every_door MODEL OUT_DIR [W H RAW]...: opens MODEL on ONNX Runtime with one thread and
 * segments each packed rgb24 frame: OUT_DIR/<k>.u8 gets its class map, or stdout a line
 * "refused <k>: ...". A model that does not open: "open refused: ...", exit 3. */
#include <segtool.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc < 3 || (argc - 3) % 3 != 0) {
        fprintf(stderr, "usage: every_door MODEL OUT_DIR [W H RAW]...\n");
        return 2;
    }
    segtool_options opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_ORT;
    opts.threads = 1;
    segtool_segmenter *seg = NULL;
    segtool_status st = segtool_open(argv[1], &opts, &seg);
    if (st != SEGTOOL_OK) {
        printf("open refused: status %d: %s\n", (int)st, segtool_last_error());
        return 3;
    }
    fprintf(stderr, "engine %s, options %s\n", segtool_engine_name(seg), segtool_options_json(seg));
    for (int k = 0; 3 + 3 * k < argc; k++) {
        uint32_t w = (uint32_t)strtoul(argv[3 + 3 * k], NULL, 10);
        uint32_t h = (uint32_t)strtoul(argv[4 + 3 * k], NULL, 10);
        size_t n = (size_t)w * h * 3;
        uint8_t *rgb = malloc(n);
        FILE *f = fopen(argv[5 + 3 * k], "rb");
        if (!rgb || !f || fread(rgb, 1, n, f) != n) {
            fprintf(stderr, "cannot read %s\n", argv[5 + 3 * k]);
            return 2;
        }
        fclose(f);
        segtool_result *res = NULL;
        st = segtool_segment(seg, rgb, w, h, 0, &res);
        free(rgb);
        if (st != SEGTOOL_OK) {
            printf("refused %d: status %d: %s\n", k, (int)st, segtool_last_error());
            continue;
        }
        if (segtool_result_width(res) != w || segtool_result_height(res) != h) {
            printf("refused %d: a %ux%u class map for a %ux%u frame\n", k,
                   segtool_result_width(res), segtool_result_height(res), w, h);
            segtool_result_free(res);
            continue;
        }
        char path[4096];
        snprintf(path, sizeof path, "%s/%d.u8", argv[2], k);
        FILE *o = fopen(path, "wb");
        if (!o || fwrite(segtool_result_class_map(res), 1, (size_t)w * h, o) != (size_t)w * h) {
            fprintf(stderr, "cannot write %s\n", path);
            return 2;
        }
        fclose(o);
        segtool_result_free(res);
    }
    segtool_close(seg);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        cannot_drive("C", f"no C compiler ({cc}; set CC)")
    lib = newest("libsegtool.so").parent
    d = tmp_path_factory.mktemp("door-c")
    (d / "every_door.c").write_text(C_PROGRAM)
    exe = d / "every_door"
    p = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", str(d / "every_door.c"),
         "-I", str(REPO / "capi" / "include"), "-L", str(lib), "-lsegtool",
         f"-Wl,-rpath,{lib}", "-o", str(exe)],
        capture_output=True, text=True)
    assert p.returncode == 0, f"compiling the C door failed:\n{p.stderr}"
    return exe


def c_door(exe: Path) -> Callable[[Model, Frames, Path], List[Outcome]]:
    def door(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
        args: List[Union[str, Path]] = [exe, model.path, tmp]
        for img, raw in zip(fr.arrays, fr.raw):
            args += [str(img.shape[1]), str(img.shape[0]), raw]
        p = run(args)
        stdout = p.stdout.decode(errors="replace")
        if p.returncode == 3:
            return [Refused(stdout.strip())] * len(fr.arrays)
        assert p.returncode == 0, f"the C program failed: {tail(p.stderr)} {stdout}"
        assert "engine onnxruntime" in p.stderr.decode() and '"threads":1' in p.stderr.decode(), \
            p.stderr.decode()
        out: List[Outcome] = []
        for k, img in enumerate(fr.arrays):
            path = tmp / f"{k}.u8"
            if path.is_file():
                h, w = img.shape[:2]
                out.append(np.fromfile(path, np.uint8).reshape(h, w))
            else:
                lines = [line for line in stdout.splitlines() if line.startswith(f"refused {k}:")]
                out.append(Refused(lines[0] if lines else stdout.strip()))
        return out

    return door


@pytest.fixture(scope="module")
def gst_plugin_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("gst-launch-1.0") is None:
        cannot_drive("GStreamer", "gst-launch-1.0 not found (scripts/setup.sh installs gstreamer1.0-tools)")
    d = tmp_path_factory.mktemp("door-gst")
    (d / "plugins").mkdir()
    shutil.copy(newest("libgstsegtool.so"), d / "plugins" / "libgstsegtool.so")
    return d


def gst_door(d: Path) -> Callable[[Model, Frames, Path], List[Outcome]]:
    env = door_env(GST_PLUGIN_PATH=str(d / "plugins"), GST_REGISTRY=str(d / "registry.bin"))

    def door(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
        procs = []
        for k in range(len(fr.arrays)):
            sink = tmp / f"{k}.gray"
            pipeline = (f"filesrc location={fr.png_dir / f'f{k}.png'} ! pngdec ! videoconvert "
                        f"! video/x-raw,format=RGB ! segtoolseg model={model.path} engine=ort "
                        f"threads=1 output=mask ! video/x-raw,format=GRAY8 "
                        f"! filesink location={sink}")
            procs.append(subprocess.Popen(["gst-launch-1.0", "-q", *pipeline.split()], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        out: List[Outcome] = []
        for k, (img, proc) in enumerate(zip(fr.arrays, procs)):
            text, _ = proc.communicate(timeout=LIMIT_S)
            sink = tmp / f"{k}.gray"
            data = np.fromfile(sink, np.uint8) if sink.is_file() else np.zeros(0, np.uint8)
            h, w = img.shape[:2]
            stride = (w + 3) // 4 * 4  # GStreamer's GRAY8 rows: 4-byte aligned
            if proc.returncode != 0 or data.size == 0:
                out.append(Refused(f"exit {proc.returncode}: {tail(text)}"))
            elif data.size == h * w:
                out.append(data.reshape(h, w))
            elif data.size == h * stride:
                out.append(np.ascontiguousarray(data.reshape(h, stride)[:, :w]))
            else:
                out.append(Refused(f"a {data.size}-byte mask for a {w}x{h} frame"))
        return out

    return door


def ros2_python() -> str:
    python = os.environ.get("SEGTOOL_PYTHON")
    if not python:
        cannot_drive("ROS 2", "SEGTOOL_PYTHON (the project venv, with rosbags and cyclonedds) is not set: "
                     'source "$(bash scripts/setup.sh)"')
    assert python is not None
    return python


def ros2_bag_door(python: str) -> Callable[[Model, Frames, Path], List[Outcome]]:
    def door(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
        bag = tmp / "bag"
        p = run([python, ROS2_SCRIPT, "bag-write", fr.npy_dir, bag])
        assert p.returncode == 0, f"writing the bag: {tail(p.stderr, 20)}"
        masks = tmp / "masks.mcap"
        p = run([BIN_DIR / "segtool-ros2", "bag", "--model", model.path, "--engine", "ort",
                 "--threads", "1", "-i", bag, "-t", "/cam/image_raw", "-o", masks])
        stderr = tail(p.stderr)
        if p.returncode != 0 and not masks.is_file():
            return [Refused(f"exit {p.returncode}: {stderr}")] * len(fr.arrays)
        assert b"onnxruntime on cpu" in p.stderr, p.stderr.decode()
        dump = tmp / "dump"
        r = run([python, ROS2_SCRIPT, "bag-read", masks, "/cam/class_mask", dump])
        assert r.returncode == 0, f"reading the masks bag: {tail(r.stderr, 20)}"
        read = json.loads(r.stdout)
        assert all(e == "mono8" for e in read["encodings"]), read
        return [np.load(dump / f"{k}.npy") if (dump / f"{k}.npy").is_file()
                else Refused(f"no class mask in the bag (exit {p.returncode}): {stderr}")
                for k in range(len(fr.arrays))]

    return door


def ros2_live_door(python: str) -> Callable[[Model, Frames, Path], List[Outcome]]:
    index = [0]

    def door(model: Model, fr: Frames, tmp: Path) -> List[Outcome]:
        index[0] += 1
        # A domain of this process's own, and topics no other test uses.
        domain = 201 + (os.getpid() + index[0]) % 30
        name = f"every_door_{os.getpid()}_{index[0]}"
        node = subprocess.Popen(
            [str(BIN_DIR / "segtool-ros2"), "node", "--model", str(model.path), "--engine", "ort",
             "--threads", "1", "--reliable", "--name", name, "--diagnostics-period", "0.2",
             "--ros-args", "-r", "__ns:=/every_door", "-r", "image:=/every_door/image_raw"],
            env=door_env(ROS_DOMAIN_ID=str(domain)), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            live = run([python, ROS2_SCRIPT, "live", "--domain", str(domain),
                        "--topic", "/every_door/image_raw", "--masks", "/every_door/class_mask",
                        "--node", name, fr.npy_dir, tmp / "dump", "--timeout", "20"])
        finally:
            if node.poll() is None:
                node.send_signal(signal.SIGINT)
            try:
                _, node_err = node.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                node.kill()
                _, node_err = node.communicate()
        assert live.returncode == 0, f"the DDS peer failed: {tail(live.stderr, 20)}"
        summary = json.loads(live.stdout)
        if not summary["matched"]:
            if node.returncode not in (0, -signal.SIGINT, None):
                return [Refused(f"node exit {node.returncode}: {tail(node_err)}")] * len(fr.arrays)
            cannot_drive("ROS 2 live node", f"no DDS discovery on domain {domain} within 15 s "
                         f"(node: {tail(node_err)})")
        options = json.loads(summary["diagnostics"].get("options", "{}"))
        assert options.get("engine") == "ort" and options.get("threads") == 1, summary["diagnostics"]
        out: List[Outcome] = []
        for f in summary["frames"]:
            k = f["i"]
            if f["outcome"] == "mask":
                out.append(np.load(tmp / "dump" / f"{k}.npy"))
            else:
                out.append(Refused(f"{f['outcome']} (diagnostics {summary['diagnostics']}; "
                                   f"node: {tail(node_err)})"))
        return out

    return door


# --- the comparison ------------------------------------------------------------------------

DOORS = ["python segment_batch", "CLI one by one", "CLI batch", "C segtool_segment",
         "GStreamer", "ROS 2 bag", "ROS 2 live node"]
TABLE: Dict[str, Dict[str, str]] = {}  # model -> door -> cell
REFERENCE: Dict[str, List[Outcome]] = {}  # model -> Python segment's outcomes


def compare(ref: List[Outcome], got: List[Outcome]) -> Tuple[str, List[str]]:
    """The table cell and the differences, frame by frame."""
    if len(got) != len(ref):
        return f"{len(got)} answers", [f"{len(got)} outcomes for {len(ref)} frames"]
    notes, problems = [], []
    for k, (r, g) in enumerate(zip(ref, got)):
        if isinstance(r, Refused) and isinstance(g, Refused):
            notes.append(f"f{k} refused alike")
        elif isinstance(r, Refused):
            assert not isinstance(g, Refused)
            notes.append(f"f{k} answered (ref refuses)")
            problems.append(f"frame {k}: this door answers, Python segment refuses ({r.why})")
        elif isinstance(g, Refused):
            notes.append(f"f{k} refused (ref answers)")
            problems.append(f"frame {k}: this door refuses ({g.why}), Python segment answers")
        elif g.shape != r.shape:
            notes.append(f"f{k} {g.shape[1]}x{g.shape[0]}")
            problems.append(f"frame {k}: a {g.shape} class map, Python segment's is {r.shape}")
        elif not np.array_equal(g, r):
            n = int((g != r).sum())
            notes.append(f"f{k} DIFFERS {n} px")
            problems.append(f"frame {k}: DIFFERS at {n} of {r.size} pixels")
        else:
            notes.append("same")
    if all(n == "same" for n in notes):
        return "same", problems
    if all(n.endswith("refused alike") for n in notes):
        return "refused", problems
    if all(n.endswith("refused (ref answers)") for n in notes):
        return "REFUSED (ref answers)", problems
    return ", ".join(n for n in notes if n != "same") or "same", problems


def table() -> str:
    doors = ["python segment"] + [d for d in DOORS if any(d in row for row in TABLE.values())]
    width = max(len(m) for m in TABLE) if TABLE else 10
    cols = [max(len(d), *(len(row.get(d, "")) for row in TABLE.values())) for d in doors]
    lines = ["model".ljust(width) + " | " + " | ".join(d.ljust(c) for d, c in zip(doors, cols))]
    for model, row in TABLE.items():
        lines.append(model.ljust(width) + " | "
                     + " | ".join(row.get(d, "-").ljust(c) for d, c in zip(doors, cols)))
    return "\n".join(lines)


@pytest.fixture(scope="module")
def reference(door_models: List[Model], door_frames: Frames,
              tmp_path_factory: pytest.TempPathFactory) -> Dict[str, List[Outcome]]:
    for model in door_models:
        out = python_segment(model, door_frames, tmp_path_factory.mktemp("door-ref"))
        REFERENCE[model.name] = out
        ref_cell = ("refused" if all(isinstance(o, Refused) for o in out) else
                    "answers" if not any(isinstance(o, Refused) for o in out) else
                    "refuses " + ",".join(f"f{k}" for k, o in enumerate(out) if isinstance(o, Refused)))
        TABLE.setdefault(model.name, {})["python segment"] = ref_cell
    # The maps vary (a door answering constants would not agree by luck), and the fixed
    # export's frames are none of its size.
    for name, outs in REFERENCE.items():
        for k, o in enumerate(outs):
            if not isinstance(o, Refused):
                assert len(np.unique(o)) >= 2, f"{name}, frame {k}: one class everywhere"
    assert all(img.shape[:2] != FIXED for img in door_frames.arrays)
    return REFERENCE


def check_door(door: str, run_door: Callable[[Model, Frames, Path], List[Outcome]],
               models: List[Model], fr: Frames, ref: Dict[str, List[Outcome]], tmp: Path) -> None:
    t0 = time.time()
    problems = []
    for i, model in enumerate(models):
        d = tmp / f"m{i}"
        d.mkdir()
        cell, found = compare(ref[model.name], run_door(model, fr, d))
        TABLE[model.name][door] = cell
        problems += [f"{model.name} x {door}: {p}" for p in found]
    print(f"\n{door}: {time.time() - t0:.1f} s\n{table()}")
    refusals = [f"  {m}: python segment refuses frame {k}: {o.why}"
                for m, outs in ref.items() for k, o in enumerate(outs) if isinstance(o, Refused)]
    assert not problems, (
        f"the {door} door does not give Python segment's answer (class maps bit for bit, "
        f"or the same refusals):\n  " + "\n  ".join(problems) + "\n"
        + ("\n".join(refusals) + "\n" if refusals else "") + table())


def test_python_segment_reference(reference: Dict[str, List[Outcome]]) -> None:
    """The reference itself: print what Python's segment does with each model (a refusal
    is allowed here; every other door must then refuse alike)."""
    print("\n" + table())
    for name, outs in reference.items():
        for k, o in enumerate(outs):
            if isinstance(o, Refused):
                print(f"{name}: python segment refuses frame {k}: {o.why}")


def test_python_segment_batch(door_models: List[Model], door_frames: Frames,
                              reference: Dict[str, List[Outcome]], tmp_path: Path) -> None:
    check_door("python segment_batch", python_batch, door_models, door_frames, reference, tmp_path)


def test_cli_one_image_at_a_time(door_models: List[Model], door_frames: Frames,
                                 reference: Dict[str, List[Outcome]], tmp_path: Path) -> None:
    check_door("CLI one by one", cli_one_by_one, door_models, door_frames, reference, tmp_path)


def test_cli_in_batches(door_models: List[Model], door_frames: Frames,
                        reference: Dict[str, List[Outcome]], tmp_path: Path) -> None:
    check_door("CLI batch", cli_batch, door_models, door_frames, reference, tmp_path)


def test_c_segtool_segment(door_models: List[Model], door_frames: Frames,
                           reference: Dict[str, List[Outcome]], c_program: Path, tmp_path: Path) -> None:
    check_door("C segtool_segment", c_door(c_program), door_models, door_frames, reference, tmp_path)


def test_gstreamer_element(door_models: List[Model], door_frames: Frames,
                           reference: Dict[str, List[Outcome]], gst_plugin_path: Path,
                           tmp_path: Path) -> None:
    check_door("GStreamer", gst_door(gst_plugin_path), door_models, door_frames, reference, tmp_path)


def test_ros2_bag_converter(door_models: List[Model], door_frames: Frames,
                            reference: Dict[str, List[Outcome]], tmp_path: Path) -> None:
    check_door("ROS 2 bag", ros2_bag_door(ros2_python()), door_models, door_frames, reference, tmp_path)


def test_ros2_live_node(door_models: List[Model], door_frames: Frames,
                        reference: Dict[str, List[Outcome]], tmp_path: Path) -> None:
    check_door("ROS 2 live node", ros2_live_door(ros2_python()), door_models, door_frames,
               reference, tmp_path)
