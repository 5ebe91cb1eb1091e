//! INT8 post-training quantisation of segtool models.
//!
//! [`calibrate`] exposes the tensors to quantise (activation inputs of every Conv and
//! MatMul, and Conv outputs or the Relus after them, see [`qdq::plan`]) as extra outputs of a copy of the model, runs calibration
//! images through it in ONNX Runtime (CPU) in batches, preprocessed exactly as the runtime
//! does ([`segtool_runtime::expert::normalise`]), and streams per-tensor statistics: the range
//! first, then a 2048-bin histogram of `|x|` over `[0, absmax]` ([`stats`]). A calibrator
//! ([`Method`]) turns them into thresholds, [`qdq::rewrite`] into a QDQ model
//! (symmetric int8, zero point 0; weights per output channel or per tensor) and
//! [`trt_cache`] into a TensorRT calibration cache. [`report`] compares the result with
//! the float model.

pub mod auto;
pub mod calibrators;
pub mod compare;
pub mod feed;
pub mod kernels;
pub mod plot;
pub mod qat;
pub mod qdq;
pub mod report;
pub mod session;
pub mod similarity;
pub mod stats;
pub mod trt_cache;

mod error;
mod files;
mod options;
mod run;

pub use error::CalibrationError;
pub use feed::Feed;
pub use files::{list_images, load_model, model_spec, read_image, read_label, write_atomic};
pub use options::{Calibrated, CalibrationOptions, Method};
pub use run::{calibrate, collect_stats, for_each_batch, rewrite_with};

/// metadata_props key recording how a model was calibrated.
pub use segtool_onnx::metadata::CALIBRATION_METADATA_KEY;
