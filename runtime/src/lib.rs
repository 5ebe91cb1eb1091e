//! Run exported segtool DANet models.
//!
//! ```no_run
//! # #[cfg(not(feature = "ort"))] fn main() {}
//! # #[cfg(feature = "ort")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use segtool_runtime::{Backend, OrtOptions, Provider, Segmenter};
//! let options = OrtOptions::new().with_provider(Provider::Cuda { device_id: 0 });
//! let mut seg = Segmenter::open("model.onnx", Backend::Ort(options))?;
//! eprintln!("running on {}", seg.engine().provider()); // "cpu" if CUDA was unavailable
//! let img = image::open("street.png")?.to_rgb8();
//! let out = seg.segment(&img)?;
//! segtool_runtime::colorize(out.mask.view(), &seg.spec().palette).save("mask.png")?;
//! # Ok(()) }
//! ```
//!
//! Model contract (what `segtool export` writes): input `image` f32 `[N, 3, H, W]`
//! normalised with the spec's mean/std, output `logits` f32 `[N, classes, H, W]` at input
//! resolution, spec JSON in `metadata_props["segtool.spec"]`. Exports made with
//! `--preprocess` (uint8 NHWC RGB input, normalisation in the graph) and/or `--argmax`
//! (class map output) work too: [`Segmenter`] learns the contract from the metadata and
//! the graph (see [`io_contract`]) and feeds raw pixels / takes the class map as is.
//!
//! Features: `ort` (ONNX Runtime, loaded at run time; no link-time native dependency) and
//! `tract` (pure Rust). With `--no-default-features --features tract` nothing native is
//! needed at all.

// Without any backend only the pre/post-processing is usable; `Segmenter::open` then
// always fails, which leaves helpers unused.
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
mod onnx_scan;
#[cfg(feature = "ort")]
pub mod ort_engine;
pub mod postprocess;
pub mod preprocess;
pub mod temporal;
pub mod testing;
#[cfg(feature = "tract")]
pub mod tract_engine;
mod tract_options;
pub mod triton;

use std::collections::HashMap;
use std::path::Path;

use image::RgbImage;
use ndarray::Array3;
use segtool_core::ModelSpec;

pub use accuracy::{AccuracyMode, AccuracyOptions};
pub use batching::{BatchConfig, BatchError, BatchServer, LatestStream, OrderedStream};
pub use engine::{load_spec, read_metadata, Engine};
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
pub use temporal::{FlickerMeter, TemporalSmoother};
#[cfg(feature = "tract")]
pub use tract_engine::TractEngine;
pub use tract_options::TractOptions;
pub use triton::{write_repository as write_triton_repository, TritonOptions};

/// Which engine [`Segmenter::open`] builds.
#[derive(Clone, Debug)]
pub enum Backend {
    #[cfg(feature = "ort")]
    Ort(OrtOptions),
    Tract,
    /// tract with these options (threads); [`Backend::Tract`] is the defaults.
    TractWith(TractOptions),
    /// ONNX Runtime with these options; if its library cannot be loaded at all, tract
    /// (with a warning on stderr). Every other ONNX Runtime error stays an error.
    #[cfg(feature = "ort")]
    Auto(OrtOptions),
}

/// One image's result.
#[derive(Clone, Debug)]
pub struct Segmentation {
    /// Class per pixel, `(H, W)` at the input image's size.
    pub mask: ndarray::Array2<u8>,
    /// Raw logits `(classes, h, w)` when [`Segmenter::with_logits`] asked for them.
    pub logits: Option<Array3<f32>>,
}

/// A model plus its spec: images in, masks out.
pub struct Segmenter {
    engine: Box<dyn Engine>,
    spec: ModelSpec,
    contract: IoContract,
    keep_logits: bool,
}

impl Segmenter {
    /// Loads the model's spec from its metadata and builds the requested engine. The
    /// input layout and output kind come from the graph as the engine sees it, else from
    /// the exporter's metadata (`segtool.input_layout`, `segtool.output`).
    pub fn open(path: impl AsRef<Path>, backend: Backend) -> Result<Self> {
        let path = path.as_ref();
        let spec = load_spec(path)?;
        let recorded = IoContract::from_metadata(&read_metadata(path)?)?;
        let engine: Box<dyn Engine> = match backend {
            #[cfg(feature = "ort")]
            Backend::Ort(options) => Box::new(OrtEngine::open(path, &options)?),
            #[cfg(feature = "tract")]
            Backend::Tract => Box::new(TractEngine::open(path)?),
            #[cfg(feature = "tract")]
            Backend::TractWith(options) => Box::new(TractEngine::open_with(path, &options)?),
            #[cfg(not(feature = "tract"))]
            Backend::Tract | Backend::TractWith(_) => {
                return Err(RuntimeError::BackendUnavailable("tract"))
            }
            #[cfg(feature = "ort")]
            Backend::Auto(options) => match OrtEngine::open(path, &options) {
                Ok(engine) => Box::new(engine),
                #[cfg(feature = "tract")]
                Err(RuntimeError::OrtLibraryNotFound { tried }) => {
                    eprintln!(
                        "warning: ONNX Runtime cannot be loaded (tried: {}); using tract",
                        tried.join("; ")
                    );
                    let threads = TractOptions {
                        threads: options.intra_threads,
                    };
                    Box::new(TractEngine::open_with(path, &threads)?)
                }
                Err(e) => return Err(e),
            },
        };
        let contract = IoContract::resolve(recorded, engine.io_contract());
        Ok(Self::from_engine(engine, spec).with_contract(contract))
    }

