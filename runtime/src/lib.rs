//! Run exported segtool DANet models.
//!
//! ```no_run
//! # #[cfg(not(feature = "ort"))] fn main() {}
//! # #[cfg(feature = "ort")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use segtool_runtime::{EngineKind, Provider, Segmenter};
//! let mut seg = Segmenter::builder("model.onnx")
//!     .engine(EngineKind::Auto) // the engine timed fastest here (cached)
//!     .providers([Provider::Cuda { device_id: 0 }])
//!     .threads(4)
//!     .open()?;
//! # fn log(_: &str) {}
//! for fallback in seg.fallbacks() {
//!     log(&format!("note: {fallback}")); // e.g. "cuda:0 requested, running on cpu: ..."
//! }
//! let img = image::open("street.png")?.to_rgb8();
//! let out = seg.segment(&img)?;
//! segtool_runtime::colorize(&out.mask, &seg.spec().palette).save("mask.png")?;
//! # Ok(()) }
//! ```
//!
//! Model contract (what `segtool export` writes; the file format is owned by
//! `segtool-onnx`): input `image` f32 `[N, 3, H, W]` normalised with the spec's mean/std,
//! output `logits` f32 `[N, classes, H, W]` at input resolution, spec JSON in
//! `metadata_props["segtool.spec"]`. Exports made with `--preprocess` (uint8 NHWC RGB
//! input, normalisation in the graph) and/or `--argmax` (class map output) work too:
//! [`Segmenter`] learns the contract from the metadata and the graph (see
//! [`IoContract`]) and feeds raw pixels / takes the class map as is; so do the
//! [`BatchServer`] and its streams built with [`BatchServer::from_segmenters`].
//!
//! The library never prints: what happened while opening (the provider in use, each
//! [`Fallback`] and why) is returned for the caller to log.
//!
//! Features: `ort` (ONNX Runtime, loaded at run time; no link-time native dependency) and
//! `tract` (pure Rust). With `--no-default-features --features tract` nothing native is
//! needed at all.

#![deny(missing_docs)]
// Without any backend only the pre/post-processing is usable; opening always fails,
// which leaves helpers unused.
#![cfg_attr(
    not(any(feature = "ort", feature = "tract")),
    allow(dead_code, unused_variables, unreachable_code)
)]

// The rooms, bottom up: each imports only from rooms listed before it (and memory).
mod segmentation;
mod frame;
mod error;
mod normalise;
mod engines;
pub mod card;
pub mod pipeline;
mod segmenter;
mod server;
mod streams;
// The public faces: the batch server and its streams as one namespace, the expert's
// engine plumbing, and helpers.
pub mod batching;
pub mod expert;
mod memory;

pub use engines::openvino_options as openvino;

pub use segmentation::class_map::{ClassMap, ClassMapView};
pub use error::{Result, RuntimeError};
pub use frame::{Frame, FrameError, PixelFormat};
pub use engines::io_contract::{InputLayout, IoContract, OutputKind};
pub use segmentation::Segmentation;
#[cfg(feature = "ort")]
pub use engines::ort::{CudaOptions, OrtOptions, Provider, TensorRtOptions, TrtProfile};
pub use segmentation::postprocess::{colorize, overlay, DEFAULT_ALPHA};
pub use segmenter::{EngineKind, Fallback, Segmenter, SegmenterBuilder, SegmenterOptions};
pub use segtool_model_spec::{io, progress};
pub use segtool_onnx::{ModelFile, ModelFileError};
pub use segmentation::temporal::{FlickerMeter, TemporalSmoother};
pub use engines::tract_options::TractOptions;

/// The user guide's Rust page (`book/src/embedding/rust.md`), compiled with the doctests
/// so that its example keeps up with the API.
#[cfg(doctest)]
#[doc = include_str!("../../book/src/embedding/rust.md")]
pub struct BookEmbeddingRust;
