//! ONNX Runtime sessions for calibration: in-memory models, every output by name.
//!
//! ort allows one environment per process; this crate creates its own (from the same
//! library search as the runtime, [`segtool_runtime::ort_engine::dylib_candidates`]), so
//! do not open runtime `OrtEngine`s in the same process as a calibration.

use std::collections::BTreeMap;
use std::sync::Mutex;

use ndarray::{ArrayD, ArrayView4};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;

use crate::CalibrationError;

static ENV: Mutex<Option<Environment>> = Mutex::new(None);

fn ort_err(e: impl std::fmt::Display) -> CalibrationError {
    CalibrationError::Ort(e.to_string())
}

fn environment() -> Result<Environment, CalibrationError> {
    let mut slot = ENV.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(env) = slot.as_ref() {
        return Ok(env.clone());
    }
    let mut tried = Vec::new();
    for (path, source) in segtool_runtime::ort_engine::dylib_candidates(None) {
        if path.is_absolute() && !path.exists() {
            tried.push(format!("{} ({source}): no such file", path.display()));
            continue;
        }
        match ort::init_from(&path) {
            Ok(b) => {
                let env = b
                    .with_name("segtool-calibration")
                    .build()
                    .map_err(ort_err)?;
                *slot = Some(env.clone());
                return Ok(env);
            }
            Err(e) => tried.push(format!("{} ({source}): {e}", path.display())),
        }
    }
    Err(CalibrationError::Ort(format!(
        "cannot load ONNX Runtime (tried: {})",
        tried.join("; ")
    )))
}

/// One CPU session over a model held in memory.
pub struct OrtModel {
    session: Session,
    input: String,
}

impl OrtModel {
    pub fn new(bytes: &[u8], threads: Option<usize>) -> Result<Self, CalibrationError> {
        let env = environment()?;
        let mut b = Session::builder(&env).map_err(ort_err)?;
        if let Some(n) = threads {
            b = b.with_intra_threads(n).map_err(ort_err)?;
        }
        let session = b.commit_from_memory(bytes).map_err(ort_err)?;
        let input = session
            .inputs()
            .first()
            .ok_or_else(|| CalibrationError::Model("the model has no input".into()))?
            .name()
            .to_string();
        Ok(Self { session, input })
    }

    /// Runs `x` and returns the float outputs among `names` (all float outputs when
    /// `names` is empty).
    pub fn run(
        &mut self,
        x: ArrayView4<f32>,
        names: &[String],
    ) -> Result<BTreeMap<String, ArrayD<f32>>, CalibrationError> {
        let x = x.as_standard_layout();
        let t = TensorRef::from_array_view(&x).map_err(ort_err)?;
        let outputs = self
            .session
            .run(ort::inputs![self.input.as_str() => t])
            .map_err(ort_err)?;
        let mut out = BTreeMap::new();
        for (name, value) in outputs.iter() {
            if !names.is_empty() && !names.iter().any(|n| n == name) {
                continue;
            }
            if let Ok(a) = value.try_extract_array::<f32>() {
                out.insert(name.to_string(), a.to_owned());
            }
        }
        Ok(out)
    }

    /// Runs `x` and discards the outputs (latency measurement).
    pub fn run_discard(&mut self, x: ArrayView4<f32>) -> Result<(), CalibrationError> {
        let x = x.as_standard_layout();
        let t = TensorRef::from_array_view(&x).map_err(ort_err)?;
        self.session
            .run(ort::inputs![self.input.as_str() => t])
            .map_err(ort_err)?;
        Ok(())
    }
}
