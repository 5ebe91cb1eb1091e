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

test:
	@$(ENV); cargo test --workspace --no-fail-fast
