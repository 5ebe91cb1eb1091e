#!/usr/bin/env python3
"""The ROS 2 doors of python/tests/test_every_door.py, played by the ROS 2 world's own
Python libraries (no ROS 2 install): `rosbags` writes and reads the bags, Eclipse Cyclone
DDS (PyPI `cyclonedds`, the DDS behind rmw_cyclonedds) plays the camera and the viewer of
the live node. Runs in the project venv (SEGTOOL_PYTHON), which has both.

Frames are FRAMES/<name>.npy (uint8 HxWx3 RGB), taken in name order; frame i travels as a
sensor_msgs/msg/Image (rgb8, tight rows) stamped sec=1000+i, nanosec=i, frame_id "camera".

    every_door_ros2.py bag-write FRAMES BAG
        a rosbag2 folder (MCAP) with the frames on /cam/image_raw
    every_door_ros2.py bag-read OUT.mcap TOPIC DUMP
        each sensor_msgs/msg/Image of TOPIC (mono8 class maps) to DUMP/<i>.npy, i from the
        stamp; prints {"masks": [i, ...], "encodings": [...]}
    every_door_ros2.py live --domain D --topic T --masks M --node NAME FRAMES DUMP
            [--timeout S] [--discovery-s S]
        waits for the node's subscription of T and its masks topic M (DDS topics rt/...),
        then sends the frames on T one at a time, each after the previous one's answer:
        its class mask on M (DUMP/<i>.npy) or one more `failed` frame in the /diagnostics
        status of the node named NAME (or the timeout). Prints {"matched": bool,
        "frames": [{"i", "outcome": "mask" | "failed" | "timeout"}], "diagnostics": {...}}.
"""
import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

TOPIC = "/cam/image_raw"  # the bag's camera topic


def frames_of(folder: Path) -> list:
    return [np.load(p) for p in sorted(folder.glob("*.npy"))]


def bag_write(frames_dir: Path, bag: Path) -> None:
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.enums import StoragePlugin
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_JAZZY)
    Image = ts.types["sensor_msgs/msg/Image"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]
    with Writer(bag, version=9, storage_plugin=StoragePlugin.MCAP) as writer:
        conn = writer.add_connection(TOPIC, Image.__msgtype__, typestore=ts)
        for i, rgb in enumerate(frames_of(frames_dir)):
            h, w = rgb.shape[:2]
            msg = Image(header=Header(stamp=Time(sec=1000 + i, nanosec=i), frame_id="camera"),
                        height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
                        data=np.ascontiguousarray(rgb).reshape(-1))
            writer.write(conn, (1000 + i) * 10**9 + i, ts.serialize_cdr(msg, Image.__msgtype__))


def bag_read(out: Path, topic: str, dump: Path) -> None:
    from rosbags.highlevel import AnyReader

    dump.mkdir(parents=True, exist_ok=True)
    found, encodings = [], []
    with AnyReader([out]) as reader:
        conns = [c for c in reader.connections if c.topic == topic]
        for conn, _, raw in reader.messages(connections=conns):
            m = reader.deserialize(raw, conn.msgtype)
            i = m.header.stamp.sec - 1000
            arr = np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.step)[:, : m.width]
            np.save(dump / f"{i}.npy", arr)
            found.append(i)
            encodings.append(m.encoding)
    print(json.dumps({"masks": found, "encodings": encodings}))


def live(domain: int, topic: str, masks_topic: str, node: str, frames_dir: Path, dump: Path,
         timeout: float, discovery_s: float) -> None:
    from cyclonedds.core import Policy, Qos
    from cyclonedds.domain import DomainParticipant
    from cyclonedds.pub import DataWriter
    from cyclonedds.sub import DataReader
    from cyclonedds.topic import Topic
    from cyclonedds.util import duration

    # The ROS 2 message types as DDS sees them, as the node's own tests declare them.
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ros2_camera import DiagnosticArray, Header, Image, Time

    dump.mkdir(parents=True, exist_ok=True)
    q = Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(16),
            Policy.DataRepresentation(use_cdrv0_representation=True))
    dp = DomainParticipant(domain)
    masks = DataReader(dp, Topic(dp, "rt" + masks_topic, Image), qos=q)
    diag = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=q)
    writer = DataWriter(dp, Topic(dp, "rt" + topic, Image), qos=q)
    deadline = time.time() + discovery_s
    while time.time() < deadline:
        if writer.get_matched_subscriptions() and masks.get_matched_publications():
            break
        time.sleep(0.05)
    matched = bool(writer.get_matched_subscriptions() and masks.get_matched_publications())
    last = {}

    def poll():
        got = {}
        for m in masks.take(N=64):
            if isinstance(m, Image):
                arr = np.frombuffer(bytes(m.data), np.uint8).reshape(m.height, m.step)[:, : m.width]
                got[m.header.stamp.sec - 1000] = arr
        for d in diag.take(N=64):
            for status in d.status if isinstance(d, DiagnosticArray) else []:
                if node in status.name:  # another node on the domain is none of ours
                    last.clear()
                    last.update({kv.key: kv.value for kv in status.values})
        return got

    def failed() -> int:
        return int(last.get("failed", 0))

    outcomes = []
    if matched:
        time.sleep(0.3)  # let the first diagnostics arrive: the failed count to compare with
        poll()
        for i, rgb in enumerate(frames_of(frames_dir)):
            before = failed()
            h, w = rgb.shape[:2]
            writer.write(Image(header=Header(stamp=Time(sec=1000 + i, nanosec=i), frame_id="camera"),
                               height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
                               data=list(np.ascontiguousarray(rgb).tobytes())))
            outcome = "timeout"
            end = time.time() + timeout
            while time.time() < end:
                got = poll()
                if i in got:
                    np.save(dump / f"{i}.npy", got[i])
                    outcome = "mask"
                    break
                if failed() > before:
                    outcome = "failed"
                    break
                time.sleep(0.02)
            outcomes.append({"i": i, "outcome": outcome})
    print(json.dumps({"matched": matched, "frames": outcomes, "diagnostics": dict(last)}))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("bag-write")
    w.add_argument("frames", type=Path)
    w.add_argument("bag", type=Path)
    r = sub.add_parser("bag-read")
    r.add_argument("mcap", type=Path)
    r.add_argument("topic")
    r.add_argument("dump", type=Path)
    lv = sub.add_parser("live")
    lv.add_argument("--domain", type=int, required=True)
    lv.add_argument("--topic", required=True)
    lv.add_argument("--masks", required=True)
    lv.add_argument("--node", required=True)
    lv.add_argument("frames", type=Path)
    lv.add_argument("dump", type=Path)
    lv.add_argument("--timeout", type=float, default=20.0)
    lv.add_argument("--discovery-s", type=float, default=15.0)
    a = p.parse_args()
    if a.mode == "bag-write":
        bag_write(a.frames, a.bag)
    elif a.mode == "bag-read":
        bag_read(a.mcap, a.topic, a.dump)
    else:
        live(a.domain, a.topic, a.masks, a.node, a.frames, a.dump, a.timeout, a.discovery_s)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
