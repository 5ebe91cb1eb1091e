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
# progress (what `cargo test --workspace --no-fail-fast` runs, doctests included), and the
# Python package's tests beside them, one job per core.
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

# The GPU tier (book/src/gpu.md): every check runs on the GPUs present or is reported
# SKIPPED with its reason. Run by nothing in CI. It sets up and uses the GPU venv itself
# (SEGTOOL_GPU=1: onnxruntime-gpu + TensorRT, builds into target/gpu);
# SEGTOOL_GPU_REQUIRE=1 makes a skip fail the run.
.PHONY: test-gpu
test-gpu:
	@set -euo pipefail; source "$$(SEGTOOL_GPU=1 bash scripts/setup.sh)"; SEGTOOL_GPU_TESTS=1 cargo test --test gpu -- $(ARGS)

# Coverage-guided fuzzing (fuzz/README.md; not part of `make test`, which replays the
# regression corpus fuzz/corpus + fuzz/regressions on stable): builds the cargo-fuzz
# targets (libFuzzer + AddressSanitizer, RUSTC_BOOTSTRAP=1 on stable rustc) and runs each
# for FUZZ_S seconds (default 600), FUZZ_TARGETS=a,b to choose; prints executions,
# coverage, new corpus entries and crashes per target (also in $SEGTOOL_HOME/fuzz-last.txt).
.PHONY: fuzz
fuzz:
	@$(ENV); bash scripts/fuzz.sh

# The soak (book/src/reliability.md; a benchmark, not part of `make test`): each live path
# (the --live pipe, the GStreamer element, Python's LiveStream, the ROS 2 node) at twice
# the engine's rate, one after another, SOAK_S seconds each (default 1800), SOAK_PATHS
# (default cli,gst,python,ros2); samples, figures and checks in out/soak/. It builds what
# it runs first (the demo's build; the wheel when the Python path is in).
.PHONY: soak
soak:
	@$(ENV); cargo build --workspace --exclude segtool-python; \
	paths="$${SOAK_PATHS-cli,gst,python,ros2}"; \
	if [[ ",$${paths// /}," == *,python,* ]]; then bash scripts/python_tests.sh wheel; fi; \
	"$$SEGTOOL_PYTHON" bench/soak.py
