#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test --workspace --no-fail-fast` does, in parallel,
with progress, and the Python package's stage beside them.

Cargo runs each test binary in turn and says nothing of how many remain, and one binary
at a time leaves a core idle for much of the run (a test waiting on a reference script,
a link, a DDP peer). So this builds them first (`cargo test --no-run`, cargo's own
output), then runs them JOBS at a time (SEGTOOL_TEST_JOBS, default: the CPU count), each
from its package's folder (cargo's working directory for tests), longest first by the
previous run's times, one line per finished job:

    [12/70] segtool-train tests/ddp ... ok, 14 passed in 33.1 s | 5m10s elapsed, ~4m left

Every job runs with SEGTOOL_REQUIRE_REFERENCES=1 (REQUIRE_VAR): a test whose reference (a
Python tool in the venv, ONNX Runtime's or OpenVINO's library, valgrind, ...) is missing
fails instead of skipping (segtool_testkit::missing_reference). A test that cannot run
here for another reason (no network namespaces, a GPU check `make test-gpu` owns) prints
`SKIPPED: <test>: <reason>` (segtool_testkit::skipped): this counts those lines per job,
takes them from the passed count, prints them under the job's line and totals them in
the summary, beside pytest's skips. A skip is never a pass.

Each package's integration tests are one binary (tests/it/main.rs: one link, not one per
test file); each of its modules, a test file of its own before, is a job of its own, in a
process of its own as cargo ran the files.

