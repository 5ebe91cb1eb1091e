"""A ROS 2 camera and mask viewer played by Eclipse Cyclone DDS (PyPI `cyclonedds`, the DDS
behind ROS 2's rmw_cyclonedds), no ROS 2 install: the peer of ros2/tests/it/live.rs.

    python ros2_camera.py --out DIR --domain D --topic /cam/image_raw --masks /seg/class_mask
        [--frames N] [--size WxH] [--rate HZ] [--compressed] [--bad] [--reliable]
        [--listen-s S]

It publishes N frames (smooth colour fields, seeded) on the DDS topic ROS 2 maps the ROS
topic to (`rt/cam/image_raw`) with ROS 2's type names (`sensor_msgs::msg::dds_::Image_`,
XCDR1 as ROS 2 writes it), frame i stamped sec=1000+i, nanosec=i, frame_id "camera"; with
`--compressed`, JPEGs as `sensor_msgs/CompressedImage` on `<topic>/compressed`. With
`--bad`, before the frames: one message of each bad kind the node must survive (unknown
encodings bayer_rggb8 and yuv422, step shorter than a row, data shorter than step x
height, the big-endian flag; or with --compressed a corrupt JPEG). It subscribes to the
masks topic and `/diagnostics` and listens until every frame is answered or --listen-s
passes, then writes DIR/frames/<i>.png (the RGB frames; for --compressed the JPEG bytes,
DIR/frames/<i>.jpg), DIR/masks/<sec>_<nanosec>.npy (each class mask received, with its
header) and DIR/summary.json: sent, bad sent, masks received (stamps, frame ids,
encodings, sizes) and the last diagnostics key/values.
"""
import argparse
import io
import json
import os
import time
from dataclasses import dataclass

import numpy as np
from PIL import Image as PILImage
from cyclonedds.core import Policy, Qos
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import int32, sequence, uint8, uint32
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration


@dataclass
class Time(IdlStruct, typename="builtin_interfaces::msg::dds_::Time_"):
    sec: int32
    nanosec: uint32


@dataclass
class Header(IdlStruct, typename="std_msgs::msg::dds_::Header_"):
    stamp: Time
    frame_id: str


@dataclass
class Image(IdlStruct, typename="sensor_msgs::msg::dds_::Image_"):
    header: Header
    height: uint32
    width: uint32
    encoding: str
    is_bigendian: uint8
    step: uint32
    data: sequence[uint8]


@dataclass
class CompressedImage(IdlStruct, typename="sensor_msgs::msg::dds_::CompressedImage_"):
    header: Header
    format: str
    data: sequence[uint8]


@dataclass
class KeyValue(IdlStruct, typename="diagnostic_msgs::msg::dds_::KeyValue_"):
    key: str
    value: str


