#!/usr/bin/env bash
# `make demo` and `make test`, stage by stage: each stage says what it does as it starts
# and how long it took as it ends, and a table of the wall time per stage closes the run.
#   demo: set-up (apt, pip) -> build (cargo, the dev profile `make test` shares) -> demo
#   test: set-up -> checks -> build the test binaries -> run them, the doctests and the
#         Python package's stage in parallel (scripts/run_tests.py, with progress)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
what="${1:?usage: stages.sh demo|test}"

names=()
secs=()
run_started=$(date +%s%N)
stage() {
    local name="$1"
    shift
    echo "==> [$what] $name" >&2
    local t0
    t0=$(date +%s%N)
    "$@"
    local t=$((($(date +%s%N) - t0) / 1000000000))
    names+=("$name")
    secs+=("$t")
    printf '==> [%s] %s: done in %d s\n' "$what" "$name" "$t" >&2
}
table() {
    local total=$((($(date +%s%N) - run_started) / 1000000000))
    echo >&2
    printf '%-38s %9s\n' "make $what: stage" "wall time" >&2
    for i in "${!names[@]}"; do
        printf '%-38s %7d s\n' "${names[$i]}" "${secs[$i]}" >&2
    done
    printf '%-38s %7d s\n' "total" "$total" >&2
}
setup() {
    local env_file
    env_file="$(bash scripts/setup.sh)"
    # shellcheck disable=SC1090
    source "$env_file"
}

check_layout_and_build() {
    python3 scripts/check_layout.py
    python3 scripts/one_build.py check
}

# Crate downloads need nothing from the set-up: they run during it (network, not CPU).
fetch_in_background() {
    cargo fetch --quiet >/dev/null 2>&1 &
    fetch_pid=$!
}
wait_for_fetch() {
    # A failed fetch is not fatal: the build fetches again and says what failed.
    wait "$fetch_pid" || true
}

case "$what" in
    demo)
        fetch_in_background
        stage "set-up (apt, pip)" setup
        wait_for_fetch
        # Every front end but the Python extension (maturin builds that, with PyO3's
        # variables): the crates the ROS 2 node and the GStreamer plugin add compile
        # beside tract-core, which holds one core for most of a cold build.
        timings=()
        [ "${SEGTOOL_CARGO_TIMINGS:-0}" = 1 ] && timings=(--timings)
        stage "build (cargo build --workspace)" cargo build --workspace --exclude segtool-python "${timings[@]}"
        stage "demo (data, train, export, compare)" "${CARGO_TARGET_DIR:-target}/debug/segtool" demo --out out/demo
        ;;
    test)
        # SEGTOOL_BROWSER=1: Debian's chromium for the report page's browser test;
        # SEGTOOL_BOOK=1: mdBook for the user guide.
        export SEGTOOL_BROWSER=1 SEGTOOL_BOOK=1
        stage "set-up (apt, pip, chromium, mdbook)" setup
        # Seconds, and nothing compiled: every crates.io crate in one configuration across
        # the demo, test and wheel builds (workspace-hack/), no circles between source
        # files, no folder names that tools misread.
        stage "layout and one-build checks" check_layout_and_build
        # The user guide: mdBook builds book/ (target/book), and every link of the book
        # and the README points at a file of the repository or a public page.
        stage "user guide (mdbook build, links)" bash scripts/book.sh
        # The runtime's public API (rustdoc's JSON, walked by scripts/public_api.py)
        # against runtime/public-api.txt: it changes only on purpose.
        stage "runtime API snapshot" python3 scripts/public_api.py check
        # The test binaries, the doctests and the Python package (the wheel, a fresh venv,
        # mypy, pytest: scripts/python_tests.sh), as many at a time as there are cores.
        stage "build and run the tests (Rust, Python)" python3 scripts/run_tests.py
        ;;
    *)
        echo "usage: stages.sh demo|test" >&2
        exit 2
        ;;
esac
table
