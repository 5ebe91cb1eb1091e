//! Pieces the training side agrees on, with no native dependencies: the run
//! configuration, datasets, the confusion matrix behind mIoU, the synthetic `shapes`
//! dataset, plots and visual helpers. The model spec, palettes and image helpers are
//! `segtool-spec`'s.

pub mod config;
pub mod dataset;
pub mod metrics;
#[cfg(feature = "plot")]
pub mod plot;

pub mod shapes;
pub mod visual;

// The runtime-side half lives in segtool-spec (no training dependencies); re-exported
// so every `segtool_spec::spec::..` path keeps working.
pub use segtool_spec::{images, io, palette, process, progress, protocol, raw_frames, size, spec};

pub use metrics::ConfusionMatrix;
pub use spec::{BackboneSpec, BlockKind, ModelSpec, SPEC_METADATA_KEY};

/// Label value that losses and metrics skip.
pub const IGNORE_LABEL: u8 = 255;