The jobs besides the test binaries: the doctests (`cargo test --doc`) and the Python
package (scripts/python_tests.sh test: the wheel, a fresh venv, mypy, pytest). Both run
cargo, which locks the target folder, so they never run at the same time; nor do two
binaries of a package whose tests share a fixture folder under CARGO_TARGET_TMPDIR (the
GStreamer plugin's, the C ABI's, the ROS 2 bag's). Times are kept in
$SEGTOOL_HOME/test-times.json; a fresh machine starts from scripts/test-times.json (this
machine's, committed). A failing job's output is printed in full; the exit status is
non-zero when anything failed.
"""
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time

# Exactly the test build scripts/one_build.py checks (a different package selection would
# resolve features differently). segtool-python has no Rust tests (test = false): maturin
# builds it (scripts/python_tests.sh, a job here) and pytest tests it.
CARGO_ARGS = ["--workspace"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEED_TIMES = os.path.join(ROOT, "scripts", "test-times.json")
# Packages whose test binaries share a fixture folder (see the module doc).
SHARED_FIXTURES = {"segtool-gst", "segtool-capi", "segtool-ros2"}
UNKNOWN_S = 30.0  # a job without a recorded time: started early rather than last
# Set for every job: a missing reference fails the test (testkit/src/skip.rs).
REQUIRE_VAR = "SEGTOOL_REQUIRE_REFERENCES"
# The line segtool_testkit::skipped prints: `SKIPPED: <test>: <reason>`. Written past
# libtest's capture, so it may follow a partial line of libtest's own output.
SKIPPED_LINE = re.compile(r"(?:^|\s)SKIPPED: (\S+): (.*)$")


def fmt(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


class Job:
    def __init__(self, key, label, cmd, cwd, group=None):
        self.key, self.label, self.cmd, self.cwd, self.group = key, label, cmd, cwd, group
        self.started = None


def test_binaries():
    """A Job per test binary, after building them all."""
    cmd = ["cargo", "test", *CARGO_ARGS, "--no-run", "--message-format=json-render-diagnostics"]
    if os.environ.get("SEGTOOL_CARGO_TIMINGS") == "1":
        cmd.append("--timings")  # target/cargo-timings/cargo-timing.html (first_run.sh)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    found = []
    for line in proc.stdout:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not msg.get("profile", {}).get("test"):
            continue
        target = msg["target"]
        package = msg["package_id"]
        name = package.split("#")[0].rsplit("/", 1)[-1].split("@")[0]
        if "#" in package:
            tail = package.split("#", 1)[1]
            name = tail.split("@")[0] if "@" in tail else name
        kind = target["kind"][0]
        cwd = os.path.dirname(msg["manifest_path"])
        group = name if name in SHARED_FIXTURES else None
        if kind == "test" and target["name"] == "it":
            found += module_jobs(name, msg["executable"], cwd, group)
            continue
        found.append(Job(
            f"{name}/{kind}/{target['name']}",
            f"{name} {'unit tests' if kind == 'lib' else kind + ' ' + target['name']}",
            [msg["executable"]],
            cwd,
            group=group,
        ))
    if proc.wait() != 0:
        sys.exit(f"cargo test --no-run failed (exit {proc.returncode})")
    return found


def module_jobs(package, exe, cwd, group):
    """A Job per module of a package's integration-test binary (tests/it/main.rs): each
    module was a test file of its own, and runs in a process of its own, as then."""
    listed = subprocess.run([exe, "--list", "--format", "terse"], cwd=cwd, check=True,
                            stdout=subprocess.PIPE, text=True).stdout
    modules = {}
    for line in listed.splitlines():
        if line.endswith(": test"):
            name = line[: -len(": test")]
            modules.setdefault(name.split("::", 1)[0], []).append(name)
    return [Job(f"{package}/test/{module}", f"{package} tests/{module}",
                [exe, "--exact", *names], cwd, group=group)
            for module, names in sorted(modules.items())]


def skipped_tests(output):
    """{test: reason} from the `SKIPPED: <test>: <reason>` lines (a test that skips
    several parts counts once)."""
    found = {}
    for line in output.splitlines():
        m = SKIPPED_LINE.search(line)
        if m:
            found.setdefault(m.group(1), m.group(2))
    return found


def summary_of(output):
    """(passed, failed, ignored, skipped): libtest's `test result:` lines summed, less the
    tests that printed a SKIPPED line (libtest counts them as passed); else pytest's last
    line (its skips as skipped)."""
    counts = [0, 0, 0, 0]
    libtest = False
    for line in output.splitlines():
        if line.startswith("test result:"):
            libtest = True
            for i, word in enumerate(("passed", "failed", "ignored")):
                m = re.search(rf"(\d+) {word}", line)
                counts[i] += int(m.group(1)) if m else 0
    if libtest:
        skips = len(skipped_tests(output))
        counts[3] += skips
        counts[0] = max(0, counts[0] - skips)
    else:  # pytest's last line: "25 passed, 1 skipped, 3 warnings in 34.03s"
        tail = output.strip().splitlines()[-1:] or [""]
        for i, word in ((0, "passed"), (1, "failed"), (3, "skipped")):
            m = re.search(rf"(\d+) {word}", tail[0])
            counts[i] += int(m.group(1)) if m else 0
    return tuple(counts)


def load_times(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def run_job(job, done):
    job.started = time.time()
    env = dict(os.environ, **{REQUIRE_VAR: "1"})
    proc = subprocess.run(job.cmd, cwd=job.cwd, stdout=subprocess.PIPE, env=env,
                          stderr=subprocess.STDOUT, text=True, errors="replace")
    done.put((job, proc.returncode, proc.stdout, time.time() - job.started))


def main():
    home = os.environ.get("SEGTOOL_HOME", os.path.expanduser("~/.cache/segtool"))
    times_path = os.path.join(home, "test-times.json")
    previous = load_times(times_path) or load_times(SEED_TIMES)
    slots = int(os.environ.get("SEGTOOL_TEST_JOBS") or os.cpu_count() or 1)

    t0 = time.time()
    jobs = test_binaries()
    print(f"built {len(jobs)} test binaries in {fmt(time.time() - t0)}", flush=True)
    jobs.append(Job("doctests", "doctests", ["cargo", "test", *CARGO_ARGS, "--doc"], ROOT,
                    group="cargo"))
    if os.environ.get("SEGTOOL_PYTHON_TESTS", "1") == "1":
        jobs.append(Job("python", "Python package (wheel, venv, mypy, pytest)",
                        ["bash", "scripts/python_tests.sh", "test"], ROOT, group="cargo"))
    expected = {j.key: previous.get(j.key, UNKNOWN_S) for j in jobs}
    pending = sorted(jobs, key=lambda j: -expected[j.key])
    total = len(jobs)
    print(f"running {total} jobs, {slots} at a time, longest first", flush=True)

    started = time.time()
    running, times, failures = [], {}, []
    counts = [0, 0, 0, 0]
    done = queue.Queue()
    finished = 0
    while pending or running:
        busy = {j.group for j in running if j.group}
        for job in list(pending):
            if len(running) >= slots:
                break
            if job.group and job.group in busy:
                continue
            pending.remove(job)
            running.append(job)
            busy.add(job.group)
            threading.Thread(target=run_job, args=(job, done), daemon=True).start()
        job, code, output, secs = done.get()
        running.remove(job)
        finished += 1
        times[job.key] = secs
        passed, failed, ignored, skipped = summary_of(output)
        for i, v in enumerate((passed, failed, ignored, skipped)):
            counts[i] += v
        now = time.time()
        left = (sum(expected[j.key] for j in pending)
                + sum(max(0.0, expected[j.key] - (now - j.started)) for j in running)) / slots
        status = "ok" if code == 0 else f"FAILED (exit {code})"
        skips = f", {skipped} skipped" if skipped else ""
        print(f"[{finished}/{total}] {job.label} ... {status}, {passed} passed{skips} in "
              f"{secs:.1f} s | {fmt(now - started)} elapsed, ~{fmt(left)} left", flush=True)
        if code == 0:
            for test, reason in skipped_tests(output).items():
                print(f"    SKIPPED: {test}: {reason}", flush=True)
        if code != 0:
            failures.append(job.label)
            print(output, flush=True)
        elif job.key == "python":
            # The stage's own lines: the wheel's time and what it compiled (first_run.sh
            # counts those crates), the venv's time.
            for line in output.splitlines():
                if line.startswith("[python]"):
                    print("    " + line, flush=True)

    os.makedirs(home, exist_ok=True)
    tmp = times_path + f".tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)
    os.replace(tmp, times_path)
    print(f"\n{counts[0]} passed, {counts[1]} failed, {counts[2]} ignored, {counts[3]} skipped "
          f"in {total} jobs ({fmt(time.time() - started)}; {fmt(sum(times.values()))} if run "
          f"one at a time)")
    if failures:
        print("failed: " + ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
