#!/usr/bin/env python3
"""Offline segmentation of more frames than one machine holds, on Ray Data: one
`segtool.Segmenter` per actor (one per GPU, or per CPU slot), batches of frames through
`ds.map_batches(SegtoolPredictor, ...)`.

    python examples/ray_data.py model.onnx clip.mp4 [--actors 2] [--out masks/]

On a cluster, `ray.init(address="auto")` instead of a local one, and `num_gpus=1` per
actor with `providers=("cuda:0", "cpu")`: Ray gives each actor its own GPU as cuda:0.
"""

from __future__ import annotations

import argparse
import os
from typing import Dict, Iterator, Sequence

import numpy as np
import numpy.typing as npt

import segtool


class SegtoolPredictor:
    """A Ray Data callable class: the model is opened once per actor."""

    def __init__(self, model: str, threads: int = 1, providers: Sequence[str] = ("cpu",)) -> None:
        self.seg = segtool.Segmenter(model, threads=threads, providers=providers)
        self.pid = os.getpid()

    def __call__(self, batch: Dict[str, npt.NDArray[np.generic]]) -> Dict[str, npt.NDArray[np.generic]]:
        images = [np.asarray(img, dtype=np.uint8) for img in batch["image"]]
        outs = self.seg.segment_batch(images)  # one engine call per batch of same-size frames
        return {
            "index": np.asarray(batch["index"]),
            "mask": np.stack([o.mask for o in outs]),
            "actor": np.full(len(outs), self.pid),
        }


def read_frames(clip: str, limit: int) -> Iterator[npt.NDArray[np.uint8]]:
    import cv2

    cap = cv2.VideoCapture(clip)
    try:
        while limit > 0:
            ok, frame = cap.read()
            if not ok:
                return
            limit -= 1
            yield np.ascontiguousarray(frame[:, :, ::-1])  # BGR -> RGB
    finally:
        cap.release()


def main() -> None:
    import ray

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("clip")
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--limit", type=int, default=1000)
    ap.add_argument("--out", help="folder for <index>.npy masks")
    args = ap.parse_args()
    ray.init()
    rows = [{"index": i, "image": f} for i, f in enumerate(read_frames(args.clip, args.limit))]
    ds = ray.data.from_items(rows).map_batches(
        SegtoolPredictor,
        fn_constructor_kwargs={"model": os.path.abspath(args.model)},
        batch_size=args.batch_size,
        concurrency=args.actors,
        num_cpus=1,
    )
    done = 0
    for row in ds.iter_rows():
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            np.save(os.path.join(args.out, f"{int(row['index']):06d}.npy"), row["mask"])
        done += 1
    print(f"{done} frames segmented by {args.actors} actors")


if __name__ == "__main__":
    main()
