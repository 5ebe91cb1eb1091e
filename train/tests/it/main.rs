//! The package's integration tests as one binary (one link instead of one per file):
//! each module below was a test file of its own. `make test` (scripts/run_tests.py)
//! runs each module in a process of its own, as cargo ran the files; one module:
//! `cargo test --test it -- MODULE::`.

mod common;
mod amp;
mod attention_impls;
mod checkpoint;
mod cost;
mod ddp;
mod ddp_netns;
mod frozen_bn;
mod import_pytorch;
mod loader;
mod mmseg_augment;
mod mmseg_train_parity;
mod pytorch_train_parity;
mod qat;
mod qat_run;
mod reference_parity;
mod resume;
mod session;
mod sgd_parity;
mod tensorboard;
mod training;
