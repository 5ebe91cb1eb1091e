//! [`SegmenterBuilder`]: how a [`Segmenter`] is configured and opened, in the style of
//! `ort`'s session builder. Opening reads the model file once ([`ModelFile::read`]) and
//! hands that value to the engine; every fallback taken on the way (ONNX Runtime's
//! library missing, so tract; a provider that did not load, so the next one) is returned
//! as a [`Fallback`] the caller can read and log, never printed.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use segtool_onnx::ModelFile;

use super::Segmenter;
use crate::card::{self, CardRequest};
use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::openvino::{Device, OpenVinoOptions, PerformanceHint, Precision};
#[cfg(feature = "openvino")]
use crate::openvino_engine::OpenVinoEngine;
#[cfg(feature = "ort")]
use crate::ort_engine::{OrtEngine, OrtOptions, Provider};
#[cfg(feature = "tract")]
use crate::tract_engine::{TractEngine, TractOptions};

/// Which engine runs the model.
///
/// ```
/// use segtool_runtime::EngineKind;
/// let kind: EngineKind = "openvino".parse()?; // as every front end names them
/// assert_eq!(kind, EngineKind::OpenVino);
/// assert_eq!(EngineKind::default().to_string(), "auto");
/// # Ok::<(), String>(())
/// ```
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// OpenVINO for segtool's INT8 files on CPUs with AMX-INT8 and when bf16 is asked
    /// for, where it measured faster (and no GPU provider is asked for); else ONNX
    /// Runtime when its library loads; else tract (a [`Fallback::OrtLibraryMissing`]).
    /// The reason is [`Segmenter::engine_choice`].
    #[default]
    Auto,
    /// ONNX Runtime (CPU, CUDA, TensorRT); fails when its library cannot be loaded.
    Ort,
    /// tract: pure Rust, CPU only, no native library.
    Tract,
    /// OpenVINO (Intel CPUs with AMX/AVX-512, iGPUs, NPUs); fails when its library
    /// cannot be loaded.
    #[serde(rename = "openvino")]
    OpenVino,
}

impl EngineKind {
    /// Every engine, in the order of the names' list.
    pub const ALL: [EngineKind; 4] = [
        EngineKind::Auto,
        EngineKind::Ort,
        EngineKind::Tract,
        EngineKind::OpenVino,
    ];

    /// The name used on command lines and in reports: `auto`, `ort`, `tract`,
    /// `openvino`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineKind::Auto => "auto",
            EngineKind::Ort => "ort",
            EngineKind::Tract => "tract",
            EngineKind::OpenVino => "openvino",
        }
    }
}

impl fmt::Display for EngineKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EngineKind {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "auto" => Ok(EngineKind::Auto),
            "ort" => Ok(EngineKind::Ort),
            "tract" => Ok(EngineKind::Tract),
            "openvino" => Ok(EngineKind::OpenVino),
            other => Err(format!(
                "unknown engine {other:?} (auto, ort, tract, openvino)"
            )),
        }
    }
}

/// A fallback taken while opening: the model runs, but not as first asked.
///
/// ```no_run
/// use segtool_runtime::{Fallback, Provider, Segmenter};
/// let seg = Segmenter::builder("danet.onnx")
///     .providers([Provider::Cuda { device_id: 0 }, Provider::Cpu])
///     .open()?;
/// for fallback in seg.fallbacks() {
///     if let Fallback::Provider { requested, running, reason } = fallback {
///         eprintln!("{requested} did not load ({reason}); running on {running}");
///     }
/// }
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// ONNX Runtime's library could not be loaded ([`EngineKind::Auto`]); tract runs.
    OrtLibraryMissing {
        /// Each library candidate with why it was rejected.
        tried: Vec<String>,
    },
    /// The first requested execution provider did not load; `running` does.
    Provider {
        /// The provider asked for first, e.g. `cuda:0`.
        requested: String,
        /// The provider in use, e.g. `cpu`.
        running: String,
        /// Why the earlier providers were not used.
        reason: String,
    },
    /// tract runs on the CPU only; the listed providers were not used.
    TractCpuOnly {
        /// The providers asked for.
        requested: String,
    },
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::OrtLibraryMissing { tried } => write!(
                f,
                "ONNX Runtime cannot be loaded (tried: {}); using tract",
                tried.join("; ")
            ),
            Fallback::Provider {
                requested,
                running,
                reason,
            } => {
                write!(f, "{requested} requested, running on {running}: {reason}")
            }
            Fallback::TractCpuOnly { requested } => {
                write!(f, "tract runs on the CPU only; {requested} not used")
            }
        }
    }
}

