//! Run exported segtool DANet models.
//!
//! ```no_run
//! # #[cfg(not(feature = "ort"))] fn main() {}
//! # #[cfg(feature = "ort")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use segtool_runtime::{EngineKind, Provider, Segmenter};
//! let mut seg = Segmenter::builder("model.onnx")
//!     .engine(EngineKind::Auto) // ONNX Runtime, or tract when its library is missing
//!     .providers([Provider::Cuda { device_id: 0 }])
//!     .threads(4)
//!     .open()?;
//! # fn log(_: &str) {}
//! for fallback in seg.fallbacks() {
//!     log(&format!("note: {fallback}")); // e.g. "cuda:0 requested, running on cpu: ..."
//! }
//! let img = image::open("street.png")?.to_rgb8();
//! let out = seg.segment(&img)?;
//! segtool_runtime::colorize(out.mask.view(), &seg.spec().palette).save("mask.png")?;
//! # Ok(()) }
//! ```
//!
//! Model contract (what `segtool export` writes; the file format is owned by
//! `segtool-onnx`): input `image` f32 `[N, 3, H, W]` normalised with the spec's mean/std,
//! output `logits` f32 `[N, classes, H, W]` at input resolution, spec JSON in
//! `metadata_props["segtool.spec"]`. Exports made with `--preprocess` (uint8 NHWC RGB
//! input, normalisation in the graph) and/or `--argmax` (class map output) work too:
//! [`Segmenter`] learns the contract from the metadata and the graph (see
//! [`io_contract`]) and feeds raw pixels / takes the class map as is; so do the
//! [`BatchServer`] and its streams built with [`BatchServer::from_segmenters`].
//!
//! The library never prints: what happened while opening (the provider in use, each
//! [`Fallback`] and why) is returned for the caller to log.
//!
//! Features: `ort` (ONNX Runtime, loaded at run time; no link-time native dependency) and
//! `tract` (pure Rust). With `--no-default-features --features tract` nothing native is
//! needed at all.

#![warn(missing_docs)]
// Without any backend only the pre/post-processing is usable; opening always fails,
// which leaves helpers unused.
#![cfg_attr(
    not(any(feature = "ort", feature = "tract")),
    allow(dead_code, unused_variables, unreachable_code)
)]

pub mod accuracy;
pub mod batching;
pub mod card;
mod contract_adapter;
mod engine;
pub mod env_report;
pub mod error;
pub mod frame;
mod io_contract;
pub mod memory;
#[cfg(feature = "ort")]
pub mod ort_engine;
mod ort_report;
mod postprocess;
mod preprocess;
mod segmenter;
mod temporal;
pub mod testing;
#[cfg(feature = "tract")]
mod tract_engine;
mod tract_options;
pub mod triton;

use std::path::Path;

pub use accuracy::{AccuracyOptions, Tiling};
pub use batching::{BatchConfig, BatchError, BatchServer, LatestStream, OrderedStream};
pub use engine::Engine;
pub use env_report::env_report;
pub use error::{Result, RuntimeError};
pub use frame::{Frame, FrameError, PixelFormat};
pub use io_contract::{
    EngineInput, EngineOutput, InputLayout, IoContract, OutputKind, Segmentation,
};
#[cfg(feature = "ort")]
pub use ort_engine::{CudaOptions, TensorRtOptions, TrtProfile};
#[cfg(feature = "ort")]
pub use ort_engine::{OrtEngine, OrtOptions, Provider};
pub use postprocess::{colorize, overlay, DEFAULT_ALPHA};
pub use segmenter::{EngineKind, Fallback, Segmenter, SegmenterBuilder, SegmenterOptions};
/// The exported file's reader and its errors.
pub use segtool_onnx::{ModelFile, ModelFileError};
/// segtool's progress reporting and atomic file writing, for crates built over the runtime
/// alone (segtool-ros2's bag converter).
pub use segtool_spec::{io, progress};
pub use temporal::{FlickerMeter, TemporalSmoother};
#[cfg(feature = "tract")]
pub use tract_engine::TractEngine;
pub use tract_options::TractOptions;

/// For those who drive the pieces themselves (benchmarks, front ends' internals): the
/// contract adapter, the preprocessing and score-resizing steps. The root is the API
/// most users need; what is here may change between releases.
pub mod expert {
    pub use crate::contract_adapter::ContractAdapter;
    pub use crate::engine::{load_spec, read_metadata, run_logits};
    pub use crate::io_contract::EngineTensor;
    pub use crate::postprocess::{argmax, resize_bilinear, resize_nearest, softmax, Upsample};
    pub use crate::preprocess::{normalise, normalise_batch, prepare, PrepareOptions, Prepared};
}

/// Shorthand for the common builder configurations, for [`Segmenter::open`].
#[derive(Clone, Debug)]
pub enum Backend {
    /// ONNX Runtime with these options.
    #[cfg(feature = "ort")]
    Ort(OrtOptions),
    /// tract with its defaults.
    Tract,
    /// ONNX Runtime with these options; if its library cannot be loaded at all, tract
    /// (reported by [`Segmenter::fallbacks`]). Every other ONNX Runtime error stays an
    /// error.
    #[cfg(feature = "ort")]
    Auto(OrtOptions),
}

impl Segmenter {
    /// [`Segmenter::builder`] with the engine and options of `backend`.
    pub fn open(path: impl AsRef<Path>, backend: Backend) -> Result<Self> {
        let builder = Segmenter::builder(path);
        match backend {
            #[cfg(feature = "ort")]
            Backend::Ort(options) => builder.engine(EngineKind::Ort).ort_options(options),
            Backend::Tract => builder.engine(EngineKind::Tract),
            #[cfg(feature = "ort")]
            Backend::Auto(options) => builder.engine(EngineKind::Auto).ort_options(options),
        }
        .open()
    }
}

/// The user guide's Rust page (`book/src/embedding/rust.md`), compiled with the doctests
/// so that its example keeps up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/embedding/rust.md")]
pub struct BookEmbeddingRust;
