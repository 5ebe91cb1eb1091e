//! The one error type of the crate.
//!
//! Every variant says what a user can act on: which file, which shape was expected,
//! which paths were searched for ONNX Runtime and how to point at another one. Engine
//! errors are flattened to strings so that the type stays the same whichever backends
//! are compiled in.

use std::path::PathBuf;

use segtool_onnx::ModelFileError;

/// Everything opening or running a model can fail with; the `Display` message is meant
/// to be shown to the user as is.
///
/// # Example
///
/// ```
/// use segtool_runtime::{ModelFileError, RuntimeError, Segmenter};
/// let Err(err) = Segmenter::builder("no-such-model.onnx").open() else {
///     panic!("a missing file opened");
/// };
/// // Match a variant to act on it, or show the message: it names the file.
/// assert!(matches!(err, RuntimeError::File(ModelFileError::NotFound { .. })));
/// assert!(err.to_string().contains("no-such-model.onnx"));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The model file is missing, unreadable, not ONNX, truncated, or its segtool
    /// metadata is missing or malformed: `segtool-onnx`'s error, which names the file
    /// (and the metadata key). Engines report a model they cannot load (an unsupported
    /// op, a graph that does not type-check) the same way, as [`ModelFileError::Invalid`].
    #[error(transparent)]
    File(#[from] ModelFileError),

    /// Accuracy mode asked of a model it cannot drive (a card-driven file, or a graph
    /// without float input and logits output).
    #[error("{}: accuracy mode: {why}", path.display())]
    AccuracyMode {
        /// The model.
        path: std::path::PathBuf,
        /// Why the model cannot run under the evaluation protocol.
        why: String,
    },

    /// An option that is not one (an unknown execution provider, ...), by name.
    #[error("option {name}: {message}")]
    Option {
        /// The option's name ([`crate::SegmenterOptions::NAMES`]).
        name: &'static str,
        /// What is wrong with its value.
        message: String,
    },

    /// The pixels handed in are not a frame (empty, overlapping rows, a short buffer).
    #[error("bad frame: {0}")]
    Frame(#[from] crate::frame::FrameError),

    /// The tensor or images handed to an engine do not fit the model.
    #[error("wrong input shape: expected {expected}, got {got}")]
    InputShape {
        /// What the model or call needs, in words and shapes (e.g. `f32 [N, 3, H, W]
        /// (normalised RGB, NCHW)`, `every image of a batch 1024x512 like image 0`).
        expected: String,
        /// What was handed in, in the same terms.
        got: String,
    },

    /// The model answered with something other than the output its contract promises
    /// (`[N, classes, H, W]` f32 logits, or an `[N, H, W]` class map for `--argmax`
    /// exports).
    #[error("unexpected model output: expected {expected}, got {got}")]
    OutputShape {
        /// The output the contract promises, in words and shapes.
        expected: String,
        /// What the engine returned.
        got: String,
    },

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

    /// No OpenVINO C library could be loaded.
    #[error(
        "OpenVINO cannot be loaded (tried: {}); install the pinned wheel \
         (pip install openvino==2026.4.1) or set OPENVINO_LIB to its libs/libopenvino_c.so.*",
        tried_list(tried)
    )]
    OpenVinoLibraryNotFound {
        /// Each candidate with why it was rejected.
        tried: Vec<String>,
    },

    /// OpenVINO itself failed (reading, compiling, a run), with its message.
    #[error("OpenVINO error: {0}")]
    OpenVino(String),

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

    /// The model's card (what a foreign ONNX file needs beside its graph) is missing a
    /// field, malformed, or contradicts the graph; the message says what and how to give it.
    #[error("{}: model card: {message}", path.display())]
    Card {
        /// The model file (or the card file that is malformed).
        path: PathBuf,
        /// What is wrong, naming the field (and the graph's side of a contradiction).
        message: String,
    },

    /// The requested backend was not compiled into this build.
    #[error("the {0} backend is not compiled in; rebuild segtool-runtime with `--features {0}`")]
    BackendUnavailable(&'static str),
}

/// Result of this crate.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

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
