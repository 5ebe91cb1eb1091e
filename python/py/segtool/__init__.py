"""Run exported segtool DANet models from Python.

    import cv2, segtool
    seg = segtool.Segmenter("model.onnx")          # ONNX Runtime, or tract when it is missing
    ok, frame = cv2.VideoCapture("clip.mp4").read()
    out = seg.segment(frame, color="bgr")          # OpenCV frames are BGR
    out.mask                                       # HxW class map at the frame's size:
                                                   # uint8, uint16 past 256 classes

ONNX Runtime is found at run time, in this order: the file named by ``SEGTOOL_ORT_LIB``;
the library bundled with the ``onnxruntime`` (or ``onnxruntime-gpu``) package, when it is
installed; the system's ``libonnxruntime.so``. With none of them, ``engine="auto"`` runs
tract (pure Rust, CPU) and says so in ``Segmenter.fallbacks`` and on the ``segtool``
logger. Nothing is printed: configure :mod:`logging` to see fallbacks.
"""

from __future__ import annotations

import glob
import importlib.util
import logging
import os
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _segtool
from ._segtool import (
    EngineError,
    Error,
    InputError,
    LiveResult,
    ModelError,
    Pending,
    Segmentation,
    StreamClosedError,
    Timings,
    colorize,
    default_palette,
    overlay,
)

__all__ = [
    "BatchServer",
    "EngineError",
    "Error",
    "Fallback",
    "InputError",
    "LiveResult",
    "LiveStream",
    "ModelError",
    "MultiStream",
    "Pending",
    "Segmentation",
    "Segmenter",
    "StreamClosedError",
    "Timings",
    "colorize",
    "default_palette",
    "ort_library_candidates",
    "overlay",
]
__version__: str = _segtool.__version__

logger = logging.getLogger("segtool")
# A library never prints: without a handler of the application's, records go nowhere
# (not to logging's last-resort stderr handler).
logger.addHandler(logging.NullHandler())

PathLike = Union[str, "os.PathLike[str]"]


class Fallback:
    """A fallback taken while opening: ``kind`` (``ort_library_missing``, ``provider``,
    ``tract_cpu_only``, ``engine``, ``option_not_applied``) and ``reason`` (the message, as ``segtool infer`` prints it)."""

    __slots__ = ("kind", "reason")

    def __init__(self, kind: str, reason: str) -> None:
        self.kind = kind
        self.reason = reason

    def __repr__(self) -> str:
        return f"Fallback({self.kind!r}, {self.reason!r})"

    def __str__(self) -> str:
        return self.reason


def _package_library() -> Optional[str]:
    """The libonnxruntime bundled with the installed onnxruntime package, found without
    importing it."""
    try:
        spec = importlib.util.find_spec("onnxruntime")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        libs = sorted(glob.glob(os.path.join(folder, "capi", "libonnxruntime.so*")))
        libs = [p for p in libs if not p.endswith(".py")]
        if libs:
            # The versioned file (libonnxruntime.so.1.31.1) sorts last.
            return libs[-1]
    return None


def openvino_library() -> Optional[str]:
    """``OPENVINO_LIB``, else the libopenvino_c of the installed openvino package (found
    without importing it), else None (the runtime's own search)."""
    env = os.environ.get("OPENVINO_LIB")
    if env:
        return env
    try:
        spec = importlib.util.find_spec("openvino")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        libs = sorted(glob.glob(os.path.join(folder, "libs", "libopenvino_c.so*")))
        if libs:
            return libs[-1]
    return None


