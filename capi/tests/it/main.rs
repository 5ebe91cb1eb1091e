//! The package's integration tests as one binary (one link instead of one per file):
//! each module below was a test file of its own. `make test` (scripts/run_tests.py)
//! runs each module in a process of its own, as cargo ran the files; one module:
//! `cargo test --test it -- MODULE::`.

mod common;
mod c_api;
mod c_live;
mod ffi;
mod fuzz_regression;
mod header;
mod live_sources;
