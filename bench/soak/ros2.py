"""The ROS 2 node: `segtool-ros2 node --reliable` on its own DDS domain, and in this
process a Cyclone DDS peer (PyPI `cyclonedds`, the DDS of rmw_cyclonedds) that publishes
ffmpeg's frames, paced, as sensor_msgs/Image (rgb8; frame i stamped sec = 1000 + i) and
takes the node's class_mask and /diagnostics. The types are tests/reference/ros2_camera.py's
(ROS 2's names, `data: sequence[uint8]`, so the type information on the bus is ROS 2's);
only the encoder of `data` is swapped for cyclonedds' own `bytes` one (`raw_data`): the
same CDR (uint32 length, then the octets), from and into `bytes`, instead of a list of
half a million ints per frame (21 ms of a core per frame to write, more to read back at
these rates; the peer shares the cores with the node under test). Latency: the peer's, frame
written to its class_mask taken. Counts: the node's own (/diagnostics while it runs, its
final `stopped:` line after SIGINT). Process under test: segtool-ros2 (not the peer).
Reliable QoS, keep last 8 on the publisher, as a camera driver's: a sample the node's reader
has not acknowledged when 8 newer ones are written is overwritten, which the node counts as
lost (a gap in the publisher's sequence numbers). The counts check: the node's received plus
its lost equal the frames written, and its answered plus dropped equal its received."""
import io
import os
import sys
import re
import signal
import subprocess
import threading
import time

from cyclonedds.core import InstanceState, Policy, Qos, ReadCondition, SampleState, ViewState, WaitSet
from cyclonedds.domain import DomainParticipant
from cyclonedds.idl._machinery import BytesMachine
from cyclonedds.pub import DataWriter
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from . import common

STOPPED = re.compile(r"stopped: received (\d+), answered (\d+), dropped (\d+), failed (\d+), bad (\d+), "
                     r"lost (\d+)")


# The ROS 2 messages as the tests publish them (tests/reference/ros2_camera.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "reference"))
from ros2_camera import DiagnosticArray, Header, Image, Time  # noqa: E402


def raw_data(idl_type):
    """`idl_type`'s `data: sequence[uint8]` encoded from and decoded into `bytes`: the
    member's machine replaced by cyclonedds' BytesMachine, whose CDR is the same (checked
    here once against the stock encoder, so a cyclonedds that changes either fails loudly
    rather than putting other bytes on the bus)."""
    idl = idl_type.__idl__
    probe = idl_type(header=Header(stamp=Time(sec=1, nanosec=2), frame_id="probe"), height=1,
                     width=3, encoding="rgb8", is_bigendian=0, step=9, data=list(range(9)))
    stock = probe.serialize(use_version_2=False)
    idl.populate()
    for machine in (idl.v1_machine, idl.v2_machine):
        machine.members_machines["data"] = BytesMachine()
    probe.data = bytes(range(9))
    if probe.serialize(use_version_2=False) != stock or idl_type.deserialize(stock).data != probe.data:
        raise RuntimeError("cyclonedds: the bytes encoder of sequence[uint8] differs from the stock one")


raw_data(Image)


def qos(depth):
    return Qos(Policy.Reliability.Reliable(duration(seconds=1)), Policy.History.KeepLast(depth),
               Policy.DataRepresentation(use_cdrv0_representation=True))


# The node's allocator (ros2/src/cmd_node.rs, keep_freed_frames: mallopt
# M_MMAP_THRESHOLD 64 MiB, M_TRIM_THRESHOLD 256 MiB) as glibc tunables, for the engine's
# rate: with dynamic shapes ONNX Runtime allocates each run's tensors afresh, and under
# glibc's defaults their page faults halve the rate (13 against 24 frames/s here), which
# the node does not pay.
NODE_MALLOC = {"GLIBC_TUNABLES": "glibc.malloc.mmap_threshold=67108864:"
                                 "glibc.malloc.trim_threshold=268435456"}


