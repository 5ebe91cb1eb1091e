"""Fixtures: a tiny DANet trained for two iterations by the segtool binary and exported
three ways (plain, --preprocess, --argmax), and the references the tests compare with
(onnxruntime's Python API with numpy pre/post-processing, the segtool command line)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Dict, List

import numpy as np
import numpy.typing as npt
import onnxruntime as ort
import pytest

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
