//! The engine the search judges and times its mixes in: the one the model will ship on.
//!
//! The same QDQ file runs different kernels in each engine. ONNX Runtime's CPU provider
//! runs QLinear kernels; OpenVINO folds the Q/DQ pairs into its own INT8 primitives and,
//! with the bf16 hint, runs the layers left in float in bf16. Agreement and speed both
//! differ, so a mix chosen in one engine is not the mix that is right for the other.
//!
//! Accepts: a float or QDQ model in memory, normalised f32 NCHW in, float scores out (a
//! model card's output by name). OpenVINO reads models from files: each mix is written to
//! a temporary file that lives as long as its session.

use std::fmt;
use std::io::Write;

use ndarray::{ArrayD, ArrayView4};
use segtool_runtime::expert::{Engine, EngineInput, EngineOutput, OpenVinoEngine};
use segtool_runtime::openvino::OpenVinoOptions;
use segtool_runtime::EngineKind;

use crate::session::OrtModel;
use crate::CalibrationError;

/// Where `--auto` runs the mixes it measures: the engine the model will ship on, named by
/// the runtime's own [`EngineKind`] (`ort` or `openvino`), and OpenVINO's settings.
#[derive(Clone, Debug)]
pub struct MixEngine {
    /// [`EngineKind::Ort`] (the CPU provider, the calibration's thread count) or
    /// [`EngineKind::OpenVino`]; `auto` and `tract` are refused when a session opens.
    pub kind: EngineKind,
    /// OpenVINO's device, precision and threads (the calibration's thread count when
    /// they name none); unused with ONNX Runtime.
    pub openvino: OpenVinoOptions,
}

impl MixEngine {
    /// ONNX Runtime's CPU provider.
    pub fn ort() -> Self {
        Self {
            kind: EngineKind::Ort,
            openvino: OpenVinoOptions::new(),
        }
    }

    /// OpenVINO with `options`.
    pub fn openvino(options: OpenVinoOptions) -> Self {
        Self {
            kind: EngineKind::OpenVino,
            openvino: options,
        }
    }

    /// The engine's threads: OpenVINO's own when set, else the calibration's.
    pub(super) fn threads(&self, calibration: Option<usize>) -> Option<usize> {
        match self.kind {
            EngineKind::OpenVino => self.openvino.threads.or(calibration),
            _ => calibration,
        }
    }
}

impl Default for MixEngine {
    fn default() -> Self {
        Self::ort()
    }
}

impl fmt::Display for MixEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.kind {
            EngineKind::OpenVino => {
                let o = &self.openvino;
                write!(f, "OpenVINO {} {}", o.device, o.precision)
            }
            EngineKind::Ort => f.write_str("ONNX Runtime CPU"),
            other => write!(f, "{other}"),
        }
    }
}

/// One model opened in a [`MixEngine`].
pub(super) enum MixSession {
    Ort(OrtModel),
    OpenVino {
        engine: Box<OpenVinoEngine>,
        // Kept until the engine is dropped (fields drop in order).
        _file: tempfile::TempPath,
    },
}

impl MixSession {
    /// Opens `model` in `engine`; `io_names` names the input to feed and the scores to
    /// read (a card's), `threads` is the calibration's thread count.
    pub(super) fn open(
        engine: &MixEngine,
        model: &[u8],
        threads: Option<usize>,
        io_names: Option<(&str, &str)>,
    ) -> Result<Self, CalibrationError> {
        match engine.kind {
            EngineKind::Ort => Ok(Self::Ort(OrtModel::new(model, threads)?)),
            EngineKind::OpenVino => {
                let file = temporary_model(model)?;
                let mut options = engine.openvino.clone();
                options.threads = options.threads.or(threads);
                options.io_names = io_names.map(|(i, o)| (i.to_string(), o.to_string()));
                let engine = OpenVinoEngine::open(&file, &options)?;
                Ok(Self::OpenVino {
                    engine: Box::new(engine),
                    _file: file,
                })
            }
            other @ (EngineKind::Tract | EngineKind::Auto) => {
                Err(CalibrationError::Input(format!(
                    "--auto judges and times mixes in the engine the model ships on, ort or \
                 openvino; not {other} (tract runs no QLinear kernels of ONNX Runtime's or \
                 OpenVINO's, and auto is not one engine)"
                )))
            }
        }
    }

    /// The scores of `x`: the output named `output`, else the first float output.
    pub(super) fn scores(
        &mut self,
        x: ArrayView4<f32>,
        output: Option<&str>,
    ) -> Result<ArrayD<f32>, CalibrationError> {
        match self {
            Self::Ort(ort) => {
                let out = ort.run(x, &[])?;
                let scores = match output {
                    Some(name) => out.get(name),
                    None => out.values().next(),
                };
                scores.cloned().ok_or_else(no_scores)
            }
            Self::OpenVino { engine, .. } => match engine.run(EngineInput::NchwF32(x))? {
                EngineOutput::Logits(l) => Ok(l.into_dyn()),
                EngineOutput::Mask(_) => Err(no_scores()),
            },
        }
    }

    /// Runs `x` and drops the result (latency).
    pub(super) fn run_discard(&mut self, x: ArrayView4<f32>) -> Result<(), CalibrationError> {
        match self {
            Self::Ort(ort) => ort.run_discard(x),
            Self::OpenVino { engine, .. } => engine
                .run(EngineInput::NchwF32(x))
                .map(drop)
                .map_err(Into::into),
        }
    }
}

fn no_scores() -> CalibrationError {
    CalibrationError::Model("the model has no float output (logits)".into())
}

fn temporary_model(model: &[u8]) -> Result<tempfile::TempPath, CalibrationError> {
    let mut file = tempfile::Builder::new()
        .prefix("segtool-auto-")
        .suffix(".onnx")
        .tempfile()
        .map_err(|e| CalibrationError::Input(format!("a temporary file for OpenVINO: {e}")))?;
    file.write_all(model)
        .and_then(|()| file.flush())
        .map_err(|e| CalibrationError::Input(format!("{}: {e}", file.path().display())))?;
    Ok(file.into_temp_path())
}
