//! Pieces the training side agrees on, with no native dependencies: the run
//! configuration, datasets, the confusion matrix behind mIoU, the synthetic `shapes`
//! dataset, plots and visual helpers. The model spec, palettes and image helpers are
//! `segtool-model-spec`'s.

pub mod config;
pub mod dataset;
pub mod metrics;
#[cfg(feature = "plot")]
pub mod plot;

pub mod shapes;
pub mod visual;

pub use metrics::ConfusionMatrix;

/// Label value that losses and metrics skip.
pub const IGNORE_LABEL: u8 = 255;