/// Configures and opens a [`Segmenter`]; see [`Segmenter::builder`].
///
/// ```no_run
/// use segtool_runtime::openvino::Precision;
/// use segtool_runtime::{EngineKind, Segmenter};
/// let seg = Segmenter::builder("danet.int8.onnx")
///     .engine(EngineKind::OpenVino)
///     .precision(Precision::Bf16)
///     .threads(4)
///     .strict(true) // no fallback: an absent device is an error
///     .open()?;
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until `open` is called"]
pub struct SegmenterBuilder {
    path: PathBuf,
    engine: EngineKind,
    #[cfg(feature = "ort")]
    ort: OrtOptions,
    openvino: OpenVinoOptions,
    threads: Option<usize>,
    strict: bool,
    fixed_size: Option<(usize, usize)>,
    logits: bool,
    card: CardRequest,
}

impl SegmenterBuilder {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            path,
            engine: EngineKind::Auto,
            #[cfg(feature = "ort")]
            ort: OrtOptions::new(),
            openvino: OpenVinoOptions::new(),
            threads: None,
            strict: false,
            fixed_size: None,
            logits: false,
            card: CardRequest::new(),
        }
    }

    /// What an ONNX file segtool did not write needs beside its graph: a card file and
    /// fields of the caller's own (see [`crate::card`]; the file's own metadata, a sidecar
    /// and a Hugging Face folder's files are read anyway). A segtool export's spec
    /// says everything; a card request does not change how it runs.
    pub fn card(mut self, request: CardRequest) -> Self {
        self.card = request;
        self
    }

    /// The engine (default [`EngineKind::Auto`]).
    pub fn engine(mut self, kind: EngineKind) -> Self {
        self.engine = kind;
        self
    }

    /// ONNX Runtime's execution providers in preference order (default: CPU). CPU is the
    /// last resort unless [`strict`](Self::strict).
    #[cfg(feature = "ort")]
    pub fn providers(mut self, providers: impl IntoIterator<Item = Provider>) -> Self {
        self.ort = self
            .ort
            .with_execution_providers(providers.into_iter().collect::<Vec<_>>());
        self
    }

    /// Every ONNX Runtime setting at once (CUDA and TensorRT options, the library path);
    /// [`threads`](Self::threads), [`strict`](Self::strict) and
    /// [`fixed_size`](Self::fixed_size) still apply on top.
    #[cfg(feature = "ort")]
    pub fn ort_options(mut self, options: OrtOptions) -> Self {
        self.ort = options;
        self
    }

    /// The `libonnxruntime` file to load instead of the usual search.
    #[cfg(feature = "ort")]
    pub fn ort_library(mut self, path: impl Into<PathBuf>) -> Self {
        self.ort = self.ort.with_dylib_path(path.into());
        self
    }

    /// OpenVINO's device (default the CPU); absent, it falls back to the CPU (reported)
    /// unless [`strict`](Self::strict).
    pub fn device(mut self, device: Device) -> Self {
        self.openvino.device = device;
        self
    }

    /// The precision OpenVINO computes float32 layers in (default `f32`).
    pub fn precision(mut self, precision: Precision) -> Self {
        self.openvino.precision = precision;
        self
    }

    /// OpenVINO's performance hint (default latency).
    pub fn hint(mut self, hint: PerformanceHint) -> Self {
        self.openvino.hint = hint;
        self
    }

    /// OpenVINO's parallel inference streams (default: what the hint picks).
    pub fn streams(mut self, streams: usize) -> Self {
        self.openvino.streams = Some(streams.max(1));
        self
    }

    /// Every OpenVINO setting at once (the library path too); [`threads`](Self::threads)
    /// and [`strict`](Self::strict) still apply on top.
    pub fn openvino_options(mut self, options: OpenVinoOptions) -> Self {
        self.openvino = options;
        self
    }

    /// Threads for one inference (ONNX Runtime's intra-op pool, tract's executor,
    /// OpenVINO's CPU plugin); default: the engine's (all cores).
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = Some(threads.max(1));
        self
    }

    /// No fallback of any kind: opening fails with [`RuntimeError::FallbackRefused`]
    /// instead of running on something not requested (a provider not listed, tract in
    /// place of ONNX Runtime, tract for a GPU request).
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }

    /// Every image will be `height` x `width` (a fixed camera): ONNX Runtime plans its
    /// memory for that size and refuses others (tract plans per size anyway).
    pub fn fixed_size(mut self, height: usize, width: usize) -> Self {
        self.fixed_size = Some((height, width));
        self
    }

    /// Also return each image's logits (models exported with `--argmax` have none).
    pub fn logits(mut self, keep: bool) -> Self {
        self.logits = keep;
        self
    }

    /// Reads the model's card (a segtool export's spec, or the card of a file from
    /// elsewhere: [`card`](Self::card)) and builds the engine.
    pub fn open(mut self) -> Result<Segmenter> {
        // A folder (mmdeploy SDK, Hugging Face export) names the model inside it.
        self.path = card::model_file(&self.path)?;
        let resolved = card::resolve(&self.path, &self.card)?;
        let model = match resolved.segtool_export {
            true => Some(ModelFile::read(&self.path)?),
            false => None,
        };
        let card = (!resolved.segtool_export).then_some(&resolved.card);
        // A mask-classification head runs as a copy with its semantic scores appended.
        let served = match card {
            Some(card) => card::mask_head::served_model(&self.path, card)?,
            None => self.path.clone(),
        };
        let output = match card {
            Some(c) if c.output.kind == card::OutputKind::MaskClassification => {
                Some(card::mask_head::SCORES_OUTPUT.to_string())
            }
            Some(c) => Some(c.output.name.clone()),
            None => None,
        };
        let mut fallbacks = Vec::new();
        let opened = Opened {
            model: model.as_ref(),
            card,
            path: &served,
            output,
        };
        let (engine, choice) = self.build_engine(&opened, &mut fallbacks)?;
        if let Some(first) = fallbacks.first().filter(|_| self.strict) {
            return Err(RuntimeError::FallbackRefused {
                path: self.path.clone(),
                fallback: first.to_string(),
            });
        }
        let mut segmenter = match model {
            Some(model) => Segmenter::assemble(engine, model, fallbacks),
            None => Segmenter::assemble_foreign(engine, resolved, fallbacks),
        };
        segmenter.engine_choice = choice;
        Ok(segmenter.with_logits(self.logits))
    }

    /// The engine asked for, and (for [`EngineKind::Auto`]) why it was chosen.
    fn build_engine(
        &self,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Box<dyn Engine>, Option<String>)> {
        let engine = match self.engine {
            EngineKind::Tract => self.tract(model, fallbacks),
            EngineKind::Ort => self.ort(model, fallbacks),
            EngineKind::OpenVino => self.openvino(model, fallbacks),
            EngineKind::Auto => return self.auto(model, fallbacks).map(|(e, why)| (e, Some(why))),
        };
        Ok((engine?, None))
    }

    /// [`EngineKind::Auto`] (see [`super::auto`]): OpenVINO where it measured faster,
    /// else ONNX Runtime, else tract when ONNX Runtime's library is
    /// missing; with the reason for the choice.
    fn auto(
        &self,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Box<dyn Engine>, String)> {
        let gpu_providers = self.gpu_providers();
        let calibration = model.model.and_then(|m| m.metadata.calibration.as_ref());
        let situation = super::auto::Situation {
            gpu_providers: &gpu_providers,
            precision: self.openvino.precision,
            int8_file: calibration.is_some(),
            amx_int8: super::auto::cpu_has_amx_int8(),
            full_range_weights: calibration.is_some_and(super::auto::full_range_weights),
            vnni: super::auto::cpu_has_vnni(),
        };
        if let Some(why) = super::auto::prefer_exact_int8(&situation) {
            let engine = self.tract(model, fallbacks)?;
            return Ok((engine, format!("auto chose tract: {why}")));
        }
        let why_not = match super::auto::prefer_openvino(&situation) {
            Ok(why) => match self.openvino(model, fallbacks) {
                Ok(engine) => return Ok((engine, format!("auto chose openvino: {why}"))),
                Err(e) => format!("{why}, but it did not open the model: {e}"),
            },
            Err(why) => why,
        };
        match self.ort(model, fallbacks) {
            Err(RuntimeError::OrtLibraryNotFound { tried }) if cfg!(feature = "tract") => {
                fallbacks.push(Fallback::OrtLibraryMissing { tried });
                let engine = self.tract(model, fallbacks)?;
                Ok((
                    engine,
                    format!("auto chose tract: {why_not}; ONNX Runtime is missing"),
                ))
            }
            other => Ok((other?, format!("auto chose onnxruntime: {why_not}"))),
        }
    }

    /// The execution providers asked of ONNX Runtime other than the CPU (`cuda:0`).
    fn gpu_providers(&self) -> Vec<String> {
        #[cfg(feature = "ort")]
        return self
            .ort
            .execution_providers
            .iter()
            .filter(|p| **p != Provider::Cpu)
            .map(Provider::to_string)
            .collect();
        #[cfg(not(feature = "ort"))]
        Vec::new()
    }

    #[cfg(feature = "ort")]
    fn ort(&self, model: &Opened<'_>, fallbacks: &mut Vec<Fallback>) -> Result<Box<dyn Engine>> {
        let mut options = self.ort.clone();
        if let (Some(card), Some(output)) = (model.card, &model.output) {
            options = options.with_io_names(card.input.name.clone(), output.clone());
        }
        if let Some(n) = self.threads {
            options = options.with_intra_threads(n);
        }
        if let Some((h, w)) = self.fixed_size {
            // A card's resize or padding decides the tensor's size, not the image's.
            let (h, w) = match model.card {
                Some(card) => crate::card::pipeline::Geometry::of(card, (h, w)).tensor,
                None => (h, w),
            };
            options = options.with_fixed_input_size(h, w);
        }
        let engine = match model.model {
            Some(model) => OrtEngine::open_model(model, &options)?,
            None => OrtEngine::open(model.path, &options)?,
        };
        if let Some(reason) = engine.fallback_reason() {
            let requested = options
                .execution_providers
                .first()
                .map_or_else(|| "cpu".to_string(), Provider::to_string);
            fallbacks.push(Fallback::Provider {
                requested,
                running: engine.provider().to_string(),
                reason: reason.to_string(),
            });
        }
        Ok(Box::new(engine))
    }

    #[cfg(not(feature = "ort"))]
    fn ort(&self, _: &Opened<'_>, _: &mut Vec<Fallback>) -> Result<Box<dyn Engine>> {
        Err(RuntimeError::BackendUnavailable("ort"))
    }

    #[cfg(feature = "tract")]
    fn tract(&self, model: &Opened<'_>, fallbacks: &mut Vec<Fallback>) -> Result<Box<dyn Engine>> {
        let gpu = self.gpu_providers();
        if !gpu.is_empty() {
            fallbacks.push(Fallback::TractCpuOnly {
                requested: gpu.join(", "),
            });
        }
        let mut options = TractOptions::new();
        if let Some(n) = self.threads {
            options = options.with_threads(n);
        }
        if let (Some(card), Some(output)) = (model.card, &model.output) {
            options = options.with_io_names(card.input.name.clone(), output.clone());
        }
        Ok(Box::new(TractEngine::open_with(model.path, &options)?))
    }

    #[cfg(feature = "openvino")]
    fn openvino(
        &self,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<Box<dyn Engine>> {
        let mut options = self.openvino.clone();
        options.strict |= self.strict;
        if let Some(n) = self.threads {
            options.threads = Some(n);
        }
        if let (Some(card), Some(output)) = (model.card, &model.output) {
            options.io_names = Some((card.input.name.clone(), output.clone()));
        }
        let engine = match model.model {
            Some(file) => OpenVinoEngine::open_io(model.path, &file.io, &options)?,
            None => OpenVinoEngine::open(model.path, &options)?,
        };
        if let Some(reason) = engine.fallback_reason() {
            fallbacks.push(Fallback::Provider {
                requested: format!("openvino:{}", options.device),
                running: engine.provider().to_string(),
                reason: reason.to_string(),
            });
        }
        Ok(Box::new(engine))
    }

    #[cfg(not(feature = "openvino"))]
    fn openvino(&self, _: &Opened<'_>, _: &mut Vec<Fallback>) -> Result<Box<dyn Engine>> {
        Err(RuntimeError::BackendUnavailable("openvino"))
    }

    #[cfg(not(feature = "tract"))]
    fn tract(&self, _: &Opened<'_>, _: &mut Vec<Fallback>) -> Result<Box<dyn Engine>> {
        Err(RuntimeError::BackendUnavailable("tract"))
    }
}

/// What the engine is opened from: a segtool export as read, or a file from elsewhere
/// with its card (which names the graph input), the file to run and the output to read.
#[derive(Clone)]
struct Opened<'a> {
    model: Option<&'a ModelFile>,
    card: Option<&'a crate::card::ModelCard>,
    path: &'a std::path::Path,
    output: Option<String>,
}
