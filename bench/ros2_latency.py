#!/usr/bin/env python3
"""Benchmark (not a test): camera-to-mask latency through the ROS 2 node over DDS, against
the same frames through the Python API in one process.

    source "$(bash scripts/setup.sh)"; cargo build -p segtool-ros2
    python bench/ros2_latency.py [--model M.onnx] [--size 640x480] [--frames 40] [--threads 2]

Needs the Python package (`make wheel`, installed in this venv) and `cyclonedds` (setup).
The model defaults to the random-weight DANet-R18 of bench/infer_vs_python_ort.py
(built once, cached in --work). Both sides run ONNX Runtime's CPU provider with the same
threads on the same smooth 640x480 frames:
  * in process: `segtool.Segmenter(model, engine="ort", threads=N).segment(frame)`;
  * over DDS:   `segtool-ros2 node` (--qos: best effort, the node's default, or reliable)
                in its own process; Cyclone DDS in this
                one publishes each frame as `sensor_msgs/Image` and waits for its
                `class_mask` before the next (one frame in flight: nothing dropped).
The Python peer's own (de)serialisation of the 900 KB image and the mask is measured
apart (cyclonedds-python builds sequences element by element: tens of ms) and taken out,
frame by frame, with the in-process segment of the same frame run just before its round
trip (interleaved, so that both see the same machine state):
    added by DDS and the node = median over frames of
        (end to end - peer (de)serialisation - in-process segment).
The node's own latency (message taken off the bus -> masks published) comes from its
/diagnostics. Medians over the frames (the first 5 are warm-up). The CPU is printed.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "reference"))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import ros2_camera as cam  # noqa: E402
from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.util import duration  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402

import segtool  # noqa: E402


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def default_model(work):
    import infer_vs_python_ort as b
    segtool_bin = os.environ.get("SEGTOOL_BIN", os.path.join(ROOT, "target", "debug", "segtool"))
    return b.build_model(work, segtool_bin, "resnet18", 19)["ort"]


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model")
    ap.add_argument("--work", default=os.path.join(ROOT, "target", "bench-ros2"))
    ap.add_argument("--size", default="640x480")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--domain", type=int, default=42)
    ap.add_argument("--qos", choices=["reliable", "best-effort"], default="best-effort")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = a.model or default_model(a.work)
    w, h = (int(v) for v in a.size.split("x"))
    rng = np.random.default_rng(3)
    frames = [cam.smooth_frame(rng, h, w) for _ in range(a.frames)]
    print(f"CPU: {cpu_model()}; model {model}; {w}x{h}; {a.threads} ORT threads; {a.frames} frames; "
          f"QoS {a.qos}; load average {os.getloadavg()[0]:.2f}")

    # The in-process engine runs in this process, interleaved frame by frame with the
    # round trips over DDS: both see the same machine state, and the per-frame
    # difference is what DDS and the node add (engine noise on a busy 2-core machine is
    # larger than the budget).
    seg = segtool.Segmenter(model, engine="ort", threads=a.threads)
    inproc = []

    node_bin = os.path.join(ROOT, "target", "debug", "segtool-ros2")
    env = dict(os.environ, ROS_DOMAIN_ID=str(a.domain))
    node = subprocess.Popen(
        [node_bin, "node", "--model", model, "--engine", "ort", "--threads", str(a.threads),
         *(["--reliable"] if a.qos == "reliable" else []), "--ros-args", "-r", "__ns:=/seg", "-r", "image:=/cam/image_raw"],
        env=env, stderr=subprocess.PIPE, text=True)
    try:
        dp = DomainParticipant(a.domain)
        q = cam.qos(a.qos == "reliable", 4)
        writer = DataWriter(dp, Topic(dp, "rt/cam/image_raw", cam.Image), qos=q)
        masks = DataReader(dp, Topic(dp, "rt/seg/class_mask", cam.Image), qos=q)
        diag = DataReader(dp, Topic(dp, "rt/diagnostics", cam.DiagnosticArray), qos=cam.qos(True, 16))
        waitset = WaitSet(dp)
        waitset.attach(ReadCondition(masks, SampleState.NotRead | ViewState.Any | InstanceState.Any))
        deadline = time.time() + 30
        while not (writer.get_matched_subscriptions() and masks.get_matched_publications()):
            if time.time() > deadline:
                sys.exit("the node did not appear on the bus within 30 s")
            time.sleep(0.05)
        e2e, peer, node_p50s, paired = [], [], [], []
        for i, f in enumerate(frames):
            t_in = time.perf_counter()
            seg.segment(f)
            t_in = (time.perf_counter() - t_in) * 1e3
            msg = cam.image_msg(i, f)
            t_ser = time.perf_counter()
            cam.Image.__idl__.serialize(msg)
            ser = time.perf_counter() - t_ser
            t0 = time.perf_counter()
            writer.write(msg)
            got = None
            while got is None:
                # Blocking, not polling: a busy peer would take a core from the engine.
                waitset.wait(duration(seconds=10))
                for m in masks.take(N=4):
                    if isinstance(m, cam.Image) and m.header.stamp.sec == 1000 + i:
                        got = m
            t1 = time.perf_counter()
            t_de = time.perf_counter()
            cam.Image.__idl__.deserialize(cam.Image.__idl__.serialize(got))
            de = (time.perf_counter() - t_de) / 2  # one serialise + one deserialise, halved
            if i >= 5:
                inproc.append(t_in)
                e2e.append((t1 - t0) * 1e3)
                peer.append((ser + de) * 1e3)
                paired.append((t1 - t0) * 1e3 - (ser + de) * 1e3 - t_in)
            for d in diag.take(N=16):
                if isinstance(d, cam.DiagnosticArray) and d.status:
                    values = {kv.key: kv.value for kv in d.status[0].values}
                    if float(values.get("rate_hz", 0)) > 0 and i >= 5:
                        node_p50s.append(float(values["latency_p50_ms"]))
        node_p50 = med(node_p50s)
    finally:
        node.send_signal(2)
        node.wait(timeout=10)
    engine = med(inproc)
    added = med(paired)
    print(f"{'':34}{'p50 ms':>10}")
    print(f"{'in process (Python API segment)':34}{engine:10.2f}")
    print(f"{'over DDS, end to end':34}{med(e2e):10.2f}")
    print(f"{'  peer (de)serialisation':34}{med(peer):10.2f}")
    print(f"{'  node: taken -> published':34}{node_p50:10.2f}  (its /diagnostics, median of the periods)")
    print(f"{'added by DDS and the node':34}{added:10.2f}  (per frame: end to end - peer - in process, median; target <= 2 ms)")


if __name__ == "__main__":
    main()
