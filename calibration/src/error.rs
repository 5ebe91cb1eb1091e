//! What can go wrong while calibrating, each naming the file or stage.

use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid model: {0}")]
    Model(String),
    #[error("ONNX Runtime: {0}")]
    Ort(String),
    /// An engine of the runtime (OpenVINO, when `--auto` measures in it).
    #[error(transparent)]
    Engine(#[from] segtool_runtime::RuntimeError),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    TrtCache(#[from] TrtCacheError),
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CalibrationError + '_ {
    move |source| CalibrationError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Why a calibration cache cannot be written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TrtCacheError {
    /// Names the line format cannot carry: (name, why).
    #[error("TensorRT calibration cache: cannot write {}", describe(.0))]
    UnwritableNames(Vec<(String, String)>),
    /// Names that are no tensor of the float graph.
    #[error(
        "TensorRT calibration cache: {} name(s) are not tensors of the fp32 graph (ONNX \
         Runtime ignores unknown names and TensorRT would run them in fp32): {}",
        .0.len(),
        .0.iter().map(|n| format!("{n:?}")).collect::<Vec<_>>().join(", ")
    )]
    NotInGraph(Vec<String>),
}

fn describe(bad: &[(String, String)]) -> String {
    bad.iter()
        .map(|(n, why)| format!("tensor {n:?}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}
