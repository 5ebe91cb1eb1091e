#!/usr/bin/env bash
# Benchmark (not a test): the segtoolseg GStreamer element against the CLI's raw pipe on
# the same clip, same model, engine and threads, side by side; then the element's live
# mode at 2x overload (a live source at twice the element's measured rate): p50/p99
# latency and the share of frames dropped.
#
#   source "$(bash scripts/setup.sh)"; cargo build -p segtool-gst --bin segtool   # or --release
#   bash bench/gst_pipeline.sh [--engine ort|tract] [--threads N] [--frames N] [--repeats N]
#                              [--backbone tiny|resnet18|...] [--model PATH] [--profile debug|release]
#
# Both sides decode the clip with the same GStreamer chain (filesrc ! decodebin !
# videoconvert ! RGB) and write class maps: the element to a fakesink, the CLI
# (`segtool infer --raw WxH --out -`) to /dev/null through a pipe from gst-launch's fdsink.
# A `queue` before the element puts decoding and conversion in a thread of their own, as
# the pipe does for the CLI (gst-launch decodes in its own process).
# Each side runs --repeats times; the median wall time is reported as frames/s.
# The model: --model, else a random-weight DANet (bench/bench_models.py) imported and
# exported with the segtool binary (cached in $WORK).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
engine=ort threads=2 frames=100 repeats=3 backbone=tiny model="" profile=debug
while [ $# -gt 0 ]; do
    case "$1" in
        --engine) engine="$2"; shift 2 ;;
        --threads) threads="$2"; shift 2 ;;
        --frames) frames="$2"; shift 2 ;;
        --repeats) repeats="$2"; shift 2 ;;
        --backbone) backbone="$2"; shift 2 ;;
        --model) model="$2"; shift 2 ;;
        --profile) profile="$2"; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
target="${CARGO_TARGET_DIR:-$root/target}/$profile"
segtool="$target/segtool"
[ -x "$segtool" ] || { echo "build $segtool first (cargo build --bin segtool)" >&2; exit 1; }
[ -f "$target/libgstsegtool.so" ] || { echo "build the plugin first (cargo build -p segtool-gst)" >&2; exit 1; }
clip="${SEGTOOL_HOME:-$HOME/.cache/segtool}/clips/bikes.mp4"
[ -f "$clip" ] || { echo "$clip missing: run scripts/setup.sh" >&2; exit 1; }
work="${WORK:-/tmp/segtool-gst-bench}"
mkdir -p "$work/plugin"
cp "$target/libgstsegtool.so" "$work/plugin/.tmp.so" && mv "$work/plugin/.tmp.so" "$work/plugin/libgstsegtool.so"
export GST_PLUGIN_PATH="$work/plugin" GST_REGISTRY="$work/registry.bin"

if [ -z "$model" ]; then
    model="$work/danet_${backbone}_ort.onnx"
    if [ ! -f "$model" ]; then
        (cd "$root/bench" && python3 -c "
import infer_vs_python_ort as b
b.build_model('$work', '$segtool', '$backbone', 19)")
    fi
fi
w=640 h=272
decode="filesrc location=$clip ! decodebin ! videoconvert ! video/x-raw,format=RGB ! identity eos-after=$frames"

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
now() { date +%s.%N; }

element_times=() cli_times=()
for r in $(seq "$repeats"); do
    t0=$(now)
    gst-launch-1.0 -q $decode ! queue ! segtoolseg model="$model" engine="$engine" threads="$threads" \
        output=mask ! fakesink sync=false
    t1=$(now)
    gst-launch-1.0 -q $decode ! fdsink fd=1 \
        | "$segtool" infer --model "$model" --raw "${w}x${h}" --out - --engine "$engine" \
            --threads "$threads" --quiet >/dev/null 2>"$work/cli.err" || { cat "$work/cli.err" >&2; exit 1; }
    t2=$(now)
    element_times+=("$(echo "$t1 - $t0" | bc -l)")
    cli_times+=("$(echo "$t2 - $t1" | bc -l)")
    echo "repeat $r: element ${element_times[-1]} s, CLI raw pipe ${cli_times[-1]} s" >&2
done
e=$(printf '%s\n' "${element_times[@]}" | median)
c=$(printf '%s\n' "${cli_times[@]}" | median)
efps=$(echo "$frames / $e" | bc -l)
cfps=$(echo "$frames / $c" | bc -l)

# Live mode at 2x the element's measured rate.
live_fps=$(printf '%.0f' "$(echo "2 * $efps" | bc -l)")
[ "$live_fps" -ge 1 ] || live_fps=1
live_n=$(( live_fps * 10 < 50 ? 50 : live_fps * 10 ))
stats=$(gst-launch-1.0 -m videotestsrc is-live=true num-buffers="$live_n" pattern=ball \
    ! "video/x-raw,format=RGB,width=$w,height=$h,framerate=$live_fps/1" \
    ! segtoolseg model="$model" engine="$engine" threads="$threads" output=mask live=true \
    ! fakesink sync=false 2>&1 | grep -o 'segtool/stats.*' | tail -1)
field() { echo "$stats" | grep -o "$1=([a-z0-9]*)[^,;]*" | sed 's/.*)//'; }

cpu=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
printf '\nCPU: %s (%s cores online), engine %s, %s threads, %s frames of %sx%s, model %s\n' \
    "$cpu" "$(nproc)" "$engine" "$threads" "$frames" "$w" "$h" "$(basename "$model")"
printf '%-34s %10s %10s\n' "" "median s" "frames/s"
printf '%-34s %10.2f %10.1f\n' "segtoolseg (gst-launch)" "$e" "$efps"
printf '%-34s %10.2f %10.1f\n' "segtool infer --raw (pipe)" "$c" "$cfps"
printf 'ratio element / CLI: %.3f\n' "$(echo "$efps / $cfps" | bc -l)"
printf 'live at %s fps (2x): frames-in %s, answered %s, dropped %s, latency p50 %s ms, p99 %s ms\n' \
    "$live_fps" "$(field frames-in)" "$(field answered)" "$(field dropped)" \
    "$(field latency-p50-ms)" "$(field latency-p99-ms)"
