//! ONNX Runtime sessions for calibration: in-memory models, every output by name.
//!
//! ort allows one environment per process: calibration sessions use the runtime's
//! ([`segtool_runtime::expert::environment`]), so calibrating and running runtime
//! engines in one process (`segtool calibrate --auto` does both) share one library.

use std::collections::BTreeMap;

use ndarray::{ArrayD, ArrayView4, ArrayViewD};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::TensorRef;

use crate::CalibrationError;

fn ort_err(e: impl std::fmt::Display) -> CalibrationError {
    CalibrationError::Ort(e.to_string())
}

/// The process's one ONNX Runtime environment, shared with the runtime's engines.
fn environment() -> Result<Environment, CalibrationError> {
    segtool_runtime::expert::environment(None).map_err(ort_err)
}

/// One CPU session over a model held in memory.
pub struct OrtModel {
    session: Session,
    input: String,
}

impl OrtModel {
    pub fn new(bytes: &[u8], threads: Option<usize>) -> Result<Self, CalibrationError> {
        Self::build(bytes, threads, None)
    }

    /// A session that records ONNX Runtime's profile (one event per kernel run) into a
    /// file starting with `prefix`; [`OrtModel::end_profiling`] closes it.
    pub fn profiled(
        bytes: &[u8],
        threads: Option<usize>,
        prefix: &std::path::Path,
    ) -> Result<Self, CalibrationError> {
        Self::build(bytes, threads, Some(prefix))
    }

    /// Stops profiling; the path of the profile ONNX Runtime wrote.
    pub fn end_profiling(&mut self) -> Result<String, CalibrationError> {
        self.session.end_profiling().map_err(ort_err)
    }

    fn build(
        bytes: &[u8],
        threads: Option<usize>,
        profile: Option<&std::path::Path>,
    ) -> Result<Self, CalibrationError> {
        let env = environment()?;
        let mut b = Session::builder(&env).map_err(ort_err)?;
        if let Some(n) = threads {
            b = b.with_intra_threads(n).map_err(ort_err)?;
        }
        if let Some(prefix) = profile {
            b = b.with_profiling(prefix).map_err(ort_err)?;
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
        let mut out = BTreeMap::new();
        let wanted = |n: &str| names.is_empty() || names.iter().any(|w| w == n);
        self.each_float_output(x, wanted, |name, a| {
            out.insert(name.to_string(), a.to_owned());
            Ok(())
        })?;
        Ok(out)
    }

    /// Runs `x` and calls `f` with each float output among `names`, borrowed from ONNX
    /// Runtime's buffers: the statistics passes read every exposed tensor of every image
    /// once, and an owned copy of each (hundreds of MB per image at ResNet-50 sizes) cost
    /// more than reading it.
    pub fn visit(
        &mut self,
        x: ArrayView4<f32>,
        names: &[String],
        mut f: impl FnMut(&str, &[f32]) -> Result<(), CalibrationError>,
    ) -> Result<(), CalibrationError> {
        let wanted = |n: &str| names.iter().any(|w| w == n);
        self.each_float_output(x, wanted, |name, a| match a.as_slice() {
            Some(data) => f(name, data),
            None => Err(CalibrationError::Ort(format!(
                "output {name:?} is not contiguous"
            ))),
        })
    }

    /// Runs `x` once and hands `f` each float output that `wanted` names, in ONNX
    /// Runtime's buffer: the one loop behind [`run`](Self::run), [`visit`](Self::visit)
    /// and [`run_discard`](Self::run_discard).
    fn each_float_output(
        &mut self,
        x: ArrayView4<f32>,
        wanted: impl Fn(&str) -> bool,
        mut f: impl FnMut(&str, ArrayViewD<'_, f32>) -> Result<(), CalibrationError>,
    ) -> Result<(), CalibrationError> {
        let x = x.as_standard_layout();
        let t = TensorRef::from_array_view(&x).map_err(ort_err)?;
        let outputs = self
            .session
            .run(ort::inputs![self.input.as_str() => t])
            .map_err(ort_err)?;
        for (name, value) in outputs.iter() {
            if !wanted(name) {
                continue;
            }
            if let Ok(a) = value.try_extract_array::<f32>() {
                f(name, a)?;
            }
        }
        Ok(())
    }

    /// Runs `x` and discards the outputs (latency measurement).
    pub fn run_discard(&mut self, x: ArrayView4<f32>) -> Result<(), CalibrationError> {
        self.each_float_output(x, |_| false, |_, _| Ok(()))
    }
}
