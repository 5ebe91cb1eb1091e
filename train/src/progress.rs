//! Progress of the training and evaluation loops, reported to whoever drives them
//! ([`crate::run::run`], [`crate::Trainer::train_with`], [`crate::eval::evaluate_with`]):
//! the library draws and prints nothing itself. The trait is `segtool_model_spec`'s, shared
//! with calibration; in a training run, [`Progress::line`] comes every `log.every`
//! iterations (every 10% in `train_with`).

pub use segtool_model_spec::progress::{Progress, Reporter, Silent};
