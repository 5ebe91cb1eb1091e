//! [`SegmenterBuilder`]: how a [`Segmenter`] is configured and opened, in the style of
//! `ort`'s session builder. Opening reads the model file once ([`ModelFile::read`]) and
//! hands that value to the engine; every fallback taken on the way (ONNX Runtime's
//! library missing, so tract; a provider that did not load, so the next one) is returned
//! as a [`Fallback`] the caller can read and log, never printed.

use std::path::PathBuf;

use segtool_onnx::ModelFile;

mod choose;

use super::{auto, EngineKind, Fallback, Segmenter};
use crate::card::{self, CardRequest, ResolvedCard};
use crate::engines::Engine;
use crate::error::{Result, RuntimeError};
use crate::engines::openvino_options::{Device, OpenVinoOptions, PerformanceHint, Precision};
#[cfg(feature = "openvino")]
use crate::engines::openvino::OpenVinoEngine;
#[cfg(feature = "ort")]
use crate::engines::ort::{OrtEngine, OrtOptions, Provider};
use crate::segmenter::SegmenterExt;
#[cfg(feature = "tract")]
use crate::engines::tract::{TractEngine, TractOptions};

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
    auto_cache: Option<PathBuf>,
    accuracy: Option<crate::pipeline::accuracy::AccuracyOptions>,
}

