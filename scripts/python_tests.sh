#!/usr/bin/env bash
# The Python package: `make wheel` (build) and the Python stage of `make test` (test).
#   build: maturin (python/requirements-build.txt, in a small venv of its own under
#          $SEGTOOL_HOME, stamped) builds python/ in the dev profile into the workspace's
#          target dir -> target/wheels/segtool-*.whl. The crates it compiles besides
#          segtool-python are listed: none when the workspace build came first (see the
#          feature-unification lines of python/Cargo.toml).
#   test:  build, then a fresh venv (target/python-venv, re-created every run by uv; its
#          cache in $SEGTOOL_HOME/uv-cache) gets the wheel and python/requirements-test.txt;
#          mypy checks the tests against the package's stubs, pytest runs them.
#          Ray Data (python/requirements-ray.txt) and its test too; SEGTOOL_RAY=0 skips them.
# Needs the environment of scripts/setup.sh (sourced by the Makefile / stages.sh).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
what="${1:-test}"
home="${SEGTOOL_HOME:-$HOME/.cache/segtool}"
target="${CARGO_TARGET_DIR:-$root/target}"
export PIP_CACHE_DIR="$home/pip-cache"
export PIP_DISABLE_PIP_VERSION_CHECK=1
log() { echo "[python] $*" >&2; }

tools="$home/maturin-$(sha256sum python/requirements-build.txt | cut -c1-12)"
if [ ! -f "$tools/.complete" ]; then
    log "maturin into $tools (pip; about 10 s)"
    rm -rf "$tools"
    python3 -m venv "$tools"
    "$tools/bin/pip" install -q -r python/requirements-build.txt >&2
    touch "$tools/.complete"
fi

build() {
    rm -f "$target"/wheels/segtool-*.whl
    local t0 log_file
    t0=$(date +%s)
    log_file="$(mktemp)"
    # The dev profile: the artefacts `cargo test --workspace` made (tract, ort, ...).
    if ! "$tools/bin/maturin" build --profile dev -m python/Cargo.toml -i python3 \
        --out "$target/wheels" >"$log_file" 2>&1; then
        cat "$log_file" >&2
        rm -f "$log_file"
        exit 1
    fi
    local compiled
    compiled="$(grep -oE 'Compiling [^ ]+ v[^ ]+' "$log_file" | grep -v 'segtool-python' | sed 's/Compiling //' | tr '\n' ' ' || true)"
    log "wheel $(basename "$target"/wheels/segtool-*.whl) in $(($(date +%s) - t0)) s; also compiled: ${compiled:-nothing}"
    rm -f "$log_file"
}

case "$what" in
    wheel)
        build
        ;;
    test)
        build
        venv="$target/python-venv"
        t0=$(date +%s)
        # uv (python/requirements-build.txt): the same install as pip's, from a cache of
        # unpacked wheels ($SEGTOOL_HOME/uv-cache) that it links instead of unpacking again.
        export UV_CACHE_DIR="$home/uv-cache"
        uv=("$tools/bin/uv" pip install -q --python "$venv/bin/python")
        export UV_PYTHON_DOWNLOADS=never
        "$tools/bin/uv" venv -q --clear --python "$(command -v python3)" "$venv"
        "${uv[@]}" "$target"/wheels/segtool-*.whl -r python/requirements-test.txt >&2
        "${uv[@]}" --no-deps -r python/requirements-clip.txt >&2
        # Ray Data too, for tests/test_ray.py (a local cluster, 2 actors; about a minute);
        # SEGTOOL_RAY=0 leaves it out (the test is then skipped).
        if [ "${SEGTOOL_RAY:-1}" = 1 ]; then
            "${uv[@]}" -r python/requirements-ray.txt >&2
        fi
        log "fresh venv $venv in $(($(date +%s) - t0)) s"
        (cd python && "$venv/bin/python" -m mypy --no-error-summary tests) >&2
        log "mypy (strict): tests type-check against the package"
        export SEGTOOL_BIN="${SEGTOOL_BIN:-$target/debug/segtool}"
        # Every library the package could find ONNX Runtime through comes from the venv.
        unset ORT_DYLIB_PATH SEGTOOL_ORT_LIB
        cd python && exec "$venv/bin/python" -m pytest -q -p no:cacheprovider tests
        ;;
    *)
        echo "usage: python_tests.sh wheel|test" >&2
        exit 2
        ;;
esac
