"""A model segtool did not write, served from Python by its model card: a small conv net
written with onnx's own helpers (BGR input, its own input/output names, logits at half
the input resolution), a card file naming all of that, and onnxruntime-Python on the same
preprocessing as the reference. Masks must match pixel for pixel except at near-ties of
the upsampled logits (gap under 1e-4; the logits span about 10)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import segtool

MEAN = [110.0, 120.0, 130.0]  # BGR order, on 0-255 pixels
STD = [50.0, 60.0, 70.0]
CLASSES = ["sky", "road", "car"]


def write_model(path: Path) -> None:
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((len(CLASSES), 3, 3, 3)) * 2.0).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["pixels", "W"], ["scores"], strides=[2, 2], pads=[1, 1, 1, 1]),
    ]
    graph = helper.make_graph(
        nodes, "foreign",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", len(CLASSES), "h", "w"])],
        [helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.flatten().tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))


def reference(model: Path, rgb: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]:
    """onnxruntime on the card's preprocessing, logits upsampled like PyTorch's
    F.interpolate(bilinear, align_corners=False), argmax."""
    bgr = rgb[:, :, ::-1].astype(np.float32)
    x = ((bgr - np.array(MEAN, np.float32)) / np.array(STD, np.float32)).transpose(2, 0, 1)[None]
    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    logits = sess.run(["scores"], {"pixels": x})[0][0]
    mask: npt.NDArray[np.uint8] = upsample(logits, rgb.shape[0], rgb.shape[1]).argmax(axis=0).astype(np.uint8)
    return mask


def upsample(x: npt.NDArray[np.float32], h: int, w: int) -> npt.NDArray[np.float32]:
    """PyTorch's bilinear resize with align_corners=False (half-pixel centres)."""
    c, ih, iw = x.shape

    def taps(n_in: int, n_out: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        src = np.maximum((np.arange(n_out) + 0.5) * n_in / n_out - 0.5, 0.0)
        i0 = np.minimum(np.floor(src).astype(np.int64), n_in - 1)
        i1 = np.minimum(i0 + 1, n_in - 1)
        return i0, i1, (src - i0).astype(np.float32)

    y0, y1, fy = taps(ih, h)
    x0, x1, fx = taps(iw, w)
    top = x[:, y0][:, :, x0] * (1 - fx) + x[:, y0][:, :, x1] * fx
    bottom = x[:, y1][:, :, x0] * (1 - fx) + x[:, y1][:, :, x1] * fx
    out: npt.NDArray[np.float32] = (top * (1 - fy)[None, :, None] + bottom * fy[None, :, None]).astype(np.float32)
    return out


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("foreign")
    model = d / "plain.onnx"
    write_model(model)
    card = d / "card.toml"
    card.write_text(
        f"classes = {CLASSES!r}\n".replace("'", '"')
        + "[input]\nname = \"pixels\"\nchannels = \"bgr\"\nscale = 1.0\n"
        + f"mean = {MEAN}\nstd = {STD}\n"
        + "[output]\nname = \"scores\"\nkind = \"logits\"\n"
    )
    return model, card


@pytest.mark.parametrize("engine", ["ort", "tract"])
def test_a_foreign_model_is_served_by_its_card(foreign: tuple[Path, Path], engine: str) -> None:
    model, card = foreign
    seg = segtool.Segmenter(str(model), engine=engine, card=str(card))
    assert seg.spec["classes"] == CLASSES
    rng = np.random.default_rng(5)
    img = rng.integers(0, 256, size=(37, 50, 3), dtype=np.uint8)
    got = seg.segment(img, scores=True)
    want = reference(model, img)
    assert got.mask.shape == want.shape
    assert got.scores is not None
    scores = np.asarray(got.scores)
    top2 = np.sort(scores, axis=0)[-2:]
    differ = got.mask != want
    assert np.all(top2[1][differ] - top2[0][differ] < 1e-4), int(differ.sum())
    assert differ.mean() <= 1e-3
    # BGR frames handed in as such give the same mask.
    again = seg.segment(np.ascontiguousarray(img[:, :, ::-1]), color="bgr")
    assert np.array_equal(again.mask, got.mask)


def test_a_foreign_model_without_a_card_says_what_is_missing(foreign: tuple[Path, Path]) -> None:
    model, _ = foreign
    with pytest.raises(Exception) as info:
        segtool.Segmenter(str(model), engine="ort")
    message = str(info.value)
    assert "input.mean" in message and "plain.onnx" in message, message


def test_card_models_in_the_batch_server_and_live_stream(foreign: tuple[Path, Path]) -> None:
    """The servers drive a model from elsewhere by its card, mask for mask as segment()."""
    model, card = foreign
    segs = [segtool.Segmenter(str(model), engine="ort", threads=1, card=str(card)) for _ in range(2)]
    rng = np.random.default_rng(9)
    imgs = [rng.integers(0, 256, size=(37, 50, 3), dtype=np.uint8) for _ in range(6)]
    want = [segs[0].segment(img).mask for img in imgs]
    with segtool.BatchServer(segs, max_batch=4, max_delay_ms=5) as server:
        pending = [server.submit(img) for img in imgs]
        for p, w in zip(pending, want):
            np.testing.assert_array_equal(p.result(timeout=60).mask, w)
    with segtool.LiveStream(segs[0], slot=1) as live:
        for i, img in enumerate(imgs):
            live.submit(img, index=i)
        live.close()
        results = list(live)
    answered = [r for r in results if r.status == "answered"]
    assert answered and len(results) == len(imgs)
    for r in answered:
        assert r.mask is not None
        np.testing.assert_array_equal(r.mask, want[r.index])


def test_a_hugging_face_folder_matches_its_image_processor(tmp_path: Path) -> None:
    """A SegFormer folder (model.onnx, config.json, preprocessor_config.json) written by
    tests/reference/segformer_ref.py in the project's venv (transformers 5.25): masks
    equal post_process_semantic_segmentation's except at near-ties (top-2 gap < 1e-3)."""
    python = os.environ.get("SEGTOOL_PYTHON")
    if not python:
        pytest.skip("SEGTOOL_PYTHON (the project venv with transformers) is not set")
    script = Path(__file__).resolve().parents[2] / "tests" / "reference" / "segformer_ref.py"
    subprocess.run([python, str(script), "--out", str(tmp_path)], check=True, stdout=subprocess.DEVNULL)
    seg = segtool.Segmenter(str(tmp_path / "segformer"), engine="ort")
    assert seg.spec["classes"][1] == "road"
    for image in sorted((tmp_path / "images").glob("*.png")):
        import cv2

        bgr = cv2.imread(str(image), cv2.IMREAD_COLOR)
        assert bgr is not None, image
        rgb = np.ascontiguousarray(bgr[:, :, ::-1])
        got = seg.segment(rgb).mask
        want = np.load(tmp_path / "ref" / f"{image.stem}.npy")
        margin = np.load(tmp_path / "ref" / f"{image.stem}.margin.npy")
        differ = got != want
        assert np.all(margin[differ] < 1e-3), image.name
        assert differ.mean() <= 1e-3, image.name


@pytest.mark.parametrize("case", ["mask2former", "dpt_keep"])
def test_hugging_face_processor_folders_match_transformers(tmp_path: Path, case: str) -> None:
    """Folders written by transformers' own save_pretrained (tests/reference/
    hf_processors_ref.py): Mask2Former's mask-classification head (class and mask logits,
    served through the appended head) and DPT keeping the aspect ratio at a multiple of
    32, on four real photos of different shapes. Masks equal processor + onnxruntime +
    post_process_semantic_segmentation except at near-ties (top-2 gap < 1e-3), at most
    0.1% of each photo."""
    python = os.environ.get("SEGTOOL_PYTHON")
    if not python:
        pytest.skip("SEGTOOL_PYTHON (the project venv with transformers) is not set")
    script = Path(__file__).resolve().parents[2] / "tests" / "reference" / "hf_processors_ref.py"
    subprocess.run(
        [python, str(script), "--out", str(tmp_path), "--cases", case],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    import cv2

    seg = segtool.Segmenter(str(tmp_path / case), engine="ort")
    images = sorted((tmp_path / "images").glob("*.png"))
    assert len(images) == 4
    for image in images:
        bgr = cv2.imread(str(image), cv2.IMREAD_COLOR)
        assert bgr is not None, image
        got = seg.segment(np.ascontiguousarray(bgr[:, :, ::-1])).mask
        want = np.load(tmp_path / case / "ref" / f"{image.stem}.npy")
        margin = np.load(tmp_path / case / "ref" / f"{image.stem}.margin.npy")
        assert got.shape == want.shape, image.name
        differ = got != want
        assert np.all(margin[differ] < 1e-3), image.name
        assert differ.mean() <= 1e-3, image.name


def test_more_than_256_classes_give_uint16_masks(tmp_path: Path) -> None:
    """A 300-class model: uint16 masks whose ids above 255 are onnxruntime's argmax (a
    1x1 conv whose class is the nearest point of a red x green grid, by a wide margin);
    colorize and overlay take them."""
    classes, columns = 300, 20
    rows = classes // columns
    levels = [(c % columns * 255 / (columns - 1), c // columns * 255 / (rows - 1)) for c in range(classes)]
    centres = np.array([[round(r) / 255.0, round(g) / 255.0] for r, g in levels], np.float32)
    w = np.zeros((classes, 3, 1, 1), np.float32)
    w[:, 0, 0, 0], w[:, 1, 0, 0] = 2 * centres[:, 0], 2 * centres[:, 1]
    b = -(centres**2).sum(axis=1).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["pixels", "W", "B"], ["scores"])], "grid300",
        [helper.make_tensor_value_info("pixels", TensorProto.FLOAT, ["N", 3, "H", "W"])],
        [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", classes, "H", "W"])],
        [helper.make_tensor("W", TensorProto.FLOAT, w.shape, w.flatten().tolist()),
         helper.make_tensor("B", TensorProto.FLOAT, b.shape, b.tolist())],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "grid300.onnx"
    onnx.save(model, str(path))
    card = tmp_path / "card.toml"
    card.write_text(f"num_classes = {classes}\n[input]\nmean = [0.0, 0.0, 0.0]\nstd = [255.0, 255.0, 255.0]\n")

    rng = np.random.default_rng(5)
    ids = rng.integers(0, classes, size=(9, 14))
    ids[0, :3] = [256, 299, 255]
    rgb = np.zeros((9, 14, 3), np.uint8)
    rgb[..., :2] = np.rint(centres[ids] * 255).astype(np.uint8)

    x = (rgb.astype(np.float32) / 255.0).transpose(2, 0, 1)[None]
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    want = sess.run(["scores"], {"pixels": x})[0][0].argmax(axis=0)
    assert (want == ids).all() and want.max() > 255

    for engine in ("ort", "tract"):
        seg = segtool.Segmenter(str(path), engine=engine, card=str(card))
        out = seg.segment(rgb)
        assert out.mask.dtype == np.uint16, engine
        np.testing.assert_array_equal(out.mask, want.astype(np.uint16))
        assert "uint16" in repr(out)
    palette = segtool.default_palette(classes)
    colours = segtool.colorize(out.mask, palette)
    np.testing.assert_array_equal(colours[0, 1], palette[299])
    blended = segtool.overlay(rgb, out.mask, alpha=1.0, palette=palette)
    np.testing.assert_array_equal(blended[0, 0], palette[256])