impl SegmenterBuilder {
    pub(super) fn new(path: PathBuf) -> Self {
        Self {
            auto_cache: auto::cache::default_path(),
            accuracy: None,
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

    /// OpenVINO's parallel inference streams; default, and `0`: what the hint picks.
    pub fn streams(mut self, streams: usize) -> Self {
        self.openvino.streams = (streams > 0).then_some(streams);
        self
    }

    /// Every OpenVINO setting at once (the library path too); [`threads`](Self::threads)
    /// and [`strict`](Self::strict) still apply on top.
    pub fn openvino_options(mut self, options: OpenVinoOptions) -> Self {
        self.openvino = options;
        self
    }

    /// Threads for one inference (ONNX Runtime's intra-op pool, tract's executor,
    /// OpenVINO's CPU plugin); default, and `0`: the engine's (all cores), as in every
    /// front end.
    pub fn threads(mut self, threads: usize) -> Self {
        self.threads = (threads > 0).then_some(threads);
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

    /// Where [`EngineKind::Auto`] keeps the engine it timed fastest per model, machine and
    /// options (default `$SEGTOOL_HOME/auto-engine.json`, else under `~/.cache/segtool`);
    /// `None`: time the engines at every open and keep nothing.
    pub fn auto_cache(mut self, file: Option<PathBuf>) -> Self {
        self.auto_cache = file;
        self
    }

    /// Accuracy mode: every batch runs under the evaluation protocol `opts` (scales,
    /// flips, sliding windows) instead of once. Refused at open, naming the model, where
    /// its card says what the protocol cannot do (see
    /// [`SegmenterExt::with_accuracy`]).
    pub fn accuracy(mut self, opts: crate::pipeline::accuracy::AccuracyOptions) -> Self {
        self.accuracy = Some(opts);
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
        let opened = Opened {
            model: model.as_ref(),
            resolved: &resolved,
            card,
            path: &served,
            output,
        };
        let mut fallbacks = Vec::new();
        let (mut segmenter, choice) = match self.engine {
            EngineKind::Auto => {
                let (segmenter, why) = self.auto(&opened, &mut fallbacks)?;
                (segmenter, Some(why))
            }
            kind => {
                self.check_applies(kind)?;
                let engine = self.build(kind, &opened, &mut fallbacks)?;
                (opened.segmenter(engine), None)
            }
        };
        if let Some(first) = fallbacks.first().filter(|_| self.strict) {
            return Err(RuntimeError::FallbackRefused {
                path: self.path.clone(),
                fallback: first.to_string(),
            });
        }
        if !resolved.segtool_export {
            // A graph from elsewhere may fix its batch size (mmdeploy, Hugging Face
            // exports at batch 1): batches run in pieces of it.
            let io = segtool_onnx::read_io(&served)?;
            segmenter.graph_batch = crate::pipeline::graph_batch(&io);
        }
        segmenter.fallbacks = fallbacks;
        segmenter.engine_choice = choice;
        segmenter.options = self.as_options();
        if let Some(opts) = self.accuracy.clone() {
            segmenter = segmenter.with_accuracy(opts)?;
        }
        Ok(segmenter.with_logits(self.logits))
    }

    /// The builder's settings as [`SegmenterOptions`] (what [`Segmenter::options`] reports).
    fn as_options(&self) -> super::SegmenterOptions {
        // No providers listed is ONNX Runtime's CPU, as the default option says.
        #[cfg(feature = "ort")]
        let providers: Vec<String> = self
            .ort
            .execution_providers
            .iter()
            .map(Provider::to_string)
            .collect();
        #[cfg(not(feature = "ort"))]
        let providers: Vec<String> = Vec::new();
        let providers = match providers.is_empty() {
            true => super::SegmenterOptions::default().providers,
            false => providers,
        };
        let o = &self.openvino;
        super::SegmenterOptions {
            engine: self.engine,
            providers,
            device: o.device,
            precision: o.precision,
            hint: o.hint,
            streams: o.streams,
            threads: self.threads,
            card: self.card.card_file.clone(),
            strict: self.strict,
            fixed_size: self.fixed_size.map(|(h, w)| [h, w]),
            logits: self.logits,
        }
    }

    /// The engine of kind `kind` (not [`EngineKind::Auto`]).
    fn build(
        &self,
        kind: EngineKind,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<Box<dyn Engine>> {
        match kind {
            EngineKind::Tract => self.tract(model, fallbacks),
            EngineKind::Ort => self.ort(model, fallbacks),
            EngineKind::OpenVino => self.openvino(model, fallbacks),
            EngineKind::Auto => unreachable!("auto resolves to an engine first"),
        }
    }

    /// The options set that engine `kind` does not take, each with why; a named engine
    /// refuses the first ([`check_applies`](Self::check_applies)), auto reports them
    /// ([`Fallback::OptionNotApplied`]).
    fn inapplicable(&self, kind: EngineKind) -> Vec<(&'static str, String)> {
        let openvino_only =
            |what: &str| format!("{what} is OpenVINO's, and {} runs the model", kind.as_str());
        let mut out = Vec::new();
        if kind != EngineKind::OpenVino {
            let o = &self.openvino;
            if o.precision != Precision::F32 {
                out.push((
                    "precision",
                    openvino_only(&format!("precision {}", o.precision)),
                ));
            }
            if o.device != Device::Cpu {
                out.push(("device", openvino_only(&format!("device {}", o.device))));
            }
            if o.hint != PerformanceHint::Latency {
                out.push(("hint", openvino_only(&format!("hint {}", o.hint))));
            }
            if let Some(n) = o.streams {
                out.push(("streams", openvino_only(&format!("streams {n}"))));
            }
        }
        let gpu = self.gpu_providers();
        if kind == EngineKind::OpenVino && !gpu.is_empty() {
            out.push((
                "providers",
                format!(
                    "{} are ONNX Runtime's; OpenVINO takes a device",
                    gpu.join(", ")
                ),
            ));
        }
        if kind != EngineKind::Ort && self.fixed_size.is_some() {
            out.push((
                "fixed_size",
                format!(
                    "it plans ONNX Runtime's memory, and {} plans each size as it comes",
                    kind.as_str()
                ),
            ));
        }
        out
    }

    /// Refuses, by name, the first option set that a named engine does not take.
    fn check_applies(&self, kind: EngineKind) -> Result<()> {
        match self.inapplicable(kind).into_iter().next() {
            Some((name, message)) => Err(RuntimeError::Option { name, message }),
            None => Ok(()),
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
            // The card's resize or padding (a fixed-size graph's size among them) decides
            // the tensor's size, not the images'.
            let (h, w) = crate::card::pipeline::Geometry::of(&model.resolved.card, (h, w)).tensor;
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
    resolved: &'a ResolvedCard,
    card: Option<&'a crate::card::ModelCard>,
    path: &'a std::path::Path,
    output: Option<String>,
}

impl Opened<'_> {
    /// A segmenter around `engine` for this model (its fallbacks and choice come later).
    fn segmenter(&self, engine: Box<dyn Engine>) -> Segmenter {
        match self.model {
            Some(model) => Segmenter::assemble(engine, model.clone(), Vec::new()),
            None => Segmenter::assemble_foreign(engine, self.resolved.clone(), Vec::new()),
        }
    }

    /// A segtool export's fixed input size, if its graph has one.
    fn graph_size(&self) -> Option<(usize, usize)> {
        let model = self.model?;
        let contract =
            crate::engines::io_contract::IoContract::resolve(model.metadata.contract, model.io.contract());
        crate::pipeline::graph_size(&model.io, contract.input)
    }
}

/// The kind of an engine from its name ([`Engine::name`]).
fn engine_kind_of(name: &str) -> EngineKind {
    match name {
        "onnxruntime" => EngineKind::Ort,
        "openvino" => EngineKind::OpenVino,
        _ => EngineKind::Tract,
    }
}
