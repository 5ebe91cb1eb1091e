"""Segmenter against independent references: onnxruntime-Python + numpy on the same
export (exact: both run ONNX Runtime's CPU kernels on bit-identical inputs, one thread),
tract against ORT, accuracy mode against `segtool eval`, and the wheel without
onnxruntime (tract, fallback reported)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

import segtool
from conftest import OrtReference, frames, segtool as run_segtool


@pytest.mark.parametrize("kind", ["plain", "preprocess", "argmax"])
def test_masks_equal_onnxruntime_python(models: Dict[str, Path], kind: str) -> None:
    seg = segtool.Segmenter(models[kind], engine="ort", providers=["cpu"], threads=1)
    assert seg.engine == "onnxruntime" and seg.provider == "cpu"
    assert seg.fallbacks == []
    ref = OrtReference(models[kind], seg.spec)
    imgs = frames(4)
    for img in imgs:
        out = seg.segment(img)
        assert out.mask.dtype == np.uint8 and out.mask.shape == img.shape[:2]
        np.testing.assert_array_equal(out.mask, ref.mask(img))
        assert out.timings is not None and out.timings.engine > 0
    # One engine call for the batch; same masks.
    for img, out in zip(imgs, seg.segment_batch(imgs)):
        np.testing.assert_array_equal(out.mask, ref.mask(img))
    # BGR input (OpenCV's order) and views that are not C-contiguous give the same masks.
    img = imgs[0]
    want = ref.mask(img)
    np.testing.assert_array_equal(seg.segment(np.ascontiguousarray(img[:, :, ::-1]), color="bgr").mask, want)
    np.testing.assert_array_equal(seg.segment(img[:, :, ::-1], color="bgr").mask, want)
    wide = np.zeros((img.shape[0], img.shape[1] * 2, 3), np.uint8)
    wide[:, ::2] = img
    assert not wide[:, ::2].flags.c_contiguous
    np.testing.assert_array_equal(seg.segment(wide[:, ::2]).mask, want)
    t = np.ascontiguousarray(img.transpose(1, 0, 2))
    np.testing.assert_array_equal(seg.segment(t.transpose(1, 0, 2)).mask, want)


def test_scores_equal_onnxruntime_logits(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    ref = OrtReference(models["plain"], seg.spec)
    img = frames(1, seed=3)[0]
    out = seg.segment(img, scores=True)
    assert out.scores is not None and out.scores.dtype == np.float32
    np.testing.assert_array_equal(out.scores, ref.logits_or_mask(img)[0])
    assert out.scores.flags.owndata or out.scores.base is not None
    with pytest.raises(segtool.InputError, match="--argmax"):
        segtool.Segmenter(models["argmax"], engine="ort").segment(img, scores=True)


def test_tract_equals_ort(models: Dict[str, Path]) -> None:
    ort_seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    tract = segtool.Segmenter(models["plain"], engine="tract", threads=1)
    assert tract.engine == "tract"
    for img in frames(3, seed=5):
        a, b = ort_seg.segment(img, scores=True), tract.segment(img, scores=True)
        assert a.scores is not None and b.scores is not None
        # Different kernels, same maths: logits within 1e-3 absolute; class maps may
        # differ only where two classes tie within that (here: at most 0.1% of pixels).
        np.testing.assert_allclose(a.scores, b.scores, atol=1e-3, rtol=1e-4)
        assert np.mean(a.mask == b.mask) >= 0.999


def test_spec_and_fallbacks(models: Dict[str, Path], caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="segtool"):
        seg = segtool.Segmenter(models["plain"], providers=["cuda:0", "cpu"])  # no CUDA here
    spec = seg.spec
    assert len(spec["classes"]) == len(spec["palette"]) >= 2
    assert spec["protocol"] is None and spec["input"] == "NchwF32"
    if seg.provider == "cpu":
        assert [f.kind for f in seg.fallbacks] == ["provider"]
        assert "cuda:0 requested, running on cpu" in seg.fallbacks[0].reason
        assert any("cuda:0 requested" in r.getMessage() for r in caplog.records)
    tract = segtool.Segmenter(models["plain"], engine="tract", providers=["cuda:0"])
    assert [f.kind for f in tract.fallbacks] == ["tract_cpu_only"]
    assert tract.engine_choice is None
    # auto names its choice: ONNX Runtime here, since CUDA was asked for; on the CPU alone,
    # the engine it timed fastest, with the timings.
    assert seg.engine_choice == "auto chose onnxruntime: cuda:0 asked for", seg.engine_choice
    cpu = segtool.Segmenter(models["plain"], providers=["cpu"], threads=1)
    choice = cpu.engine_choice
    assert choice is not None and choice.startswith(f"auto chose {cpu.engine}: "), choice
    assert "timed on this machine at" in choice and " ms" in choice, choice


def test_accuracy_mode_equals_segtool_eval(work: Path, checkpoint: Path, models: Dict[str, Path]) -> None:
    import cv2

    data, pred = work / "eval-data", work / "eval-pred"
    run_segtool("generate", "--size", "64", "--train-count", "1", "--val-count", "3", "--out", str(data), cwd=work)
    run_segtool(
        "eval", "--checkpoint", str(checkpoint), "--data", str(data), "--split", "val",
        "--protocol", "danet", "--base-size", "80", "--crop", "48", "--flip", "--threads", "1",
        "--predictions", str(pred), cwd=work,
    )
    seg = segtool.Segmenter(
        models["plain"], engine="ort", threads=1, protocol="danet", base_size=80, crop=48, flip=True
    )
    assert seg.spec["protocol"] == "danet"
    names = sorted(p.stem for p in (data / "images" / "val").iterdir())
    assert len(names) == 3
    for name in names:
        img = cv2.imread(str(next((data / "images" / "val").glob(name + ".*"))))
        theirs = cv2.imread(str(pred / f"{name}.png"), cv2.IMREAD_UNCHANGED)
        assert img is not None and theirs is not None
        ours = seg.segment(img, color="bgr").mask
        assert ours.shape == theirs.shape
        # libtorch (eval) and ONNX Runtime differ in the last float bits; the protocol
        # (resize to long side 80, 48-pixel windows, flip, exp scores) is the same.
        assert np.mean(ours == theirs) >= 0.995, name
    with pytest.raises(segtool.InputError, match="accuracy mode"):
        segtool.Segmenter(models["argmax"], engine="ort", protocol="danet")


def test_without_onnxruntime_tract_runs_and_fallback_is_reported(models: Dict[str, Path], tmp_path: Path) -> None:
    """The package alone (numpy, no onnxruntime on the path): tract, and the fallback
    reported in `fallbacks` and on the `segtool` logger."""
    import numpy

    site = tmp_path / "site"
    site.mkdir()
    for mod in (numpy, segtool):
        src = Path(mod.__file__).parent  # type: ignore[arg-type]
        (site / src.name).symlink_to(src)
        libs = src.parent / f"{src.name}.libs"
        if libs.exists():
            (site / libs.name).symlink_to(libs)
    code = textwrap.dedent(f"""
        import sys, logging
        sys.path.insert(0, {str(site)!r})
        records = []
        class Keep(logging.Handler):
            def emit(self, r): records.append(r.getMessage())
        logging.getLogger("segtool").addHandler(Keep())
        import numpy as np, segtool
        seg = segtool.Segmenter({str(models["plain"])!r}, providers=["cpu"])
        # auto times what opens (tract; OpenVINO where its library loads) and keeps the fastest.
        assert seg.engine in ("tract", "openvino"), (seg.engine, seg.engine_choice)
        assert seg.engine_choice.startswith(f"auto chose {{seg.engine}}: "), seg.engine_choice
        assert "onnxruntime is missing" in seg.engine_choice, seg.engine_choice
        assert [f.kind for f in seg.fallbacks] == ["ort_library_missing"], seg.fallbacks
        assert "ONNX Runtime cannot be loaded" in seg.fallbacks[0].reason
        assert any("ONNX Runtime cannot be loaded" in m for m in records), records
        out = seg.segment(np.zeros((24, 32, 3), np.uint8))
        assert out.mask.shape == (24, 32)
        with_ort = [c for c in segtool.ort_library_candidates() if "package" in c[1]]
        assert with_ort == [], with_ort
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("SEGTOOL_ORT_LIB", "ORT_DYLIB_PATH", "PYTHONPATH")}
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok" and proc.stderr == ""


