//! The package's integration tests as one binary (one link instead of one per file):
//! each module below was a test file of its own. `make test` (scripts/run_tests.py)
//! runs each module in a process of its own, as cargo ran the files; one module:
//! `cargo test --test it -- MODULE::`.

mod common;
mod calibrate;
mod calibrate_auto_cli;
mod calibrate_trained;
mod cli;
mod compare;
mod doctor;
mod eval;
mod export_profiles;
mod failing_writes;
mod foreign_folders;
mod foreign_models;
mod fuzz_regression;
mod gpu_verdicts;
mod hostile_inputs;
mod import_official;
mod infer;
mod infer_modes;
mod mmseg_eval;
mod mmseg_import;
mod parity;
mod print_config_mmseg;
mod protocol_danet;
mod qat_cli;
mod report;
mod runtime_accuracy;
