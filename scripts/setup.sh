#!/usr/bin/env bash
# Installs what segtool's build and tests need, idempotently:
#   - Debian: libgloo-dev (c10d gloo headers for the distributed shim), valgrind (the C
#     ABI's leak test), iproute2 (the two-host DDP test's network namespaces)
#   - a Python venv with the pins in requirements.txt, cached outside the clone in
#     $SEGTOOL_HOME/venv-<hash of the pins> so fresh clones reuse it
# and writes $SEGTOOL_HOME/env-<hash>.sh, which `source`s into the variables the build uses
# (LIBTORCH_USE_PYTORCH, PYTHON_SYS_EXECUTABLE, ORT_DYLIB_PATH). Prints that file's path.
# A second run, with everything present, takes a second or two.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
home="${SEGTOOL_HOME:-$HOME/.cache/segtool}"
pins_hash="$(sha256sum "$root/requirements.txt" | cut -c1-12)"
venv="$home/venv-$pins_hash"
env_file="$home/env-$pins_hash.sh"
log() { echo "[setup] $*" >&2; }

mkdir -p "$home"

# --- Debian packages -------------------------------------------------------------------
missing=()
for pkg in libgloo-dev valgrind iproute2; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]} (apt)"
    sudo_cmd=""
    if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
    $sudo_cmd apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >&2
fi

# --- Python venv -----------------------------------------------------------------------
stamp="$venv/.segtool-complete"
if [ ! -f "$stamp" ]; then
    log "creating venv $venv (torch wheel is large: a few minutes the first time)"
    rm -rf "$venv.tmp"
    python3 -m venv "$venv.tmp"
    "$venv.tmp/bin/python" -m pip install -q --upgrade pip >&2
    "$venv.tmp/bin/python" -m pip install -q -r "$root/requirements.txt" >&2
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
fi

py="$venv/bin/python"
if [ ! -f "$env_file" ] || [ "$env_file" -ot "$stamp" ] || [ "$env_file" -ot "$0" ]; then
    torch_lib="$("$py" -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')"
    ort_dylib="$("$py" -c 'import glob, os, onnxruntime as o; print(sorted(glob.glob(os.path.join(os.path.dirname(o.__file__), "capi", "libonnxruntime.so*")))[-1])')"
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
EOT
    mv "$tmp" "$env_file"
fi
echo "$env_file"