def test_segtool_ort_lib_is_tried_first(models: Dict[str, Path]) -> None:
    env = {**os.environ, "SEGTOOL_ORT_LIB": "/nonexistent/libonnxruntime.so"}
    code = (
        "import segtool; c = segtool.ort_library_candidates(); "
        "assert c[0] == ('/nonexistent/libonnxruntime.so', 'SEGTOOL_ORT_LIB'), c; "
        "assert c[1][1] == 'the onnxruntime package', c; "
        f"s = segtool.Segmenter({str(models['plain'])!r}, engine='ort', providers=['cpu']); "
        "assert s.engine == 'onnxruntime'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr


def test_colorize_and_overlay(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    img = frames(1)[0]
    mask = seg.segment(img).mask
    palette = np.asarray(seg.spec["palette"], dtype=np.uint8)
    color = segtool.colorize(mask, seg.spec["palette"])
    np.testing.assert_array_equal(color, palette[mask])
    blend = segtool.overlay(img, mask, alpha=1.0, palette=palette)
    np.testing.assert_array_equal(blend, palette[mask])
    np.testing.assert_array_equal(segtool.overlay(img, mask, alpha=0.0, palette=palette), img)
    with pytest.raises(segtool.InputError, match="mask of the image's size"):
        segtool.overlay(img, mask[:-1], palette=palette)


def test_fixed_size(models: Dict[str, Path]) -> None:
    img = frames(1, seed=8)[0]
    h, w = img.shape[:2]
    fixed = segtool.Segmenter(models["plain"], engine="ort", threads=1, fixed_size=(h, w))
    ref = OrtReference(models["plain"], fixed.spec)
    np.testing.assert_array_equal(fixed.segment(img).mask, ref.mask(img))
    with pytest.raises(segtool.Error):
        fixed.segment(frames(1, h + 8, w, seed=8)[0])


def test_every_option_arrives_and_is_reported(models: Dict[str, Path]) -> None:
    """Each of the runtime's options (SegmenterOptions::NAMES), set through its keyword
    argument to a value other than its default, is what the opened segmenter reports."""
    defaults = segtool.Segmenter(models["plain"], engine="tract").options
    assert defaults == {
        "engine": "tract", "providers": ["cpu"], "device": "CPU", "precision": "f32",
        "hint": "latency", "streams": None, "threads": None, "card": None, "strict": False,
        "fixed_size": None, "logits": False,
    }
    img = frames(1, seed=3)[0]
    h, w = img.shape[:2]
    ort_seg = segtool.Segmenter(
        models["plain"], engine="ort", providers=["cuda:0", "cpu"], threads=1,
        fixed_size=(h, w), logits=True,
    )
    assert ort_seg.options == {
        **defaults, "engine": "ort", "providers": ["cuda:0", "cpu"], "threads": 1,
        "fixed_size": [h, w], "logits": True,
    }
    # logits: every result carries its scores, unless the call says otherwise.
    assert ort_seg.segment(img).scores is not None
    assert ort_seg.segment(img, scores=False).scores is None
    # A read-only report: changing the dict changes nothing.
    ort_seg.options["threads"] = 7
    assert ort_seg.options["threads"] == 1
    openvino = dict(
        engine="openvino", device="CPU", precision="bf16", hint="throughput", streams=2,
        threads=1, strict=True,
    )
    try:
        ov = segtool.Segmenter(models["plain"], **openvino)  # type: ignore[arg-type]
    except segtool.EngineError as e:
        # A missing library is a skip, except where every reference must be present.
        if "OpenVINO cannot be loaded" not in str(e) or os.environ.get("SEGTOOL_REQUIRE_REFERENCES") == "1":
            raise
        pytest.skip(f"no OpenVINO library here: {e}")
    assert ov.options == {**defaults, **openvino}
    # 0 threads and streams: the engine's and the hint's own, reported as None.
    zero = segtool.Segmenter(models["plain"], engine="tract", threads=0)
    assert zero.options["threads"] is None
    with pytest.raises(segtool.InputError, match="option hint"):
        segtool.Segmenter(models["plain"], engine="tract", hint="fastest")


def test_model_options_are_keyword_arguments_of_the_same_names() -> None:
    """The options that open a model have one set of names in the runtime
    (SegmenterOptions): Segmenter takes them as keyword arguments under those names."""
    import inspect

    params = inspect.signature(segtool.Segmenter).parameters
    names = ["engine", "providers", "device", "precision", "hint", "streams", "threads"]
    for name in names + ["card", "strict", "fixed_size", "logits"]:
        assert name in params, (name, list(params))
