"""MultiStream: many cameras on one model. Masks equal to `Segmenter.segment` on the
same frames, each camera's counts exact, unknown and finished sources, and a camera
that finishes while another goes on."""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

import segtool
from conftest import frames, segtool as run_segtool, varied_checkpoint

CAMERAS = ["front", "left", "right", "rear"]


def test_four_cameras_masks_and_exact_counts(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    shots = {name: frames(5, seed=20 + k) for k, name in enumerate(CAMERAS)}
    with segtool.MultiStream(seg, max_batch=4, max_delay_ms=2) as cams:
        for name in CAMERAS:
            # Ordered: every frame runs (submit waits for room in the camera's slot).
            cams.add_source(name, slot=2, backlog="ordered")
        assert cams.sources == CAMERAS
        for i in range(5):
            for name in CAMERAS:
                assert cams.submit(name, shots[name][i], index=100 + i) == 100 + i
        cams.finish()
        with pytest.raises(segtool.StreamClosedError):
            cams.submit("front", shots["front"][0])
        results = list(cams)
        stats = cams.stats()
    by_camera: Dict[str, List[segtool.LiveResult]] = {name: [] for name in CAMERAS}
    for r in results:
        assert r.source is not None
        by_camera[r.source].append(r)
    assert list(stats) == CAMERAS
    for name in CAMERAS:
        got = by_camera[name]
        # Each camera's frames come back in its own order, every one answered.
        assert [r.index for r in got] == [100 + i for i in range(5)]
        for i, r in enumerate(got):
            assert r.status == "answered" and r.mask is not None, r
            np.testing.assert_array_equal(r.mask, seg.segment(shots[name][i]).mask)
        s = stats[name]
        assert (s["submitted"], s["answered"], s["dropped"], s["failed"], s["pending"]) == (5, 5, 0, 0, 0)
        assert s["latency_samples"] == 5 and 0 < s["p50_ms"] <= s["p99_ms"]
        assert s["finished"] is True


def test_unknown_source_and_a_camera_that_finishes_first(models: Dict[str, Path]) -> None:
    # Opened from a path with Segmenter's keyword options (one model).
    with segtool.MultiStream(models["plain"], engine="ort", threads=1) as cams:
        cams.add_source("front", deadline_ms=60_000)
        cams.add_source("rear", slot=3, backlog="ordered")
        ref = cams.segmenter
        for call in (
            lambda: cams.submit("side", frames(1)[0]),
            lambda: cams.next_from("side", timeout=0),
            lambda: cams.finish_source("side"),
        ):
            with pytest.raises(segtool.InputError) as e:
                call()
            assert '"side"' in str(e.value) and "front, rear" in str(e.value), str(e.value)
        with pytest.raises(segtool.InputError, match="already open"):
            cams.add_source("front")
        with pytest.raises(segtool.InputError, match="backlog"):
            cams.add_source("side", backlog="oldest")

        rear = frames(3, seed=31)
        for f in rear:
            cams.submit("rear", f)
        cams.finish_source("rear")
        with pytest.raises(segtool.StreamClosedError, match="rear"):
            cams.submit("rear", rear[0])
        got = []
        while (r := cams.next_from("rear", timeout=60)) is not None:
            got.append(r)
        assert [(r.source, r.index, r.status) for r in got] == [("rear", i, "answered") for i in range(3)]
        for f, r in zip(rear, got):
            np.testing.assert_array_equal(r.mask, ref.segment(f).mask)

        # The front camera goes on after the rear one ended: each frame is answered.
        front = frames(3, seed=32)
        for i, f in enumerate(front):
            assert cams.submit("front", f) == i
            r = cams.next_from("front", timeout=60)
            assert r is not None and (r.source, r.index, r.status) == ("front", i, "answered"), r
            np.testing.assert_array_equal(r.mask, ref.segment(f).mask)
        stats = cams.stats()
        assert stats["rear"]["finished"] and not stats["front"]["finished"]
        assert stats["rear"]["submitted"] == stats["rear"]["answered"] == 3
        assert stats["front"]["submitted"] == stats["front"]["answered"] == 3
        cams.finish()
        assert cams.next(timeout=60) is None
        assert cams.stats()["front"]["finished"]


def test_a_burst_on_a_newest_camera_counts_every_frame(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    burst = frames(16, 256, 384, seed=33)  # big frames: the model is slower than the burst
    calm = frames(2, seed=34)
    with segtool.MultiStream(seg, max_batch=2) as cams:
        cams.add_source("busy")
        cams.add_source("calm", slot=2, backlog="ordered")
        for f in burst:
            cams.submit("busy", f)
        for f in calm:
            cams.submit("calm", f)
        cams.finish()
        results = list(cams)
        stats = cams.stats()
    busy = [r for r in results if r.source == "busy"]
    calm_got = [r for r in results if r.source == "calm"]
    assert [r.index for r in busy] == list(range(16))
    s = stats["busy"]
    assert s["submitted"] == 16 == s["answered"] + s["dropped"] + s["failed"]
    assert s["dropped"] == s["replaced"] and s["dropped"] >= 1 and s["pending"] == 0
    assert sum(r.status == "answered" for r in busy) == s["answered"]
    assert busy[-1].status == "answered"  # the newest frame always runs
    # The quiet camera is not starved by the busy one.
    assert [r.status for r in calm_got] == ["answered", "answered"]
    assert stats["calm"]["answered"] == 2


def test_model_options_only_with_a_path(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    with pytest.raises(TypeError, match="threads"):
        segtool.MultiStream(seg, threads=2)
    with pytest.raises(segtool.InputError, match="max_batch"):
        segtool.MultiStream(seg, max_batch=0)


def test_smoothing_per_camera_is_an_ema_of_that_cameras_logits(work: Path, checkpoint: Path) -> None:
    """Each camera's masks are the argmax of an exponential moving average of its own
    logits (history weight 0.7), computed here in numpy from `Segmenter.segment`'s
    scores: the cameras' histories do not mix."""
    weight = np.float32(0.7)
    shots = {name: frames(4, seed=40 + k) for k, name in enumerate(["front", "rear"])}
    varied = varied_checkpoint(work, checkpoint, shots["front"] + shots["rear"], "smooth")
    model = work / "smooth.onnx"
    run_segtool("export", "--checkpoint", str(varied), "--onnx", str(model), cwd=work)
    seg = segtool.Segmenter(str(model), engine="ort", threads=1)
    with segtool.MultiStream(seg, max_batch=2, smooth=float(weight)) as cams:
        for name in shots:
            cams.add_source(name, slot=4, backlog="ordered")
        for i in range(4):
            for name in shots:
                cams.submit(name, shots[name][i])
        cams.finish()
        results = list(cams)
    changed = 0
    for name, shot in shots.items():
        got = [r for r in results if r.source == name]
        assert [(r.index, r.status) for r in got] == [(i, "answered") for i in range(4)]
        state = None
        for frame, r in zip(shot, got):
            logits = seg.segment(frame, scores=True).scores
            assert logits is not None
            state = logits.copy() if state is None else weight * state + (1 - weight) * logits
            want = state.argmax(axis=0)
            # Pixels whose two best smoothed scores are within 1e-4 may go either way
            # (batched and single runs round differently); every other pixel is equal.
            top2 = np.sort(state, axis=0)[-2:]
            clear = (top2[1] - top2[0]) > 1e-4
            assert r.mask is not None
            np.testing.assert_array_equal(r.mask[clear], want[clear])
            assert clear.mean() > 0.99
            changed += int(np.count_nonzero(r.mask != seg.segment(frame).mask))
    # The smoothing did something: some pixels differ from the frames' own masks.
    assert changed > 0


def test_smoothing_needs_logits(models: Dict[str, Path]) -> None:
    seg = segtool.Segmenter(models["argmax"], engine="ort", threads=1)
    with pytest.raises(segtool.InputError, match="logits"):
        segtool.MultiStream(seg, smooth=0.5)
    plain = segtool.Segmenter(models["plain"], engine="ort", threads=1)
    with pytest.raises(segtool.InputError, match="smooth"):
        segtool.MultiStream(plain, smooth=1.5)
