//! What can go wrong while calibrating, each naming the file or stage.

use std::path::{Path, PathBuf};

use crate::trt_cache;

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
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    TrtCache(#[from] trt_cache::TrtCacheError),
}

pub(crate) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CalibrationError + '_ {
    move |source| CalibrationError::Io {
        path: path.to_path_buf(),
        source,
    }
}