def ort_library_candidates() -> List[Tuple[str, str]]:
    """Where ONNX Runtime is looked for, in order, as ``(path, source)`` pairs."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get("SEGTOOL_ORT_LIB")
    if env:
        out.append((env, "SEGTOOL_ORT_LIB"))
    pkg = _package_library()
    if pkg:
        out.append((pkg, "the onnxruntime package"))
    out.append(("libonnxruntime.so", "system library path"))
    return out


class Segmenter:
    """One exported model, opened for inference.

    The options that open the model are the runtime's, under the names and with the
    defaults every front end uses (``options`` reports them back):
    ``engine``: ``"auto"`` (default: the engine timed fastest for the model on this
    machine, cached; OpenVINO for bf16; ``engine_choice`` says which and why), ``"ort"``,
    ``"tract"`` or ``"openvino"``.
    ``providers``: ONNX Runtime's execution providers in preference order (default
    ``("cpu",)``; ``"cuda:0"``, ``"tensorrt:0"``, ...); one that does not load is a
    reported fallback.
    OpenVINO's ``device`` (``"CPU"``, default; ``"GPU"``, ``"NPU"``, ``"AUTO"``),
    ``precision`` (``"f32"``, default, or ``"bf16"``), ``hint`` (``"latency"``, default,
    or ``"throughput"``) and ``streams`` (default, and 0: what the hint picks).
    ``threads``: threads per inference (default, and 0: the engine's, all cores).
    ``strict=True`` refuses every fallback (raises instead). ``fixed_size=(H, W)``: every
    image has that size (a fixed camera); ONNX Runtime plans its memory for it and
    refuses other sizes. ``logits=True``: every result carries its scores unless a call
    says ``scores=False``.

    Accuracy mode (the evaluation protocol on every call): ``protocol="danet"`` (DANet's
    MultiEvalModule: long side resized to ``base_size * scale``, sliding ``crop`` windows,
    exp scores) or ``"mmseg"``, with ``base_size``, ``scales``, ``flip``, ``mode``
    (``"sliding"`` / ``"whole"``), ``crop``, ``stride``, ``batch_size`` (windows per run),
    as ``segtool infer`` and ``segtool eval`` take them.

    ``card``: a model card (TOML) for an ONNX file segtool did not write (torchvision,
    Hugging Face, a plain ``torch.onnx.export``): the input's normalisation and channel
    order, the output's kind and the classes (book/src/models-from-elsewhere.md). Without
    it the file's own metadata and a ``MODEL.segtool.toml`` beside it are read.
    """

    def __init__(
        self,
        path: PathLike,
        engine: str = "auto",
        providers: Sequence[str] = ("cpu",),
        threads: Optional[int] = None,
        *,
        device: str = "CPU",
        precision: str = "f32",
        hint: str = "latency",
        streams: Optional[int] = None,
        strict: bool = False,
        protocol: Optional[str] = None,
        base_size: Optional[int] = None,
        scales: Optional[Sequence[float]] = None,
        flip: bool = False,
        mode: Optional[str] = None,
        crop: Optional[int] = None,
        stride: Optional[int] = None,
        batch_size: int = 1,
        fixed_size: Optional[Tuple[int, int]] = None,
        card: Optional[PathLike] = None,
        logits: bool = False,
    ) -> None:
        if isinstance(providers, str):
            providers = (providers,)
        self._native = _segtool.Segmenter(
            os.fspath(path),
            engine=engine,
            providers=list(providers),
            threads=threads,
            ort_libraries=ort_library_candidates() if engine in ("auto", "ort") else [],
            device=device,
            precision=precision,
            hint=hint,
            streams=streams,
            openvino_library=openvino_library() if engine in ("openvino", "auto") else None,
            strict=strict,
            protocol=protocol,
            base_size=base_size,
            scales=None if scales is None else [float(s) for s in scales],
            flip=flip,
            mode=mode,
            crop=crop,
            stride=stride,
            batch_size=batch_size,
            fixed_size=fixed_size,
            card=None if card is None else os.fspath(card),
            logits=logits,
        )
        self.fallbacks: List[Fallback] = [Fallback(k, r) for k, r in self._native.fallbacks]
        for f in self.fallbacks:
            logger.warning("%s: %s", os.fspath(path), f.reason)

    def segment(
        self, img: np.ndarray, color: str = "rgb", scores: Optional[bool] = None
    ) -> Segmentation:
        """Segments one HxWx3 uint8 image (``color="bgr"`` for OpenCV frames), read in
        place whatever its strides. ``scores=True`` adds the float32 CxHxW scores
        (default: the ``logits`` option)."""
        return self._native.segment(img, color, scores)

    def segment_batch(
        self, imgs: Sequence[np.ndarray], color: str = "rgb", scores: Optional[bool] = None
    ) -> List[Segmentation]:
        """Segments a list of images: one engine call per batch (per distinct size)."""
        return self._native.segment_batch(list(imgs), color, scores)

    __call__ = segment

    @property
    def spec(self) -> Dict[str, Any]:
        """classes, palette, mean, std, input_size ((H, W) of a fixed-size export, else
        None), protocol (accuracy mode's, else None), input / output (the contract)."""
        return self._native.spec

    @property
    def engine(self) -> str:
        """``onnxruntime``, ``tract`` or ``openvino``."""
        return self._native.engine

    @property
    def provider(self) -> str:
        """The execution provider actually in use (``cpu``, ``cuda:0``, ...)."""
        return self._native.provider

    @property
    def options(self) -> Dict[str, Any]:
        """What the model was opened with, keyed by the option names every front end uses
        (``engine``, ``providers``, ``device``, ``precision``, ``hint``, ``streams``,
        ``threads``, ``card``, ``strict``, ``fixed_size``, ``logits``), the defaults
        filled in: ``streams`` and ``threads`` None for the hint's and the engine's own,
        ``fixed_size`` ``[H, W]`` or None. A copy: changing it changes nothing."""
        return self._native.options

    @property
    def engine_choice(self) -> Optional[str]:
        """Which engine ``engine="auto"`` chose and why (``"auto chose openvino: the fastest
        when timed on this machine at 512x512, 2 threads: ..."``); None when an engine was
        named."""
        return self._native.engine_choice

    def __repr__(self) -> str:
        return repr(self._native)


class BatchServer:
    """Dynamic batching over one or more segmenters (one per GPU, or a few CPU ones):
    ``submit(img)`` from any thread returns a :class:`Pending` whose ``result()`` waits.
    Same-size requests arriving within ``max_delay_ms`` of the oldest share one engine
    run of at most ``max_batch`` images."""

    def __init__(
        self,
        segmenters: Union[Segmenter, Sequence[Segmenter]],
        max_batch: int = 8,
        max_delay_ms: float = 2.0,
        queue_capacity: int = 64,
        scores: bool = False,
    ) -> None:
        if isinstance(segmenters, Segmenter):
            segmenters = [segmenters]
        self._native = _segtool.BatchServer(
            [s._native for s in segmenters], max_batch, max_delay_ms, queue_capacity, scores
        )

    def submit(self, img: np.ndarray, color: str = "rgb") -> Pending:
        return self._native.submit(img, color)

    def stats(self) -> Dict[str, Any]:
        return self._native.stats()

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> "BatchServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stream:
    """What a live stream and a multi-camera stream share: iteration over every frame's
    fate until the stream is finished and drained, and a ``with`` block that shuts the
    worker down at its end."""

    _native: Any

    def __iter__(self) -> Iterator[LiveResult]:
        while True:
            r = self._native.next(None)
            if r is None:
                return
            yield r

    def __exit__(self, *exc: object) -> None:
        self._native.shutdown()


class LiveStream(_Stream):
    """The newest frame answered: for a live camera, where an old answer is worth less
    than none. ``submit`` never blocks; at most ``slot`` frames wait, a newer one replaces
    the oldest waiting (dropped, counted); a frame not started within ``deadline_ms`` is
    dropped, never run late. ``next()`` returns every frame's fate in order: answered (with
    its mask), dropped (with the reason) or failed. ``smooth`` (0..1) averages logits over
    answered frames (models exported without ``--argmax``)."""

    def __init__(
        self,
        segmenter: Segmenter,
        slot: int = 1,
        deadline_ms: Optional[float] = None,
        smooth: Optional[float] = None,
    ) -> None:
        self._native = _segtool.LiveStream(segmenter._native, slot, deadline_ms, smooth)

    def submit(self, frame: np.ndarray, index: Optional[int] = None, color: str = "rgb") -> int:
        """Submits a frame (copied) and returns its index (``index`` if given)."""
        return self._native.submit(frame, index, color)

    def next(self, timeout: Optional[float] = None) -> Optional[LiveResult]:
        """The oldest frame's fate; None on timeout, or when closed and drained."""
        return self._native.next(timeout)

    def stats(self) -> Dict[str, Any]:
        """submitted, answered, dropped, failed (+ replaced, expired, rejected, pending)."""
        return self._native.stats()

    def close(self) -> None:
        """No more frames; those submitted still come out of ``next()``."""
        self._native.close()

    def __enter__(self) -> "LiveStream":
        return self


class MultiStream(_Stream):
    """Many cameras, one model: named sources sharing one copy of the model, batched
    across the cameras. Each source keeps its own slot (``"newest"``: a newer frame
    replaces one not yet started; ``"ordered"``: every frame runs, ``submit`` waits for
    room), its own deadline, frame numbering and counts; an engine run takes at most one
    frame of each camera (up to ``max_batch``), the camera served longest ago first, so a
    busy camera never starves a quiet one.

    ``model`` is a :class:`Segmenter`, or a model path opened with the keyword options
    of :class:`Segmenter` (``engine``, ``providers``, ``threads``, ...)::

        cams = segtool.MultiStream("model.onnx", engine="ort", threads=2)
        cams.add_source("front", deadline_ms=50)
        cams.add_source("rear")
        cams.submit("front", frame)              # from each camera's callback
        for r in cams:                           # r.source, r.index, r.status, r.mask
            ...

    ``smooth`` (0..1) averages each camera's logits over its own answered frames, as
    :class:`LiveStream` does for one (models exported without ``--argmax``). An unknown
    source name raises :class:`InputError` naming the sources there are; a frame for a
    finished source raises :class:`StreamClosedError`."""

    def __init__(
        self,
        model: Union[Segmenter, PathLike],
        max_batch: int = 4,
        max_delay_ms: float = 2.0,
        smooth: Optional[float] = None,
        **options: Any,
    ) -> None:
        if isinstance(model, Segmenter):
            if options:
                raise TypeError(
                    "model options (" + ", ".join(sorted(options)) + ") open a model path; "
                    "this Segmenter is already open"
                )
            self.segmenter = model
        else:
            self.segmenter = Segmenter(model, **options)
        self._native = _segtool.MultiStream(
            self.segmenter._native, max_batch, max_delay_ms, smooth
        )

    def add_source(
        self,
        name: str,
        slot: int = 1,
        backlog: str = "newest",
        deadline_ms: Optional[float] = None,
    ) -> None:
        """Opens camera ``name``: at most ``slot`` frames wait unstarted; ``backlog``
        ``"newest"`` or ``"ordered"``; frames not started within ``deadline_ms`` are
        dropped."""
        self._native.add_source(name, slot, backlog, deadline_ms)

    @property
    def sources(self) -> List[str]:
        """The cameras' names, in the order they were added."""
        return self._native.sources

    def submit(
        self, source: str, frame: np.ndarray, index: Optional[int] = None, color: str = "rgb"
    ) -> int:
        """Submits camera ``source``'s next frame (copied) and returns its index
        (``index`` if given, else its number in that camera's stream)."""
        return self._native.submit(source, frame, index, color)

    def next(self, timeout: Optional[float] = None) -> Optional[LiveResult]:
        """The next known fate of any camera's frame (``r.source`` names the camera);
        None on timeout, or once finished and drained."""
        return self._native.next(timeout)

    def next_from(self, source: str, timeout: Optional[float] = None) -> Optional[LiveResult]:
        """Camera ``source``'s next frame's fate, in its own order; None on timeout, or
        once that camera is finished and drained."""
        return self._native.next_from(source, timeout)

    def stats(self) -> Dict[str, Dict[str, Any]]:
        """Per camera, in the order they were added: submitted, answered, dropped,
        failed (+ replaced, expired, rejected, pending), p50_ms, p99_ms (arrival to
        answer), latency_samples, finished."""
        return self._native.stats()

    def finish_source(self, source: str) -> None:
        """Camera ``source`` sends no more frames; the others go on."""
        self._native.finish_source(source)

    def finish(self) -> None:
        """No camera sends more frames; those submitted still come out of ``next()``."""
        self._native.finish()

    def __enter__(self) -> "MultiStream":
        return self
