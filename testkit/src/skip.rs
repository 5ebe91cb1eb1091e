//! Tests that cannot run here: never a silent pass.
//!
//! A test that compares against a reference (a Python tool in the project venv, a native
//! library such as ONNX Runtime or OpenVINO, a model file, a system tool the set-up
//! installs) calls [`missing_reference`] when the reference is absent, then returns:
//! - under `make test` (scripts/run_tests.py sets [`REQUIRE_REFERENCES_VAR`]`=1` for every
//!   job it runs, and scripts/setup.sh installs every reference), it panics, naming the
//!   reference and how to get it: the test fails;
//! - elsewhere (a bare `cargo test` without the set-up's environment), it prints
//!   `SKIPPED: <test>: <reason>` on stderr and returns: a counted skip, not a pass
//!   (scripts/run_tests.py counts these lines, and takes them from the passed count).
//!
//! [`skipped`] is the same line for a condition that is not a missing reference (a
//! capability this machine lacks, such as network namespaces, or a check another tier owns,
//! such as NCCL on a GPU machine, which `make test-gpu` runs): a counted skip everywhere.
//!
//! The line goes straight to the process's stderr, past libtest's output capture, so it
//! appears for a passing test too. Self-contained (std only): crates that cannot depend on
//! this one (model-spec, which it depends on; train; export's unit tests) include the file
//! with `#[path]`, so there is one implementation.

use std::fmt::Display;
use std::io::Write;

/// Set to `1` by scripts/run_tests.py (`make test`) for every job: a missing reference is
/// a failure, not a skip.
pub const REQUIRE_REFERENCES_VAR: &str = "SEGTOOL_REQUIRE_REFERENCES";

/// The start of the line a skip prints: `SKIPPED: <test>: <reason>`.
pub const SKIPPED_PREFIX: &str = "SKIPPED: ";

/// Whether missing references fail ([`REQUIRE_REFERENCES_VAR`] is `1`).
pub fn references_required() -> bool {
    std::env::var(REQUIRE_REFERENCES_VAR).as_deref() == Ok("1")
}

/// The running test's name: libtest names each test's thread after it.
fn test_name() -> String {
    std::thread::current()
        .name()
        .filter(|n| *n != "main")
        .unwrap_or("(unnamed test thread)")
        .to_string()
}

/// Reports that `what` (the reference: "the project venv's python (SEGTOOL_PYTHON)", "the
/// ONNX Runtime library (tried [...])") is missing; `how` says how to get it ("source
/// scripts/setup.sh"). Under `make test` it panics; elsewhere it prints the SKIPPED line
/// and returns, and the caller returns at once (`return missing_reference(..)`).
///
/// # Panics
/// When [`references_required`]: a reference `make test` needs is missing.
#[track_caller]
pub fn missing_reference(what: impl Display, how: impl Display) {
    if references_required() {
        panic!(
            "missing reference: {what}\n  to get it: {how}\n  ({REQUIRE_REFERENCES_VAR}=1, \
             as `make test` sets it: every reference must be present; without the variable \
             this test is a counted skip)"
        );
    }
    skipped(format_args!("missing reference: {what} ({how})"));
}

/// Prints `SKIPPED: <test>: <reason>` on stderr (past libtest's capture): a counted skip,
/// whatever [`REQUIRE_REFERENCES_VAR`] says. For conditions that are not a missing
/// reference; the caller returns at once.
pub fn skipped(reason: impl Display) {
    let reason = reason.to_string().replace('\n', " ");
    let line = format!("{SKIPPED_PREFIX}{}: {reason}\n", test_name());
    // One write of the whole line, so parallel tests do not interleave within it.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}
