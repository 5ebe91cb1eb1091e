//! [`SegmenterBuilder`]: how a [`Segmenter`] is configured and opened, in the style of
//! `ort`'s session builder. Opening reads the model file once ([`ModelFile::read`]) and
//! hands that value to the engine; every fallback taken on the way (ONNX Runtime's
//! library missing, so tract; a provider that did not load, so the next one) is returned
//! as a [`Fallback`] the caller can read and log, never printed.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use segtool_onnx::{ModelFile, ModelFileError};

use super::{auto, Segmenter};
use crate::card::{self, CardRequest, ResolvedCard};
use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::openvino::{Device, OpenVinoOptions, PerformanceHint, Precision};
#[cfg(feature = "openvino")]
use crate::openvino_engine::OpenVinoEngine;
#[cfg(feature = "ort")]
use crate::ort_engine::{OrtEngine, OrtOptions, Provider};
use crate::segmenter::SegmenterExt;
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
    /// The engine measured fastest for this model on this machine (timed on first use,
    /// then cached under `$SEGTOOL_HOME`), except where correctness decides: ONNX Runtime
    /// when GPU providers are asked for, OpenVINO for `bf16`, tract for full-range INT8
    /// weights on a CPU without VNNI. ONNX Runtime's library missing is a
    /// [`Fallback::OrtLibraryMissing`]. What was timed and why is
    /// [`Segmenter::engine_choice`].
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
    /// ONNX Runtime's library could not be loaded ([`EngineKind::Auto`]); another engine
    /// runs (tract, or OpenVINO where it was timed faster): see
    /// [`Segmenter::engine_choice`].
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
    /// [`EngineKind::Auto`]'s rule named an engine (OpenVINO for `bf16`) that did not
    /// open the model; `running` does, without what only `requested` computes.
    Engine {
        /// The engine the rule named, e.g. `openvino`.
        requested: String,
        /// The engine in use, e.g. `onnxruntime`.
        running: String,
        /// Why the rule named it, and why it did not open.
        reason: String,
    },
    /// [`EngineKind::Auto`] runs an engine that does not take an option that was set
    /// (OpenVINO's device or hint on ONNX Runtime, say): the option is not applied.
    OptionNotApplied {
        /// The option's name ([`crate::SegmenterOptions::NAMES`]).
        option: &'static str,
        /// Why the engine that runs does not take it.
        reason: String,
    },
}

impl Fallback {
    /// The fallback's kind as every front end names it: `ort_library_missing`,
    /// `provider`, `tract_cpu_only`, `engine` or `option_not_applied`.
    pub fn kind(&self) -> &'static str {
        match self {
            Fallback::OrtLibraryMissing { .. } => "ort_library_missing",
            Fallback::Provider { .. } => "provider",
            Fallback::TractCpuOnly { .. } => "tract_cpu_only",
            Fallback::Engine { .. } => "engine",
            Fallback::OptionNotApplied { .. } => "option_not_applied",
        }
    }
}

