#!/bin/sh
# rustdoc with its (unstable) JSON output on the stable toolchain, for
# scripts/public_api.py: RUSTC_BOOTSTRAP is set for this rustdoc process only. Set in
# cargo's own environment it would enter every unit's fingerprint (not its file name), so
# the next plain build would rebuild the whole dependency tree over the same files.
RUSTC_BOOTSTRAP=1 exec rustdoc "$@"