def run(cfg):
    name = "ros2"
    fps = common.engine_rate(cfg, dynamic=True, env=NODE_MALLOC)
    rate = cfg.overload * fps
    common.log(f"[{name}] engine alone: {fps:.1f} frames/s; feeding {rate:.1f} frames/s")
    domain = 150 + os.getpid() % 80
    proc = subprocess.Popen(
        [os.path.join(cfg.target, "segtool-ros2"), "node", "--model", cfg.model, "--engine", "ort",
         "--threads", str(cfg.threads), "--reliable",
         "--ros-args", "-r", "__ns:=/soak", "-r", "image:=/soak/image_raw"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(cfg.env, ROS_DOMAIN_ID=str(domain)))
    err = common.Lines(io.TextIOWrapper(proc.stderr), os.path.join(cfg.out, f"{name}.log"))
    rec = common.Record()
    diag = {}
    halt = threading.Event()
    try:
        err.wait_for(r"^node .*\(domain", 120, proc)
        dp = DomainParticipant(domain)
        writer = DataWriter(dp, Topic(dp, "rt/soak/image_raw", Image), qos=qos(8))
        masks = DataReader(dp, Topic(dp, "rt/soak/class_mask", Image), qos=qos(64))
        diags = DataReader(dp, Topic(dp, "rt/diagnostics", DiagnosticArray), qos=qos(16))
        waitset = WaitSet(dp)
        any_state = SampleState.NotRead | ViewState.Any | InstanceState.Any
        waitset.attach(ReadCondition(masks, any_state))
        waitset.attach(ReadCondition(diags, any_state))
        deadline = time.time() + 30
        while not (writer.get_matched_subscriptions() and masks.get_matched_publications()):
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(f"{name}: the node did not match on the bus within 30 s")
            time.sleep(0.05)

        def take():
            while not halt.is_set():
                waitset.wait(duration(milliseconds=200))  # blocking: no core taken
                for m in masks.take(N=64):
                    if isinstance(m, Image) and rec.t0 is not None:
                        rec.answer(m.header.stamp.sec - 1000)
                for d in diags.take(N=16):
                    if isinstance(d, DiagnosticArray) and d.status:
                        diag.update({kv.key: kv.value for kv in d.status[0].values})

        taker = threading.Thread(target=take, daemon=True)
        taker.start()
        step = cfg.width * 3

        def send(i, frame):
            writer.write(Image(header=Header(stamp=Time(sec=1000 + i, nanosec=0), frame_id="camera"),
                               height=cfg.height, width=cfg.width, encoding="rgb8",
                               is_bigendian=0, step=step, data=frame))

        fed = common.feed(cfg, name, rate, send, rec, proc,
                          lambda: common.Sampler(name, proc.pid, rec,
                                                 lambda: int(diag.get("dropped", 0))))
        # Drained: the node has accounted for every frame sent and its masks are here.
        deadline = time.time() + 60
        while time.time() < deadline:
            done = sum(int(diag.get(k, 0)) for k in ("answered", "dropped", "failed", "lost"))
            if done >= fed["sent"] and len(rec.answers) >= int(diag.get("answered", 0)):
                break
            time.sleep(0.2)
        time.sleep(1.5)  # one more diagnostics period
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(timeout=30)
        halt.set()
        taker.join(5)
        err.join(10)
    finally:
        halt.set()
        if proc.poll() is None:
            proc.kill()
    line = next((ln for ln in reversed(err.tail) if ln.startswith("stopped:")), "")
    m = STOPPED.search(line)
    if rc != 0 or not m:
        raise RuntimeError(f"{name}: the node exited {rc}; last lines:\n" + "\n".join(err.tail))
    received, answered, dropped, failed, bad, lost = (int(g) for g in m.groups())
    final = {"sent": received, "answered": answered, "dropped": dropped, "failed": failed + bad,
             "lost": lost,
             "observed": len(rec.answers), "node_sent": int(diag.get("sent", -1))}
    summary = common.evaluate(name, cfg, rec, fed, final, fps, rate,
                              {"own_summary": line, "last_diagnostics": diag,
                               "process": "segtool-ros2 node", "domain": domain})
    return summary, fed["rows"], rec
