#!/usr/bin/env python3
"""A segtool export's input from an image file, as its runtime prepares it: RGB / 255,
minus the spec's mean, over its std, NCHW float32 (no resize: the images are the model's
size). PNGs are read without Pillow when it is absent (the set-up does not install it)."""
from pathlib import Path

import numpy as np


def read_png(path):
    """8-bit RGB/RGBA/gray PNG, non-interlaced (what segtool writes), without Pillow."""
    import struct
    import zlib
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, hdr = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            hdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    w, h, depth, color, _, _, interlace = hdr
    assert depth == 8 and interlace == 0, f"{path}: only 8-bit non-interlaced PNGs"
    ch = {0: 1, 2: 3, 4: 2, 6: 4}[color]
    raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, 1 + w * ch)
    out = np.zeros((h, w * ch), np.int32)
    prev = np.zeros(w * ch, np.int32)
    for y in range(h):
        f, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        cur = np.zeros(w * ch, np.int32)
        for x in range(w * ch):
            a = cur[x - ch] if x >= ch else 0
            b = prev[x]
            c = prev[x - ch] if x >= ch else 0
            if f == 0:
                p = 0
            elif f == 1:
                p = a
            elif f == 2:
                p = b
            elif f == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            cur[x] = (line[x] + p) & 255
        out[y] = cur
        prev = cur
    img = out.reshape(h, w, ch).astype(np.uint8)
    if ch == 1 or ch == 2:
        img = np.repeat(img[..., :1], 3, axis=2)
    return img[..., :3]


def load_rgb(path):
    try:
        from PIL import Image
        return np.asarray(Image.open(path).convert("RGB"))
    except ImportError:
        return read_png(path)


def normalise(path, spec):
    x = load_rgb(path).astype(np.float32) / 255.0
    x = (x - np.asarray(spec["mean"], np.float32)) / np.asarray(spec["std"], np.float32)
    return x.transpose(2, 0, 1)[None].astype(np.float32)
