# Both targets run the idempotent set-up first (a second run takes well under a second),
# then build with the variables it recorded (libtorch from the pinned torch wheel,
# libonnxruntime from the pinned onnxruntime wheel).
SHELL := /bin/bash
ENV = set -euo pipefail; source "$$(bash scripts/setup.sh)"

.PHONY: demo test setup
setup:
	@$(ENV); echo "environment ready: $$SEGTOOL_VENV"

# demo and test share one build: the dev profile (dependencies at opt-level 3), so `make
# test` after `make demo` compiles only the test harnesses. scripts/stages.sh times each
# stage and prints the table at the end; scripts/run_tests.py runs the test binaries with
# progress (what `cargo test --workspace --no-fail-fast` runs, doctests included).
demo:
	@bash scripts/stages.sh demo

# The set-up also installs Debian's chromium for the report page's headless-browser test
# (tests/report.rs).
test:
	@bash scripts/stages.sh test

# The Python package (python/, README: Python): target/wheels/segtool-*.whl, built by
# maturin in the dev profile from the artefacts the workspace build made.
.PHONY: wheel
wheel:
	@$(ENV); bash scripts/python_tests.sh wheel

# The GPU tier (README, GPU section): every check runs on the GPUs present or is reported
# SKIPPED with its reason. Run by nothing in CI. It sets up and uses the GPU venv itself
# (SEGTOOL_GPU=1: onnxruntime-gpu + TensorRT, builds into target/gpu);
# SEGTOOL_GPU_REQUIRE=1 makes a skip fail the run.
.PHONY: test-gpu
test-gpu:
	@set -euo pipefail; source "$$(SEGTOOL_GPU=1 bash scripts/setup.sh)"; SEGTOOL_GPU_TESTS=1 cargo test --test gpu -- $(ARGS)