@dataclass
class DiagnosticStatus(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticStatus_"):
    level: uint8
    name: str
    message: str
    hardware_id: str
    values: sequence[KeyValue]


@dataclass
class DiagnosticArray(IdlStruct, typename="diagnostic_msgs::msg::dds_::DiagnosticArray_"):
    header: Header
    status: sequence[DiagnosticStatus]


def dds_name(ros_topic):
    return "rt" + ros_topic


def smooth_frame(rng, h, w):
    small = rng.integers(0, 256, size=(h // 16 + 2, w // 16 + 2, 3), dtype=np.uint8)
    img = PILImage.fromarray(small).resize((w, h), PILImage.BILINEAR)
    return np.asarray(img, dtype=np.uint8)


def qos(reliable, depth):
    reliability = Policy.Reliability.Reliable(duration(seconds=1)) if reliable else Policy.Reliability.BestEffort
    return Qos(reliability, Policy.History.KeepLast(depth), Policy.DataRepresentation(use_cdrv0_representation=True))


def image_msg(i, arr, encoding="rgb8", step=None, data=None, bigendian=0):
    h, w = arr.shape[:2]
    payload = arr.tobytes() if data is None else data
    return Image(
        header=Header(stamp=Time(sec=1000 + i, nanosec=max(i, 0)), frame_id="camera"),
        height=h, width=w, encoding=encoding, is_bigendian=bigendian,
        step=w * 3 if step is None else step, data=list(payload))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--domain", type=int, required=True)
    ap.add_argument("--topic", default="/cam/image_raw")
    ap.add_argument("--masks", default="/seg/class_mask")
    ap.add_argument("--colors", help="also subscribe to this color_mask topic (rgb8)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--size", default="96x64")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--compressed", action="store_true")
    ap.add_argument("--bad", action="store_true")
    ap.add_argument("--reliable", action="store_true")
    ap.add_argument("--listen-s", type=float, default=20.0)
    ap.add_argument("--discovery-s", type=float, default=10.0)
    a = ap.parse_args()
    w, h = (int(v) for v in a.size.split("x"))
    os.makedirs(os.path.join(a.out, "frames"), exist_ok=True)
    os.makedirs(os.path.join(a.out, "masks"), exist_ok=True)

    dp = DomainParticipant(a.domain)
    q = qos(a.reliable, 16)
    masks = DataReader(dp, Topic(dp, dds_name(a.masks), Image), qos=q)
    colors = DataReader(dp, Topic(dp, dds_name(a.colors), Image), qos=q) if a.colors else None
    if colors is not None:
        os.makedirs(os.path.join(a.out, "colors"), exist_ok=True)
    diag = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray),
                      qos=qos(True, 16))
    if a.compressed:
        writer = DataWriter(dp, Topic(dp, dds_name(a.topic + "/compressed"), CompressedImage), qos=q)
    else:
        writer = DataWriter(dp, Topic(dp, dds_name(a.topic), Image), qos=q)

    # Wait until the node's reader and writer are matched (discovery on loopback).
    deadline = time.time() + a.discovery_s
    while time.time() < deadline:
        if (writer.get_matched_subscriptions() and masks.get_matched_publications()
                and (colors is None or colors.get_matched_publications())):
            break
        time.sleep(0.05)
    matched = bool(writer.get_matched_subscriptions())
    if colors is not None:
        time.sleep(0.5)  # the node counts its picture subscribers once a poll (<= 0.1 s)

    rng = np.random.default_rng(11)
    bad_sent = 0
    if a.bad:
        junk = np.zeros((h, w, 3), np.uint8)
        if a.compressed:
            writer.write(CompressedImage(header=Header(stamp=Time(sec=1, nanosec=0), frame_id="camera"),
                                         format="jpeg", data=list(b"\xff\xd8\xff\xe0" + bytes(50))))
            bad_sent += 1
        else:
            for msg in [
                image_msg(-999, junk, encoding="bayer_rggb8", step=w),
                image_msg(-998, junk, encoding="yuv422", step=w * 2),
                image_msg(-997, junk, step=w * 3 - 1),
                image_msg(-996, junk, data=bytes(w * 3 * h - 7)),
                image_msg(-995, junk, bigendian=1),
            ]:
                writer.write(msg)
                bad_sent += 1
                time.sleep(0.02)
    sent = 0
    period = 1.0 / a.rate
    for i in range(a.frames):
        arr = smooth_frame(rng, h, w)
        if a.compressed:
            buf = io.BytesIO()
            PILImage.fromarray(arr).save(buf, format="JPEG", quality=90)
            data = buf.getvalue()
            with open(os.path.join(a.out, "frames", f"{i}.jpg"), "wb") as f:
                f.write(data)
            writer.write(CompressedImage(header=Header(stamp=Time(sec=1000 + i, nanosec=i), frame_id="camera"),
                                         format="jpeg", data=list(data)))
        else:
            PILImage.fromarray(arr).save(os.path.join(a.out, "frames", f"{i}.png"))
            writer.write(image_msg(i, arr))
        sent += 1
        time.sleep(period)

    received = []
    colored = []
    last_diag = {}
    diag_count = 0
    deadline = time.time() + a.listen_s
    while time.time() < deadline:
        for m in masks.take(N=64):
            if not isinstance(m, Image):
                continue
            # mono8, or mono16 (little-endian) from a model of more than 256 classes
            dtype = np.dtype("<u2") if m.encoding == "mono16" else np.dtype(np.uint8)
            arr = np.frombuffer(bytes(m.data), dtype=dtype).reshape(m.height, m.step // dtype.itemsize)[:, : m.width]
            np.save(os.path.join(a.out, "masks", f"{m.header.stamp.sec}_{m.header.stamp.nanosec}.npy"), arr)
            received.append({"sec": m.header.stamp.sec, "nanosec": m.header.stamp.nanosec,
                             "frame_id": m.header.frame_id, "encoding": m.encoding,
                             "size": [m.height, m.width]})
        for m in colors.take(N=64) if colors is not None else []:
            if not isinstance(m, Image):
                continue
            arr = np.frombuffer(bytes(m.data), dtype=np.uint8).reshape(m.height, m.step)
            np.save(os.path.join(a.out, "colors", f"{m.header.stamp.sec}_{m.header.stamp.nanosec}.npy"), arr)
            colored.append({"sec": m.header.stamp.sec, "nanosec": m.header.stamp.nanosec,
                            "encoding": m.encoding, "size": [m.height, m.width]})
        for d in diag.take(N=64):
            if isinstance(d, DiagnosticArray) and d.status:
                diag_count += 1
                last_diag = {kv.key: kv.value for kv in d.status[0].values}
        done = last_diag and int(last_diag.get("answered", 0)) + int(last_diag.get("dropped", 0)) >= sent
        if done and len(received) >= int(last_diag.get("answered", 0)) and (
                colors is None or len(colored) >= len(received)):
            break
        time.sleep(0.05)
    summary = {"matched": matched, "sent": sent, "bad_sent": bad_sent, "received": received,
               "colors": colored, "diagnostics_messages": diag_count, "diagnostics": last_diag}
    print(json.dumps(summary))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main()
