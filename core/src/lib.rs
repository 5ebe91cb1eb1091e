//! Pieces every segtool crate agrees on, with no native dependencies: the model spec
//! carried in checkpoints and ONNX metadata, palettes, the confusion matrix behind mIoU,
//! the synthetic `shapes` dataset, and small image helpers.

pub mod config;
pub mod dataset;
pub mod images;
pub mod io;
pub mod metrics;
pub mod palette;
#[cfg(feature = "plot")]
pub mod plot;
pub mod process;
pub mod protocol;
pub mod shapes;
pub mod spec;
pub mod visual;

pub use metrics::ConfusionMatrix;
pub use spec::{BackboneSpec, BlockKind, ModelSpec, SPEC_METADATA_KEY};

/// Label value that losses and metrics skip.
pub const IGNORE_LABEL: u8 = 255;
