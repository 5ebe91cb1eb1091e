"""Fixtures: a tiny DANet trained for two iterations by the segtool binary and exported
three ways (plain, --preprocess, --argmax), its classifier re-centred so every class wins
somewhere (`varied_checkpoint`), and the references the tests compare with
(onnxruntime's Python API with numpy pre/post-processing, the segtool command line)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Callable, Dict, List, Sequence

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

import segtool as segtool_package

REPO = Path(__file__).resolve().parents[2]
SEGTOOL = os.environ.get("SEGTOOL_BIN", str(REPO / "target" / "debug" / "segtool"))


def segtool(*args: str, cwd: Path, stdin: bytes = b"") -> bytes:
    """Runs the segtool binary; its stdout, or a failure with its stderr."""
    proc = subprocess.run([SEGTOOL, *args], cwd=cwd, input=stdin, capture_output=True)
    if proc.returncode != 0:
        raise AssertionError(f"segtool {' '.join(args)} failed:\n{proc.stderr.decode()}")
    return proc.stdout


@pytest.fixture(scope="session")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("segtool")


@pytest.fixture(scope="session")
def checkpoint(work: Path) -> Path:
    segtool(
        "train", "--stop-at", "2", "--set", "optim.iterations=2",
        "--set", "data.shapes_val_count=2", "--threads", "1", cwd=work,
    )
    ckpt = work / "runs" / "shapes-tiny" / "last.safetensors"
    assert ckpt.exists()
    return ckpt


@pytest.fixture(scope="session")
def models(work: Path, checkpoint: Path) -> Dict[str, Path]:
    out = {}
    for name, flags in [("plain", []), ("preprocess", ["--preprocess"]), ("argmax", ["--argmax"])]:
        onnx = work / f"{name}.onnx"
        segtool("export", "--checkpoint", str(checkpoint), "--onnx", str(onnx), *flags, cwd=work)
        out[name] = onnx
    return out


def frames(n: int, h: int = 40, w: int = 56, seed: int = 0) -> List[npt.NDArray[np.uint8]]:
    """Smooth random RGB images (blobs, so the model's classes vary over the image)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        small = rng.integers(0, 256, size=(h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
        img = np.repeat(np.repeat(small, 8, axis=0), 8, axis=1)[:h, :w]
        noise = rng.integers(0, 24, size=img.shape, dtype=np.uint8)
        out.append(np.ascontiguousarray(img // 2 + noise))
    return out


class OrtReference:
    """onnxruntime-Python plus numpy: what a user writes without segtool."""

    def __init__(self, path: Path, spec: Dict[str, object]) -> None:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        self.session = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
        self.input = self.session.get_inputs()[0]
        self.mean = np.asarray(spec["mean"], dtype=np.float32)
        self.std = np.asarray(spec["std"], dtype=np.float32)

    def logits_or_mask(self, img: npt.NDArray[np.uint8]) -> npt.NDArray[np.generic]:
        if self.input.type == "tensor(uint8)":
            x: npt.NDArray[np.generic] = img[None]
        else:
            norm = (img.astype(np.float32) / np.float32(255.0) - self.mean) / self.std
            x = np.ascontiguousarray(norm.transpose(2, 0, 1)[None], dtype=np.float32)
        out: npt.NDArray[np.generic] = self.session.run(None, {self.input.name: x})[0]
        return out

    def mask(self, img: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
        out = self.logits_or_mask(img)
        if out.ndim == 4:
            mask: npt.NDArray[np.uint8] = np.argmax(out[0], axis=0).astype(np.uint8)
        else:
            mask = out[0].astype(np.uint8)
        return mask


def safetensors_edit(src: Path, dst: Path, edit: Callable[[Dict[str, npt.NDArray[np.float32]]], None],
                     names: Sequence[str]) -> None:
    """Rewrites the float32 tensors `names` of a safetensors file in place (same shapes),
    everything else (the spec in its metadata) byte for byte."""
    blob = bytearray(src.read_bytes())
    n = int.from_bytes(blob[:8], "little")
    header = json.loads(blob[8:8 + n])
    base = 8 + n
    tensors: Dict[str, npt.NDArray[np.float32]] = {}
    for name in names:
        meta = header[name]
        assert meta["dtype"] == "F32", meta
        s, e = meta["data_offsets"]
        tensors[name] = np.frombuffer(bytes(blob[base + s:base + e]), "<f4").reshape(meta["shape"]).copy()
    edit(tensors)
    for name in names:
        s, e = header[name]["data_offsets"]
        raw = np.ascontiguousarray(tensors[name], "<f4").tobytes()
        assert len(raw) == e - s
        blob[base + s:base + e] = raw
    dst.write_bytes(bytes(blob))


def varied_checkpoint(work: Path, checkpoint: Path, sample: List[npt.NDArray[np.uint8]],
                      name: str) -> Path:
    """The session's checkpoint with DANet's output classifier (head.conv8) re-centred on
    each class's mean logit over `sample` and scaled by 4, so that every class wins
    somewhere (the 2-iteration checkpoint alone answers background everywhere)."""
    first = work / f"{name}-first.onnx"
    segtool("export", "--checkpoint", str(checkpoint), "--onnx", str(first), cwd=work)
    seg = segtool_package.Segmenter(str(first), engine="ort", threads=1, logits=True)
    scores = [np.asarray(seg.segment(img).scores) for img in sample]
    mean = np.concatenate([s.reshape(s.shape[0], -1) for s in scores], axis=1).mean(axis=1)
    k = 4.0

    def edit(t: Dict[str, npt.NDArray[np.float32]]) -> None:
        t["head.conv8.1.weight"] = t["head.conv8.1.weight"] * k
        t["head.conv8.1.bias"] = (t["head.conv8.1.bias"] - mean) * k

    out = work / f"{name}-varied.safetensors"
    safetensors_edit(checkpoint, out, edit, ["head.conv8.1.weight", "head.conv8.1.bias"])
    return out
