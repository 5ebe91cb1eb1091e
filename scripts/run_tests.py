#!/usr/bin/env python3
"""Runs the workspace's tests as `cargo test --workspace --no-fail-fast` does, with progress.

Cargo runs each test binary in turn and says nothing of how many remain, so this builds
them first (`cargo test --no-run`, cargo's own output), then runs each one from its
package's folder (cargo's working directory for tests), one line per binary:

    [12/60] segtool-train tests/ddp.rs ... ok, 14 passed in 33.1 s | 5m10s elapsed, ~4m left

The estimate comes from the previous run's times (kept in $SEGTOOL_HOME/test-times.json),
else from the mean so far. Doctests run last (`cargo test --doc`). A failing binary's
output is printed in full; the exit status is non-zero when anything failed.
"""
import json
import os
import subprocess
import sys
import time

# Exactly the test build scripts/one_build.py checks (a different package selection would
# resolve features differently). segtool-python has no Rust tests (test = false): maturin
# builds it (scripts/python_tests.sh, its own stage of `make test`) and pytest tests it.
CARGO_ARGS = ["--workspace"]


def fmt(seconds):
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def test_binaries():
    """(package, target name, kind, executable, package folder) of every test binary."""
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
        found.append((name, target["name"], target["kind"][0], msg["executable"],
                      os.path.dirname(msg["manifest_path"])))
    if proc.wait() != 0:
        sys.exit(f"cargo test --no-run failed (exit {proc.returncode})")
    return found


def summary_of(output):
    """libtest's `test result: ok. 14 passed; ...` counts, summed over the binary."""
    passed = failed = ignored = 0
    for line in output.splitlines():
        if line.startswith("test result:"):
            parts = line.replace(";", "").split()
            for i, word in enumerate(parts):
                if word == "passed":
                    passed += int(parts[i - 1])
                elif word == "failed":
                    failed += int(parts[i - 1])
                elif word == "ignored":
                    ignored += int(parts[i - 1])
    return passed, failed, ignored


def main():
    home = os.environ.get("SEGTOOL_HOME", os.path.expanduser("~/.cache/segtool"))
    times_path = os.path.join(home, "test-times.json")
    try:
        with open(times_path) as f:
            previous = json.load(f)
    except (OSError, ValueError):
        previous = {}

    t0 = time.time()
    binaries = test_binaries()
    print(f"built {len(binaries)} test binaries in {fmt(time.time() - t0)}", flush=True)
    total = len(binaries) + 1  # + doctests
    started = time.time()
    times, failures = {}, []
    counts = [0, 0, 0]
    for i, (package, name, kind, exe, folder) in enumerate(binaries, 1):
        key = f"{package}/{kind}/{name}"
        label = f"{package} {'unit tests' if kind == 'lib' else kind + ' ' + name}"
        print(f"[{i}/{total}] {label} ...", end="", flush=True)
        t0 = time.time()
        proc = subprocess.run([exe], cwd=folder, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, errors="replace")
        secs = time.time() - t0
        times[key] = secs
        passed, failed, ignored = summary_of(proc.stdout)
        for j, v in enumerate((passed, failed, ignored)):
            counts[j] += v
        status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
        remaining = [previous.get(f"{b[0]}/{b[2]}/{b[1]}") for b in binaries[i:]]
        mean = (time.time() - started) / i
        left = sum(r if r is not None else mean for r in remaining)
        print(f" {status}, {passed} passed in {secs:.1f} s | {fmt(time.time() - started)} "
              f"elapsed, ~{fmt(left)} left", flush=True)
        if proc.returncode != 0:
            failures.append(label)
            print(proc.stdout)

    print(f"[{total}/{total}] doctests ...", flush=True)
    t0 = time.time()
    doc = subprocess.run(["cargo", "test", *CARGO_ARGS, "--doc"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, errors="replace")
    passed, failed, ignored = summary_of(doc.stdout)
    for j, v in enumerate((passed, failed, ignored)):
        counts[j] += v
    print(f"[{total}/{total}] doctests ... {'ok' if doc.returncode == 0 else 'FAILED'}, "
          f"{passed} passed in {time.time() - t0:.1f} s", flush=True)
    if doc.returncode != 0:
        failures.append("doctests")
        print(doc.stdout)

    os.makedirs(home, exist_ok=True)
    tmp = times_path + f".tmp.{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(times, f, indent=1, sort_keys=True)
    os.replace(tmp, times_path)
    print(f"\n{counts[0]} passed, {counts[1]} failed, {counts[2]} ignored in {total} test "
          f"binaries ({fmt(time.time() - started)})")
    if failures:
        print("failed: " + ", ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
