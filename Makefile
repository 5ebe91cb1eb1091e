# Both targets run the idempotent set-up first (a second run takes well under a second),
# then build with the variables it recorded (libtorch from the pinned torch wheel,
# libonnxruntime from the pinned onnxruntime wheel).
SHELL := /bin/bash
ENV = set -euo pipefail; source "$$(bash scripts/setup.sh)"

.PHONY: demo test setup
setup:
	@$(ENV); echo "environment ready: $$SEGTOOL_VENV"

demo:
	@$(ENV); cargo build --release --bin segtool && target/release/segtool demo --out out/demo

# SEGTOOL_BROWSER=1: the set-up also installs Debian's chromium for the report page's
# headless-browser test (tests/report.rs).
test:
	@set -euo pipefail; source "$$(SEGTOOL_BROWSER=1 bash scripts/setup.sh)"; cargo test --workspace --no-fail-fast

# The GPU tier (README, GPU section): every check runs on the GPUs present or is reported
# SKIPPED with its reason. Run by nothing in CI. SEGTOOL_GPU=1 sets up the GPU venv
# (onnxruntime-gpu + TensorRT) and builds into target/gpu; SEGTOOL_GPU_REQUIRE=1 makes a
# skip fail the run.
.PHONY: test-gpu
test-gpu:
	@$(ENV); SEGTOOL_GPU_TESTS=1 cargo test --test gpu