impl fmt::Display for Fallback {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fallback::OrtLibraryMissing { tried } => write!(
                f,
                "ONNX Runtime cannot be loaded (tried: {}); another engine runs",
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
            Fallback::Engine {
                requested,
                running,
                reason,
            } => write!(f, "{requested} asked for, running {running}: {reason}"),
            Fallback::OptionNotApplied { option, reason } => {
                write!(f, "option {option} not applied: {reason}")
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
    auto_cache: Option<PathBuf>,
    accuracy: Option<crate::accuracy::AccuracyOptions>,
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
    /// flips, sliding windows) instead of once. Refused at open for a card-driven model
    /// and for a graph without float input and logits output, naming the model.
    pub fn accuracy(mut self, opts: crate::accuracy::AccuracyOptions) -> Self {
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

    /// [`EngineKind::Auto`] (see [`super::auto`]): a rule of correctness, else the engine
    /// measured fastest for this model on this machine; with the reason for the choice.
    /// Options the chosen engine does not take are reported as fallbacks.
    fn auto(
        &self,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let gpu_providers = self.gpu_providers();
        let calibration = model.model.and_then(|m| m.metadata.calibration.as_ref());
        let situation = auto::Situation {
            gpu_providers: &gpu_providers,
            precision: self.openvino.precision,
            int8_file: calibration.is_some(),
            full_range_weights: calibration.is_some_and(auto::full_range_weights),
            vnni: auto::cpu_has_vnni(),
        };
        let size = self
            .fixed_size
            .or_else(|| model.graph_size())
            .unwrap_or(auto::measure::DEFAULT_SIZE);
        let plan = match auto::plan(&situation) {
            auto::Plan::Measure(_) if size.0 * size.1 > auto::measure::MAX_PROBE_PIXELS => {
                let why = format!(
                    "{}x{} is too large to time the engines at (over 4096x4096 pixels)",
                    size.0, size.1
                );
                auto::Plan::Rule(EngineKind::Ort, why)
            }
            plan => plan,
        };
        let (segmenter, why) = match plan {
            auto::Plan::Rule(kind, why) => self.auto_rule(kind, why, model, fallbacks)?,
            auto::Plan::Measure(kinds) => self.auto_measured(&kinds, size, model, fallbacks)?,
        };
        // `fixed_size` is applied either way: it is the size auto timed at.
        let running = engine_kind_of(segmenter.engine.name());
        for (option, reason) in self.inapplicable(running) {
            if option != "fixed_size" {
                fallbacks.push(Fallback::OptionNotApplied { option, reason });
            }
        }
        Ok((segmenter, why))
    }

    /// Auto's rule named `kind`: that engine; ONNX Runtime when it does not open (a
    /// [`Fallback::Engine`]); tract when ONNX Runtime's library is missing.
    fn auto_rule(
        &self,
        kind: EngineKind,
        why: String,
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let name = auto::measure::engine_name(kind);
        let failure = match self.build(kind, model, fallbacks) {
            Ok(engine) => {
                return Ok((model.segmenter(engine), format!("auto chose {name}: {why}")))
            }
            Err(RuntimeError::OrtLibraryNotFound { tried }) if cfg!(feature = "tract") => {
                fallbacks.push(Fallback::OrtLibraryMissing { tried });
                let engine = self.tract(model, fallbacks)?;
                let why = format!("auto chose tract: {why}; ONNX Runtime is missing");
                return Ok((model.segmenter(engine), why));
            }
            Err(e) if kind == EngineKind::Ort || kind == EngineKind::Tract => return Err(e),
            Err(e) => e,
        };
        fallbacks.push(Fallback::Engine {
            requested: name.into(),
            running: "onnxruntime".into(),
            reason: format!("{why}, but it did not open the model: {failure}"),
        });
        self.auto_rule(
            EngineKind::Ort,
            format!("{name} did not open the model"),
            model,
            fallbacks,
        )
    }

    /// Times each engine of `kinds` that opens the model on a frame of `size` (or takes
    /// the cached choice for this model, machine and options) and keeps the fastest.
    fn auto_measured(
        &self,
        kinds: &[EngineKind],
        size: (usize, usize),
        model: &Opened<'_>,
        fallbacks: &mut Vec<Fallback>,
    ) -> Result<(Segmenter, String)> {
        let key = self.auto_key(model, size)?;
        let cache = self.auto_cache.as_deref();
        let cached = cache.and_then(|path| auto::cache::lookup(path, &key));
        // A cached engine that no longer opens is measured over with the others.
        let hit = cached.and_then(|entry| {
            let mut own = Vec::new();
            let engine = self.build(entry.engine, model, &mut own).ok()?;
            Some((model.segmenter(engine), own, entry))
        });
        let (segmenter, own, entry, kept) = match hit {
            Some((segmenter, own, entry)) => {
                let path = cache.map_or_else(String::new, |p| p.display().to_string());
                (segmenter, own, entry, format!("cached in {path}"))
            }
            None => {
                let (segmenter, own, entry) = self.time_engines(kinds, model, key, size)?;
                let kept = match cache {
                    Some(path) => match auto::cache::store(path, entry.clone()) {
                        Ok(()) => format!("timed now, cached in {}", path.display()),
                        Err(why) => format!("timed now, not cached: {why}"),
                    },
                    None => "timed now, not cached".into(),
                };
                (segmenter, own, entry, kept)
            }
        };
        fallbacks.extend(own);
        if let Some(tried) = entry
            .ort_missing
            .filter(|_| entry.engine != EngineKind::Ort)
        {
            fallbacks.push(Fallback::OrtLibraryMissing { tried });
        }
        let mut why = format!(
            "auto chose {}: the fastest when timed on this machine {}: {}",
            auto::measure::engine_name(entry.engine),
            self.timed_at(size),
            auto::measure::describe(&entry.timings)
        );
        for line in &entry.unavailable {
            why.push_str(&format!("; {line}"));
        }
        why.push_str(&format!("; {kept}"));
        Ok((segmenter, why))
    }

    /// Opens and times each engine of `kinds` in turn within the time cap, keeping only
    /// the fastest so far open (a large model is never held three times).
    fn time_engines(
        &self,
        kinds: &[EngineKind],
        model: &Opened<'_>,
        key: auto::cache::Key,
        size: (usize, usize),
    ) -> Result<(Segmenter, Vec<Fallback>, auto::cache::Entry)> {
        let budget = auto::measure::budget().map_err(|message| RuntimeError::Option {
            name: "engine",
            message,
        })?;
        let started = std::time::Instant::now();
        let frame = auto::measure::probe_frame(size);
        let mut best: Option<(Segmenter, Vec<Fallback>, EngineKind)> = None;
        let mut timings: Vec<auto::measure::Timing> = Vec::new();
        let mut unavailable = Vec::new();
        let mut ort_missing = None;
        for (i, &kind) in kinds.iter().enumerate() {
            let mut own = Vec::new();
            let name = auto::measure::engine_name(kind);
            let mut segmenter = match self.build(kind, model, &mut own) {
                Ok(engine) => model.segmenter(engine),
                Err(RuntimeError::OrtLibraryNotFound { tried }) => {
                    unavailable.push(format!("{name} is missing"));
                    ort_missing = Some(tried);
                    continue;
                }
                Err(e) => {
                    unavailable.push(format!("{name} did not open the model ({e})"));
                    continue;
                }
            };
            let share = budget.saturating_sub(started.elapsed()) / (kinds.len() - i) as u32;
            let deadline = std::time::Instant::now() + share;
            match auto::measure::time(&mut segmenter, kind, &frame, deadline) {
                Ok(timing) => {
                    let fastest = timings.iter().all(|t| timing.median_ms < t.median_ms);
                    timings.push(timing);
                    if fastest {
                        best = Some((segmenter, own, kind));
                    }
                }
                Err(e) => unavailable.push(format!("{name} failed on the probe frame ({e})")),
            }
        }
        let Some((segmenter, own, engine)) = best else {
            return Err(match ort_missing {
                Some(tried) => RuntimeError::OrtLibraryNotFound { tried },
                None => RuntimeError::Option {
                    name: "engine",
                    message: format!(
                        "auto found no engine that runs the model: {}",
                        unavailable.join("; ")
                    ),
                },
            });
        };
        let entry = auto::cache::Entry {
            key,
            engine,
            timings,
            unavailable,
            ort_missing,
        };
        Ok((segmenter, own, entry))
    }

    /// `at 512x512, 2 threads`: the conditions auto timed under.
    fn timed_at(&self, (h, w): (usize, usize)) -> String {
        let threads = match self.threads {
            Some(1) => "1 thread".to_string(),
            Some(n) => format!("{n} threads"),
            None => "the engines' default threads".to_string(),
        };
        format!("at {h}x{w}, {threads}")
    }

    /// What auto's cached choice for this model depends on (see [`auto::cache`]).
    fn auto_key(&self, model: &Opened<'_>, (h, w): (usize, usize)) -> Result<auto::cache::Key> {
        let model_sha256 =
            auto::cache::sha256_of(model.path).map_err(|source| ModelFileError::Io {
                path: model.path.to_path_buf(),
                source,
            })?;
        let paths = |candidates: Vec<(PathBuf, &'static str)>| -> Vec<PathBuf> {
            candidates.into_iter().map(|(p, _)| p).collect()
        };
        let mut libraries = Vec::new();
        #[cfg(feature = "ort")]
        libraries.push(auto::cache::library_identity(
            "onnxruntime",
            &paths(crate::ort_engine::dylib_candidates(
                self.ort.dylib_path.as_deref(),
            )),
        ));
        #[cfg(feature = "openvino")]
        libraries.push(auto::cache::library_identity(
            "openvino",
            &paths(crate::openvino_engine::library::candidates(
                self.openvino.library.as_deref(),
            )),
        ));
        let o = &self.openvino;
        Ok(auto::cache::Key {
            model_sha256,
            cpu: auto::cache::cpu_identity(),
            libraries,
            segtool: env!("CARGO_PKG_VERSION").into(),
            threads: self.threads,
            settings: format!(
                "precision {}, device {}, hint {}, streams {:?}",
                o.precision, o.device, o.hint, o.streams
            ),
            size: [h, w],
        })
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
            // A card's resize or padding, or a fixed-size graph the images are fitted to,
            // decides the tensor's size, not the images'.
            let (h, w) = match model.card {
                Some(card) => crate::card::pipeline::Geometry::of(card, (h, w)).tensor,
                None => model.graph_size().unwrap_or((h, w)),
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
            crate::io_contract::IoContract::resolve(model.metadata.contract, model.io.contract());
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
