//! The one error type of the crate.
//!
//! Every variant says what a user can act on: which file, which shape was expected,
//! which paths were searched for ONNX Runtime and how to point at another one. Engine
//! errors are flattened to strings so that the type stays the same whichever backends
//! are compiled in.

use std::path::PathBuf;

use segtool_onnx::ModelFileError;
use segtool_spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The model path does not exist.
    #[error("model file not found: {}", path.display())]
    ModelNotFound { path: PathBuf },

    /// The model file exists but could not be read.
    #[error("cannot read model file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// The file is not a loadable ONNX model (truncated download, wrong file, unsupported op...).
    #[error("invalid or truncated ONNX model {}: {message}", path.display())]
    InvalidModel { path: PathBuf, message: String },

    /// The model has no `segtool.spec` entry in its `metadata_props`.
    #[error(
        "{} carries no segtool spec (ONNX metadata_props key {key:?}); \
         export the model with `segtool export` or pass the spec explicitly",
        path.display()
    )]
    MissingSpec { path: PathBuf, key: &'static str },

    /// The spec entry exists but does not parse or validate.
    #[error("invalid segtool spec in {}: {source}", path.display())]
    InvalidSpec {
        path: PathBuf,
        #[source]
        source: SpecError,
    },

    /// The tensor or images handed to an engine do not fit the model.
    #[error("wrong input shape: expected {expected}, got {got}")]
    InputShape { expected: String, got: String },

    /// The model answered with something other than `[N, classes, H, W]` logits.
    #[error("unexpected model output: expected {expected}, got {got}")]
    OutputShape { expected: String, got: String },

    /// No usable `libonnxruntime` was found.
    #[error(
        "ONNX Runtime library not found; tried: {}. Set ORT_DYLIB_PATH to the full path of \
         libonnxruntime.so (e.g. <venv>/lib/python3.11/site-packages/onnxruntime/capi/libonnxruntime.so.1.31.1 \
         from `pip install onnxruntime==1.31.1`, or onnxruntime-gpu for CUDA/TensorRT), \
         or use the tract backend",
        tried_list(tried)
    )]
    OrtLibraryNotFound {
        /// Each candidate with why it was rejected.
        tried: Vec<String>,
    },

    /// ONNX Runtime itself failed (session creation, a run).
    #[error("ONNX Runtime error: {0}")]
    Ort(String),

    /// tract failed while optimising or running the model.
    #[error("tract error: {0}")]
    Tract(String),

    /// [`SegmenterBuilder::strict`](crate::SegmenterBuilder::strict): opening would have
    /// taken a fallback.
    #[error("strict: {} would not run as requested: {fallback}", path.display())]
    FallbackRefused {
        /// The model file.
        path: PathBuf,
        /// The fallback refused ([`Fallback`](crate::Fallback)'s text).
        fallback: String,
    },

    /// The requested backend was not compiled into this build.
    #[error("the {0} backend is not compiled in; rebuild segtool-runtime with `--features {0}`")]
    BackendUnavailable(&'static str),
}

/// Result of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// Reading the file is `segtool-onnx`'s job; its errors keep their meaning here (a
/// malformed metadata value is an invalid model, its message naming the key).
impl From<ModelFileError> for RuntimeError {
    fn from(e: ModelFileError) -> Self {
        match e {
            ModelFileError::NotFound { path } => RuntimeError::ModelNotFound { path },
            ModelFileError::Io { path, source } => RuntimeError::Io { path, source },
            ModelFileError::Invalid { path, message } => RuntimeError::InvalidModel { path, message },
            ModelFileError::MissingSpec { path, key } => RuntimeError::MissingSpec { path, key },
            ModelFileError::InvalidSpec { path, source } => RuntimeError::InvalidSpec { path, source },
            ModelFileError::Metadata { path, key, message } => RuntimeError::InvalidModel {
                path,
                message: format!("metadata {key:?}: {message}"),
            },
        }
    }
}

fn tried_list(tried: &[String]) -> String {
    if tried.is_empty() {
        "nothing (ORT_DYLIB_PATH unset and no path recorded at build time)".into()
    } else {
        tried.join("; ")
    }
}

/// Formats a shape as `[1, 3, 512, 512]`.
pub(crate) fn fmt_shape(shape: &[usize]) -> String {
    format!("{shape:?}")
}
