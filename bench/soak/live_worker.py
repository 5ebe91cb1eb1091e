"""The Python path's process under test: a `segtool.LiveStream` loop as a camera
application writes it. A reader thread (the camera callback) takes rgb24 frames of WxH
from stdin and submits each at once; the main thread (the inference consumer) iterates
the stream and prints each frame's fate, `<index> <a|d|f> <latency ms>`, the latency
being the stream's own (`LiveResult.latency`: submitted to taken). At EOF: close, drain,
then one JSON line with `live.stats()`.

    python live_worker.py MODEL WIDTH HEIGHT THREADS     (the wheel on PYTHONPATH)
"""
import json
import sys
import threading

import numpy as np

import segtool


def main():
    model, w, h, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    seg = segtool.Segmenter(model, engine="ort", threads=threads, fixed_size=(h, w))
    out = sys.stdout
    with segtool.LiveStream(seg, slot=1) as live:
        def camera():
            stdin = sys.stdin.buffer
            buf = bytearray(w * h * 3)
            frame = np.frombuffer(buf, dtype=np.uint8).reshape(h, w, 3)
            view = memoryview(buf)
            index = 0
            while True:
                got = 0
                while got < len(buf):
                    k = stdin.readinto(view[got:])
                    if not k:
                        break
                    got += k
                if got < len(buf):
                    break
                live.submit(frame, index=index)  # copies the frame; never waits
                index += 1
            live.close()

        reader = threading.Thread(target=camera, name="camera", daemon=True)
        print(f"ready: {seg.engine} {seg.provider}", flush=True)
        reader.start()
        n = 0
        for r in live:
            out.write(f"{r.index} {r.status[0]} {r.latency * 1e3:.3f}\n")
            n += 1
            if n % 8 == 0:
                out.flush()
        out.flush()
        reader.join()
        print(json.dumps(dict(live.stats())), flush=True)


if __name__ == "__main__":
    main()
