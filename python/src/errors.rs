//! The exception hierarchy (`segtool.Error` and its subclasses) and the mapping of the
//! runtime's errors onto it. Messages are the runtime's `Display` text, the same the
//! command line prints.

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::PyErr;
use segtool_runtime::batching::BatchError;
use segtool_runtime::RuntimeError;

create_exception!(segtool, Error, PyException, "Every error segtool raises.");
create_exception!(
    segtool,
    ModelError,
    Error,
    "The model file: missing, truncated, not ONNX, without segtool metadata, or an output that breaks its contract."
);
create_exception!(
    segtool,
    InputError,
    Error,
    "An input that does not fit: wrong dtype, shape or option. The message names what was expected."
);
create_exception!(
    segtool,
    EngineError,
    Error,
    "The engine: ONNX Runtime not loadable (with engine=\"ort\"), a failed run, a refused fallback."
);
create_exception!(
    segtool,
    StreamClosedError,
    Error,
    "A frame submitted to a stream or server after close()."
);

/// An [`InputError`] saying what was expected and what came.
pub(crate) fn input(expected: impl Into<String>, got: impl Into<String>) -> PyErr {
    runtime(RuntimeError::InputShape {
        expected: expected.into(),
        got: got.into(),
    })
}

/// The runtime's error as the matching exception.
pub(crate) fn runtime(e: RuntimeError) -> PyErr {
    let msg = e.to_string();
    match e {
        RuntimeError::File(_) | RuntimeError::OutputShape { .. } | RuntimeError::Card { .. } => {
            ModelError::new_err(msg)
        }
        RuntimeError::InputShape { .. }
        | RuntimeError::Frame(_)
        | RuntimeError::Option { .. }
        | RuntimeError::AccuracyMode { .. } => InputError::new_err(msg),
        RuntimeError::OrtLibraryNotFound { .. }
        | RuntimeError::OpenVinoLibraryNotFound { .. }
        | RuntimeError::OpenVino(_)
        | RuntimeError::Ort(_)
        | RuntimeError::Tract(_)
        | RuntimeError::FallbackRefused { .. }
        | RuntimeError::BackendUnavailable(_) => EngineError::new_err(msg),
    }
}

/// A batch server's error as the matching exception.
pub(crate) fn batch(e: BatchError) -> PyErr {
    match e {
        BatchError::Runtime(e) => runtime(e),
        BatchError::ShutDown => StreamClosedError::new_err(e.to_string()),
        BatchError::InvalidConfig(_) => InputError::new_err(e.to_string()),
        other => EngineError::new_err(other.to_string()),
    }
}
