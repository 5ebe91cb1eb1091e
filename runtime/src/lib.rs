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
//! for fallback in seg.fallbacks() {
//!     eprintln!("note: {fallback}"); // e.g. "cuda:0 requested, running on cpu: ..."
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
pub mod engine;
pub mod env_report;
pub mod error;
pub mod io_contract;
#[cfg(feature = "ort")]
pub mod ort_engine;
pub mod postprocess;
pub mod preprocess;
mod segmenter;
pub mod temporal;
pub mod testing;
#[cfg(feature = "tract")]
pub mod tract_engine;
mod tract_options;
pub mod triton;

use std::path::Path;

pub use accuracy::{AccuracyMode, AccuracyOptions};
pub use batching::{BatchConfig, BatchError, BatchServer, LatestStream, OrderedStream};
pub use engine::{load_spec, read_metadata, run_logits, Engine};
pub use env_report::{env_report, RuntimeEnvReport};
pub use error::{Result, RuntimeError};
pub use io_contract::{
    ContractAdapter, EngineInput, EngineOutput, EngineTensor, InputLayout, IoContract, OutputKind,
};
#[cfg(feature = "ort")]
pub use ort_engine::{CudaOptions, TensorRtOptions, TrtProfile};
#[cfg(feature = "ort")]
pub use ort_engine::{OrtEngine, OrtOptions, Provider};
pub use postprocess::{argmax, colorize, overlay, resize_nearest, DEFAULT_ALPHA};
pub use postprocess::{resize_bilinear, softmax, Upsample};
pub use preprocess::{normalise, normalise_batch};
pub use preprocess::{prepare, PrepareOptions, Prepared};
pub use segmenter::{EngineKind, Fallback, Segmentation, Segmenter, SegmenterBuilder};
/// The exported file's reader and typed metadata.
pub use segtool_onnx::{Metadata, ModelFile, ModelFileError, TrtProfileHint};
pub use temporal::{FlickerMeter, TemporalSmoother};
#[cfg(feature = "tract")]
pub use tract_engine::TractEngine;
pub use tract_options::TractOptions;
pub use triton::{write_repository as write_triton_repository, TritonOptions};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_model_bytes, tiny_spec};
    use image::{Rgb, RgbImage};

    /// Class 0 scores red, class 1 green, class 2 blue: the mask is the dominant channel.
    fn write_rgb_model(dir: &Path) -> std::path::PathBuf {
        let path = dir.join("rgb.onnx");
        let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
        path
    }

    fn images() -> Vec<RgbImage> {
        let mut a = RgbImage::from_pixel(4, 3, Rgb([250, 0, 0]));
        a.put_pixel(1, 1, Rgb([0, 0, 250]));
        let b = RgbImage::from_pixel(2, 2, Rgb([0, 250, 0]));
        let c = RgbImage::from_pixel(4, 3, Rgb([0, 0, 250]));
        vec![a, b, c]
    }

    fn check_results(seg: &mut Segmenter) {
        let imgs = images();
        let out = seg.segment_batch(&imgs).unwrap();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0].mask.dim(), (3, 4));
        assert_eq!(out[0].mask[[0, 0]], 0);
        assert_eq!(out[0].mask[[1, 1]], 2);
        assert!(out[1].mask.iter().all(|&m| m == 1));
        assert!(out[2].mask.iter().all(|&m| m == 2));
        assert_eq!(out[0].logits.as_ref().unwrap().dim(), (3, 3, 4));
        let single = seg.segment(&imgs[0]).unwrap();
        assert_eq!(single.mask, out[0].mask);
    }

    #[cfg(feature = "tract")]
    #[test]
    fn segmenter_with_tract_handles_mixed_sizes_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_rgb_model(dir.path());
        let mut seg = Segmenter::open(&path, Backend::Tract)
            .unwrap()
            .with_logits(true);
        assert_eq!(seg.spec(), &tiny_spec(3));
        assert_eq!(
            (seg.engine().name(), seg.engine().provider()),
            ("tract", "cpu")
        );
        check_results(&mut seg);
    }

    /// Needs `libonnxruntime` (ORT_DYLIB_PATH or the build-time path); skipped without it.
    #[cfg(feature = "ort")]
    #[test]
    fn segmenter_with_ort_falls_back_to_cpu_and_says_why() {
        let dir = tempfile::tempdir().unwrap();
        let path = write_rgb_model(dir.path());
        let options = OrtOptions::new()
            .with_intra_threads(1)
            .with_provider(Provider::Cuda { device_id: 0 });
        let seg = match Segmenter::open(&path, Backend::Ort(options)) {
            Err(RuntimeError::OrtLibraryNotFound { tried }) => {
                eprintln!("skipping: no ONNX Runtime library ({tried:?})");
                return;
            }
            other => other.unwrap(),
        };
        let mut seg = seg.with_logits(true);
        assert_eq!(seg.engine().name(), "onnxruntime");
        eprintln!(
            "ort provider: {} fallback: {:?}",
            seg.engine().provider(),
            seg.engine().fallback_reason()
        );
        if seg.engine().provider() == "cpu" {
            assert!(seg.engine().fallback_reason().unwrap().contains("cuda:0"));
        }
        check_results(&mut seg);

        let bad = dir.path().join("bad.onnx");
        std::fs::write(&bad, b"\x08\x08garbage").unwrap();
        let err = OrtEngine::open(&bad, &OrtOptions::new()).err().unwrap();
        assert!(
            matches!(err, RuntimeError::File(ModelFileError::Invalid { .. }))
                && err.to_string().contains("bad.onnx"),
            "{err}"
        );
    }
}
