#!/usr/bin/env bash
# The first hour, measured as a newcomer meets it: a fresh clone in a temporary folder,
# with cargo's target folder, cargo's home (registry and crate cache), pip's cache and
# SEGTOOL_HOME (the venv) all empty, then `make demo` and `make test` in that order. Prints
# each command's stage table (scripts/stages.sh) and the two totals. Debian packages are
# the machine's own (apt is not undone); everything else is fetched and built from zero.
#   bash scripts/first_run.sh [REPO]     REPO: what to clone (default: this checkout's HEAD)
set -euo pipefail
src="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
work="$(mktemp -d "${TMPDIR:-/tmp}/segtool-first-run.XXXXXX")"
export CARGO_TARGET_DIR="$work/target"
export CARGO_HOME="$work/cargo-home"
export PIP_CACHE_DIR="$work/pip-cache"
export SEGTOOL_HOME="$work/segtool-home"
# cargo's timing report of the test build, to see what the build after the demo's costs
export SEGTOOL_CARGO_TIMINGS=1
mkdir -p "$CARGO_HOME" "$PIP_CACHE_DIR" "$SEGTOOL_HOME"
echo "first run in $work (clone of $src)" >&2
git clone -q "$src" "$work/segtool"
cd "$work/segtool"
echo "commit $(git rev-parse --short HEAD); CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores" >&2

seconds() { echo $((($(date +%s%N) - $1) / 1000000000)); }
# A failing command still gets its tables and counts (then this exits non-zero).
failed=()
t0=$(date +%s%N)
make demo 2>&1 | tee "$work/demo.log" || failed+=("make demo")
demo_s=$(seconds "$t0")
t0=$(date +%s%N)
make test 2>&1 | tee "$work/test.log" || failed+=("make test")
test_s=$(seconds "$t0")

echo
echo "== first run: $(git rev-parse --short HEAD) on $(nproc) cores =="
for log in demo test; do
    sed -n '/^make '"$log"': stage/,/^total/p' "$work/$log.log"
    echo
done
printf '%-12s %6d s\n%-12s %6d s\n' "make demo" "$demo_s" "make test" "$test_s"
# How often each crate was compiled over both commands: cargo's "Compiling NAME vX" status
# lines (the demo's and the test build's) plus the crates the wheel's build compiled
# besides segtool-python (scripts/python_tests.sh lists them: "also compiled: ...").
echo
python3 - "$work/demo.log" "$work/test.log" <<'EOP'
import collections, re, sys
text = "".join(open(f, errors="replace").read() for f in sys.argv[1:])
# crates.io crates only: a workspace crate's line appears again in the test build for its
# test harnesses (a unit of its own), which is not a rebuild.
count = collections.Counter(re.findall(r"^\s*Compiling (\S+ v[^\s(]+)$", text, re.M))
for line in re.findall(r"also compiled: (.*)", text):
    count.update(re.findall(r"(\S+ v\S+)", line))
again = {c: n for c, n in count.items() if n > 1}
tract = [n for c, n in count.items() if c.startswith("tract-core ")]
print(f"crates.io crates compiled: {len(count)}; tract-core compiled {sum(tract)} time(s)")
print("compiled more than once: " + (", ".join(f"{c} ({n}x)" for c, n in sorted(again.items())) or "none"))
EOP
echo "logs: $work/demo.log, $work/test.log (remove $work when done)"
if [ ${#failed[@]} -gt 0 ]; then
    echo "FAILED: ${failed[*]}" >&2
    exit 1
fi
