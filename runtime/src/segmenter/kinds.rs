//! [`EngineKind`], the engines every front end names the same way, and [`Fallback`], what
//! opening did that was not asked for: values the builder returns, never prints.

use std::fmt;
use std::str::FromStr;

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
