//! One module per subcommand: each parses its arguments and calls the crates. Argument
//! types and helpers several of them share live in `crate::args`.

pub mod bench;
#[cfg(feature = "ort")]
pub mod calibrate;
pub mod card;
#[cfg(feature = "ort")]
pub mod compare;
#[cfg(feature = "train")]
pub mod demo;
pub mod doctor;
#[cfg(feature = "train")]
pub mod eval;
pub mod export;
pub mod generate;
#[cfg(feature = "train")]
pub mod import;
pub mod infer;
#[cfg(feature = "train")]
pub mod model_info;
#[cfg(feature = "train")]
pub mod report;
pub mod ros2;
#[cfg(feature = "train")]
pub mod train;
