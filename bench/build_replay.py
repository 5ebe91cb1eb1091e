#!/usr/bin/env python3
"""What a set of crates costs a cold build's wall time, from one measured build.

    python3 bench/build_replay.py TIMING.html [--jobs 2] [--without-packages segtool-gst,segtool-ros2]

TIMING.html is cargo's `--timings` report of the build (`make demo` writes one when
SEGTOOL_CARGO_TIMINGS=1; scripts/first_run.sh sets it). The script replays the build as a
list schedule on --jobs slots: each unit (a crate's lib, build script run, binary...) takes
the duration cargo measured and starts when its dependencies allow (cargo's own
unlock edges: after a dependency's metadata for pipelined units, after its end
otherwise), longest chain first among the ready ones. It prints the replay of the whole
build next to the measured wall time (how well the model fits), then the replay without
every unit that only the named workspace packages need (found by `cargo build --unit-graph`
with and without them), and the difference: what those crates add to the build's length.
"""
import argparse
import heapq
import json
import os
import re
import subprocess
import sys


def units_of(html):
    text = open(html, errors="replace").read()
    m = re.search(r"const UNIT_DATA = (\[.*?\]);\n", text, re.S)
    if not m:
        sys.exit(f"{html}: no UNIT_DATA (not a cargo --timings report?)")
    return json.loads(m.group(1))


def unit_keys(args):
    """(package, version, mode) of every unit `cargo build ARGS` would build."""
    env = dict(os.environ, RUSTC_BOOTSTRAP="1")
    out = subprocess.run(["cargo", "build", *args, "--unit-graph", "-Z", "unstable-options"],
                         env=env, check=True, capture_output=True, text=True).stdout
    keys = set()
    for u in json.loads(out)["units"]:
        # "registry+https://...#serde@1.0.219", "path+file:///.../gst#segtool-gst@0.1.0"
        name, version = u["pkg_id"].rsplit("#", 1)[-1].rsplit("@", 1)
        keys.add((name, version, u["mode"]))
    return keys


def mode_of(unit):
    """The unit graph's mode of a timing report's unit (a build script's run is its own)."""
    return "run-custom-build" if unit.get("mode") == "run-custom-build" else "build"


def edges(unit, rmeta):
    """The units this one unblocks (after its metadata when rmeta); older cargo said
    "unlocked"."""
    kind = "rmeta_units" if rmeta else "units"
    return unit.get(f"unblocked_{kind}", unit.get(f"unlocked_{kind}")) or []


def rmeta_time(unit):
    """When the unit's metadata was ready: the end of rustc's frontend section."""
    if unit.get("rmeta_time") is not None:
        return unit["rmeta_time"]
    for name, span in unit.get("sections") or []:
        if name == "frontend":
            return span["end"]
    return None


def replay(units, jobs, skip=frozenset()):
    """The list schedule's length in seconds, leaving out the units whose index is in skip."""
    by_i = {u["i"]: u for u in units}
    waits = {i: 0 for i in by_i}  # unlockers not yet done, per unit
    unlock = {i: [] for i in by_i}  # (unit, after rmeta?) each unit unlocks
    for u in units:
        for j in edges(u, False):
            unlock[u["i"]].append((j, False))
            waits[j] += 1
        for j in edges(u, True):
            unlock[u["i"]].append((j, True))
            waits[j] += 1

    # Priority: the longest chain of durations below a unit (what the critical path needs).
    memo = {}

    def chain(i):
        if i not in memo:
            d = 0.0 if i in skip else by_i[i]["duration"]
            memo[i] = d + max((chain(j) for j, _ in unlock[i]), default=0.0)
        return memo[i]

    sys.setrecursionlimit(10000)
    ready_at = {i: 0.0 for i in by_i}
    ready = [(-chain(i), i) for i in by_i if waits[i] == 0]
    heapq.heapify(ready)
    events = []  # (time, kind, unit): kind 0 = rmeta, 1 = end
    free, now, end = jobs, 0.0, 0.0
    pending_ready = []  # (ready time, -chain, i), not yet ready by time

    def release(i, rmeta, t):
        for j, after_rmeta in unlock[i]:
            if after_rmeta == rmeta:
                waits[j] -= 1
                ready_at[j] = max(ready_at[j], t)
                if waits[j] == 0:
                    heapq.heappush(ready, (-chain(j), j))

    while ready or events:
        while free > 0 and ready:
            _, i = heapq.heappop(ready)
            start = max(now, ready_at[i])
            u = by_i[i]
            d = 0.0 if i in skip else u["duration"]
            rm = rmeta_time(u)
            has_rmeta_edges = bool(edges(u, True))
            if has_rmeta_edges:
                heapq.heappush(events, (start + (min(rm, d) if rm is not None else d), 0, i))
            if d > 0:
                free -= 1
                heapq.heappush(events, (start + d, 1, i))
            else:
                release(i, False, start)
                end = max(end, start)
        if not events:
            break
        t, kind, i = heapq.heappop(events)
        now = max(now, t)
        if kind == 0:
            release(i, True, t)
        else:
            free += 1
            end = max(end, t)
            release(i, False, t)
    return end


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("timing_html")
    ap.add_argument("--jobs", type=int, default=os.cpu_count())
    ap.add_argument("--build-args", default="--workspace --exclude segtool-python",
                    help="the measured build's package selection")
    ap.add_argument("--without-packages", default="segtool-gst,segtool-ros2")
    args = ap.parse_args()
    units = units_of(args.timing_html)
    measured = max(u["start"] + u["duration"] for u in units)
    left_out = [p for p in args.without_packages.split(",") if p]
    full = unit_keys(args.build_args.split())
    less = unit_keys(args.build_args.split() + [a for p in left_out for a in ("--exclude", p)])
    only = full - less
    skip = {u["i"] for u in units if (u["name"], u["version"], mode_of(u)) in only}
    cpu = sum(units[i]["duration"] for i in range(len(units)) if units[i]["i"] in skip)
    with_all = replay(units, args.jobs)
    without = replay(units, args.jobs, frozenset(skip))
    print(f"units {len(units)}; measured build {measured:.0f} s; replay on {args.jobs} slots "
          f"{with_all:.0f} s")
    print(f"without {', '.join(left_out)}: {len(skip)} units ({cpu:.0f} s of compile time) "
          f"left out, replay {without:.0f} s; they add {with_all - without:.0f} s")


if __name__ == "__main__":
    main()
