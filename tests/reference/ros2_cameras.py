"""Several ROS 2 cameras and their mask viewers, played by Eclipse Cyclone DDS (PyPI
`cyclonedds`), no ROS 2 install: the peer of ros2/tests/it/live.rs's multi-camera tests.

    python ros2_cameras.py --out DIR --domain D [--rate HZ] [--reliable] [--listen-s S]
        --camera TOPIC,MASKS,FRAMES,SIZE[,SIZE2] --camera ...

Camera k publishes FRAMES frames (smooth colour fields, seeded by k) on TOPIC as
`sensor_msgs/Image` rgb8 (ROS 2's type names and XCDR1, as ros2_camera.py), frame i stamped
sec=1000+i, nanosec=1000*k+i, frame_id "camera<k>"; with SIZE2 (WxH), frames from FRAMES/2 on
have that size. The cameras publish in turn, one frame each per period, so a camera with
fewer frames goes quiet while the others go on. Each camera's class masks are taken from its
MASKS topic, and `/diagnostics` from its topic; it listens until every camera's status says
all its frames are answered, dropped or failed and their masks are in, or --listen-s passes.

Writes DIR/<k>/frames/<i>.png, DIR/<k>/masks/<sec>_<nanosec>.npy and prints the summary
(also DIR/summary.json): matched, each camera's topic, frames sent and masks received
(stamps, frame ids, encodings, sizes), the node's status values and each camera's status
values by topic (the last diagnostics message).
"""
import argparse
import json
import os
import sys
import time

import numpy as np
from PIL import Image as PILImage
from cyclonedds.domain import DomainParticipant
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ros2_camera import DiagnosticArray, Header, Image, Time, dds_name, qos, smooth_frame  # noqa: E402


def size(text):
    w, h = (int(v) for v in text.split("x"))
    return w, h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--domain", type=int, required=True)
    ap.add_argument("--camera", action="append", required=True,
                    help="TOPIC,MASKS,FRAMES,SIZE[,SIZE2]")
    ap.add_argument("--rate", type=float, default=20.0)
    ap.add_argument("--reliable", action="store_true")
    ap.add_argument("--listen-s", type=float, default=20.0)
    ap.add_argument("--discovery-s", type=float, default=10.0)
    a = ap.parse_args()

    dp = DomainParticipant(a.domain)
    q = qos(a.reliable, 16)
    cams = []
    for k, spec in enumerate(a.camera):
        parts = spec.split(",")
        topic, masks, frames = parts[0], parts[1], int(parts[2])
        sizes = [size(parts[3])] + [size(p) for p in parts[4:5]]
        out = os.path.join(a.out, str(k))
        os.makedirs(os.path.join(out, "frames"), exist_ok=True)
        os.makedirs(os.path.join(out, "masks"), exist_ok=True)
        cams.append({
            "k": k, "topic": topic, "frames": frames, "sizes": sizes, "out": out,
            "writer": DataWriter(dp, Topic(dp, dds_name(topic), Image), qos=q),
            "masks": DataReader(dp, Topic(dp, dds_name(masks), Image), qos=q),
            "rng": np.random.default_rng(11 + k), "sent": 0, "received": [],
        })
    diag = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=qos(True, 16))

    deadline = time.time() + a.discovery_s
    while time.time() < deadline:
        if all(c["writer"].get_matched_subscriptions() and c["masks"].get_matched_publications()
               for c in cams):
            break
        time.sleep(0.05)
    matched = all(bool(c["writer"].get_matched_subscriptions()) for c in cams)

    period = 1.0 / a.rate
    for i in range(max(c["frames"] for c in cams)):
        for c in cams:
            if i >= c["frames"]:
                continue  # this camera has gone quiet
            w, h = c["sizes"][1] if len(c["sizes"]) > 1 and i >= c["frames"] // 2 else c["sizes"][0]
            arr = smooth_frame(c["rng"], h, w)
            PILImage.fromarray(arr).save(os.path.join(c["out"], "frames", f"{i}.png"))
            c["writer"].write(Image(
                header=Header(stamp=Time(sec=1000 + i, nanosec=1000 * c["k"] + i),
                              frame_id=f"camera{c['k']}"),
                height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
                data=list(arr.tobytes())))
            c["sent"] += 1
        time.sleep(period)

    node = {}
    by_topic = {}
    diag_count = 0

    def done():
        for c in cams:
            d = by_topic.get(c["topic"])
            if not d:
                return False
            settled = sum(int(d[key]) for key in ("answered", "dropped", "failed"))
            if settled < c["sent"] or int(d["pending"]) != 0 or len(c["received"]) < int(d["answered"]):
                return False
        return True

    deadline = time.time() + a.listen_s
    while time.time() < deadline:
        for c in cams:
            for m in c["masks"].take(N=64):
                if not isinstance(m, Image):
                    continue
                dtype = np.dtype("<u2") if m.encoding == "mono16" else np.dtype(np.uint8)
                arr = np.frombuffer(bytes(m.data), dtype=dtype).reshape(
                    m.height, m.step // dtype.itemsize)[:, : m.width]
                stamp = f"{m.header.stamp.sec}_{m.header.stamp.nanosec}"
                np.save(os.path.join(c["out"], "masks", f"{stamp}.npy"), arr)
                c["received"].append({"sec": m.header.stamp.sec, "nanosec": m.header.stamp.nanosec,
                                      "frame_id": m.header.frame_id, "encoding": m.encoding,
                                      "size": [m.height, m.width]})
        for d in diag.take(N=64):
            if isinstance(d, DiagnosticArray) and d.status:
                diag_count += 1
                node = {kv.key: kv.value for kv in d.status[0].values}
                for s in d.status[1:]:
                    values = {kv.key: kv.value for kv in s.values}
                    values["name"] = s.name
                    values["level"] = int(s.level)
                    by_topic[values.get("topic", s.name)] = values
        if done():
            break
        time.sleep(0.05)
    summary = {
        "matched": matched,
        "diagnostics_messages": diag_count,
        "node": node,
        "cameras": [{"topic": c["topic"], "sent": c["sent"], "received": c["received"],
                     "diagnostics": by_topic.get(c["topic"], {})} for c in cams],
    }
    print(json.dumps(summary))
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(summary, f)


if __name__ == "__main__":
    main()
