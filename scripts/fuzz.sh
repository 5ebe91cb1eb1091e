#!/usr/bin/env bash
# `make fuzz`: builds the cargo-fuzz targets of fuzz/ (libFuzzer, AddressSanitizer; on
# stable rustc through RUSTC_BOOTSTRAP=1, the C++ pickle shim instrumented too with
# SEGTOOL_SHIM_ASAN=1), then runs each target for FUZZ_S seconds and prints, per target,
# executions, coverage (libFuzzer's `cov:` edges), new corpus entries and crashes; the same
# table goes to $SEGTOOL_HOME/fuzz-last.txt.
#
#   FUZZ_S=600          seconds per target (default 600)
#   FUZZ_TARGETS=a,b    the targets to build and run (default: all, `cargo fuzz list`);
#                       only their dependencies are compiled
#   FUZZ_JOBS=1         libFuzzer processes per target (-fork=N; default 1)
#   FUZZ_ARGS="..."     more libFuzzer flags
#   FUZZ_NO_BUILD=1     use the binaries already built
#
# The grown corpus is kept outside the clone, $SEGTOOL_HOME/fuzz-corpus/<target> (seeded
# from fuzz/corpus, fuzz/regressions and scripts/fuzz_seeds.sh's seeds, made on the first
# run); crash, timeout and out-of-memory inputs go to $SEGTOOL_HOME/fuzz-artifacts/<target>.
# Each target runs in libFuzzer's fork mode, so a crash is recorded and fuzzing goes on.
# A crash input belongs in fuzz/regressions/<target>/ once fixed (fuzz/README.md).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SEGTOOL_HOME:-$HOME/.cache/segtool}"
secs="${FUZZ_S:-600}"
jobs="${FUZZ_JOBS:-1}"
bin_dir="$root/fuzz/target/x86_64-unknown-linux-gnu/release"
log() { echo "[fuzz] $*" >&2; }
cd "$root"

command -v cargo-fuzz >/dev/null || {
    log "installing cargo-fuzz (cargo install cargo-fuzz --locked; a few minutes)"
    cargo install cargo-fuzz --locked >&2
}

if [ -n "${FUZZ_TARGETS:-}" ]; then
    IFS=', ' read -r -a targets <<<"$FUZZ_TARGETS"
    # Only what these targets call is compiled (fuzz/Cargo.toml: a feature per target).
    features=(--no-default-features --features "$(IFS=,; echo "${targets[*]}")")
else
    mapfile -t targets < <(cargo fuzz list)
    features=()
fi

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
    log "building ${targets[*]} (fuzz/target; the first build of all of them takes about an hour here)"
    started=$(date +%s)
    # NCCL is of no use to a parser: the c10d shim builds with gloo only (faster).
    SEGTOOL_SHIM_ASAN=1 SEGTOOL_NO_NCCL=1 RUSTC_BOOTSTRAP=1 \
        cargo fuzz build --codegen-units 16 "${features[@]}" >&2
    log "  built in $(($(date +%s) - started)) s"
fi

seeds="$home/fuzz-seeds"
if [ ! -d "$seeds" ]; then
    log "making seeds (scripts/fuzz_seeds.sh)"
    bash "$root/scripts/fuzz_seeds.sh" "$seeds"
fi

table="$home/fuzz-last.txt"
mkdir -p "$home"
rows=()
row() { printf '%-18s %12s %10s %9s %8s %8s %8s\n' "$@"; }
header="$(row target executions cov_edges corpus new_corp crashes seconds)"
failed=0
for t in "${targets[@]}"; do
    [ -x "$bin_dir/$t" ] || { log "no binary $bin_dir/$t (build first)"; exit 1; }
    corpus="$home/fuzz-corpus/$t"
    artifacts="$home/fuzz-artifacts/$t"
    mkdir -p "$corpus" "$artifacts"
    # The scratch files of the targets (and their tiny model), removed afterwards.
    scratch="$home/fuzz-tmp/$t.$$"
    rm -rf "$scratch" && mkdir -p "$scratch"
    extra=()
    for d in "$root/fuzz/corpus/$t" "$root/fuzz/regressions/$t" "$seeds/$t"; do
        [ -d "$d" ] && extra+=("$d")
    done
    dict=()
    [ -f "$root/fuzz/dicts/$t.dict" ] && dict=("-dict=$root/fuzz/dicts/$t.dict")
    before=$(find "$corpus" -type f | wc -l)
    crashes_before=$(find "$artifacts" -type f | wc -l)
    out="$home/fuzz-artifacts/$t.log"
    log "$t: ${secs} s (corpus $corpus, $before entries)"
    started=$(date +%s)
    # -fork keeps fuzzing past a crash, timeout or OOM (each is written to $artifacts);
    # the first corpus directory is the one new entries are added to.
    set +e
    TMPDIR="$scratch" ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}" \
        "$bin_dir/$t" "$corpus" "${extra[@]}" "${dict[@]}" \
        -max_total_time="$secs" -fork="$jobs" -ignore_crashes=1 -ignore_timeouts=1 \
        -ignore_ooms=1 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
        -artifact_prefix="$artifacts/" ${FUZZ_ARGS:-} >"$out" 2>&1
    rc=$?
    set -e
    took=$(($(date +%s) - started))
    rm -rf "$scratch"
    # fork mode's status lines: "#EXECS: cov: N ft: N corp: N exec/s: N oom/timeout/crash:".
    last="$(grep -aE '^#[0-9]+: cov: ' "$out" | tail -1 || true)"
    if [ -z "$last" ]; then
        last="$(grep -aE '^#[0-9]+.*cov: ' "$out" | tail -1 || true)"
    fi
    execs="$(sed -E 's/^#([0-9]+).*/\1/' <<<"$last")"
    cov="$(sed -E 's/.*cov: ([0-9]+).*/\1/' <<<"$last")"
    after=$(find "$corpus" -type f | wc -l)
    crashes=$(($(find "$artifacts" -type f | wc -l) - crashes_before))
    rows+=("$(row "$t" "${execs:-?}" "${cov:-?}" "$after" "$((after - before))" "$crashes" "$took")")
    log "${rows[-1]}"
    if [ -z "$last" ] || { [ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ]; }; then
        log "$t: libFuzzer exited $rc without stats; see $out"
        failed=1
    fi
    [ "$crashes" -eq 0 ] || failed=1
done

{
    echo "segtool fuzz run $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(nproc) cores), ${secs} s per target"
    echo "$header"
    printf '%s\n' "${rows[@]}"
    echo "corpus: $home/fuzz-corpus/<target>; crashes: $home/fuzz-artifacts/<target> (logs: <target>.log)"
} | tee "$table"
exit "$failed"