    /// Wraps an engine built by hand (custom options, a spec from elsewhere). The
    /// contract is the engine's [`Engine::io_contract`], else the plain one; see
    /// [`Segmenter::with_contract`].
    pub fn from_engine(engine: Box<dyn Engine>, spec: ModelSpec) -> Self {
        let contract = engine.io_contract().unwrap_or_default();
        Self {
            engine,
            spec,
            contract,
            keep_logits: false,
        }
    }

    /// Overrides the input layout / output kind the model is driven with.
    pub fn with_contract(mut self, contract: IoContract) -> Self {
        self.contract = contract;
        self
    }

    /// The input layout and output kind the model is driven with.
    pub fn contract(&self) -> IoContract {
        self.contract
    }

    /// Takes the engine out, made to answer [`Engine::run`] like a plain model whatever
    /// its contract (see [`ContractAdapter`]): for the batch server's workers and
    /// accuracy mode.
    pub fn into_plain_engine(self) -> Box<dyn Engine> {
        ContractAdapter::wrap(self.engine, self.contract, &self.spec)
    }

    /// The engine input for same-size `imgs` in the model's layout (normalised f32 NCHW,
    /// or raw uint8 NHWC for `--preprocess` exports).
    pub fn prepare_input(&self, imgs: &[RgbImage]) -> Result<EngineTensor> {
        EngineTensor::from_images(imgs, &self.spec, self.contract.input)
    }

    /// One engine run on a prepared batch, its output checked against the spec
    /// (batch size, class count).
    pub fn run_prepared(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let n = input.dims().0;
        let out = self.engine.run_io(input)?;
        out.check(n, &self.spec)?;
        Ok(out)
    }

    /// Also return the raw logits of every image (costly for large class counts). Models
    /// exported with `--argmax` have none: their results carry `logits: None`.
    pub fn with_logits(mut self, keep: bool) -> Self {
        self.keep_logits = keep;
        self
    }

    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }

    pub fn engine(&self) -> &dyn Engine {
        self.engine.as_ref()
    }

    pub fn engine_mut(&mut self) -> &mut dyn Engine {
        self.engine.as_mut()
    }

    /// Segments one image at its own size.
    pub fn segment(&mut self, img: &RgbImage) -> Result<Segmentation> {
        let mut out = self.segment_batch(std::slice::from_ref(img))?;
        Ok(out.pop().expect("one result per image"))
    }

    /// Segments many images; same-size images share one engine run, so a batch of mixed
    /// sizes costs one run per distinct size. Results come back in input order.
    pub fn segment_batch(&mut self, imgs: &[RgbImage]) -> Result<Vec<Segmentation>> {
        let mut groups: Vec<((u32, u32), Vec<usize>)> = Vec::new();
        let mut by_size: HashMap<(u32, u32), usize> = HashMap::new();
        for (i, img) in imgs.iter().enumerate() {
            let g = *by_size.entry(img.dimensions()).or_insert_with(|| {
                groups.push((img.dimensions(), Vec::new()));
                groups.len() - 1
            });
            groups[g].1.push(i);
        }
        let mut results: Vec<Option<Segmentation>> = vec![None; imgs.len()];
        for ((w, h), members) in groups {
            let batch: Vec<RgbImage> = members.iter().map(|&i| imgs[i].clone()).collect();
            for (i, seg) in members.into_iter().zip(self.run_same_size(&batch, w, h)?) {
                results[i] = Some(seg);
            }
        }
        Ok(results
            .into_iter()
            .map(|r| r.expect("every image in a group"))
            .collect())
    }

    fn run_same_size(&mut self, imgs: &[RgbImage], w: u32, h: u32) -> Result<Vec<Segmentation>> {
        let sizes = vec![(h as usize, w as usize); imgs.len()];
        if self.contract.is_plain() {
            let input = normalise_batch(imgs, &self.spec)?;
            return batching::run_normalised(
                self.engine.as_mut(),
                &self.spec,
                input.view(),
                &sizes,
                self.keep_logits,
            );
        }
        let input = self.prepare_input(imgs)?;
        let out = self.run_prepared(input.view())?;
        Ok((0..imgs.len())
            .map(|i| Segmentation {
                mask: out.mask(i, h as usize, w as usize),
                logits: if self.keep_logits {
                    out.logits(i)
                } else {
                    None
                },
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_model_bytes, tiny_spec};
    use image::Rgb;

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
            matches!(err, RuntimeError::InvalidModel { .. })
                && err.to_string().contains("bad.onnx"),
            "{err}"
        );
    }
}
