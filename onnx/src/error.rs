//! The error of reading an exported file: every variant names the file, and a metadata
//! error also names the key.

use std::path::PathBuf;

use segtool_model_spec::SpecError;

/// What went wrong reading a model file.
#[derive(Debug, thiserror::Error)]
pub enum ModelFileError {
    /// The path is not an existing file.
    #[error("model file not found: {}", path.display())]
    NotFound {
        /// The path asked for.
        path: PathBuf,
    },

    /// The file exists but could not be read.
    #[error("cannot read model file {}: {source}", path.display())]
    Io {
        /// The model file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },

    /// Not an ONNX protobuf, or truncated.
    #[error("invalid or truncated ONNX model {}: {message}", path.display())]
    Invalid {
        /// The model file.
        path: PathBuf,
        /// What is wrong, with the byte position where it helps.
        message: String,
    },

    /// The file has no `segtool.spec` metadata entry.
    #[error(
        "{} carries no segtool spec (ONNX metadata_props key {key:?}); \
         export the model with `segtool export` or pass the spec explicitly",
        path.display()
    )]
    MissingSpec {
        /// The model file.
        path: PathBuf,
        /// The key looked for.
        key: &'static str,
    },

    /// The spec entry exists but does not parse or validate.
    #[error("invalid segtool spec in {}: {source}", path.display())]
    InvalidSpec {
        /// The model file.
        path: PathBuf,
        /// Why the spec was refused.
        #[source]
        source: SpecError,
    },

    /// A segtool metadata entry is present but malformed (a renamed field, a value from a
    /// newer exporter): an error rather than silently ignoring it.
    #[error("malformed metadata {key:?} in {}: {message}", path.display())]
    Metadata {
        /// The model file.
        path: PathBuf,
        /// The metadata_props key.
        key: &'static str,
        /// What is wrong with its value.
        message: String,
    },
}

/// Result of this crate.
pub type Result<T, E = ModelFileError> = std::result::Result<T, E>;
