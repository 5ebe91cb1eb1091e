//! Why an export failed, precisely enough that a user can fix the input: paths, tensor
//! keys and both shapes are named in every message.

use std::path::PathBuf;

use segtool_spec::spec::SpecError;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("checkpoint {} not found", path.display())]
    NotFound { path: PathBuf },

    #[error("cannot read checkpoint {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not a valid safetensors file (truncated or corrupt?): {reason}", path.display())]
    NotSafetensors { path: PathBuf, reason: String },

    #[error(
        "checkpoint {} has no `{key}` metadata: it was not written by segtool \
         (convert it with the train tool first)",
        path.display(),
        key = segtool_spec::SPEC_METADATA_KEY
    )]
    MissingSpec { path: PathBuf },

    #[error("checkpoint {} has an invalid model spec: {source}", path.display())]
    BadSpec {
        path: PathBuf,
        #[source]
        source: SpecError,
    },

    #[error("invalid model spec: {0}")]
    Spec(#[from] SpecError),

    #[error("checkpoint has no tensor `{key}`")]
    MissingTensor { key: String },

    #[error("tensor `{key}` has shape {actual:?}, expected {expected:?}")]
    WrongShape {
        key: String,
        expected: Vec<usize>,
        actual: Vec<usize>,
    },

    #[error("tensor `{key}` has dtype {actual}, expected F32")]
    WrongDtype { key: String, actual: String },

    #[error("unsupported opset {opset}: segtool exports opsets {min}..={max}")]
    UnsupportedOpset { opset: i64, min: i64, max: i64 },

    #[error(
        "{module} attention as `{form}` needs opset >= {needed}, but opset {opset} was asked for"
    )]
    AttentionOpset {
        module: &'static str,
        form: &'static str,
        opset: i64,
        needed: i64,
    },

    #[error("{module} attention as `{form}` cannot be loaded by the `{target}` target's runtime")]
    AttentionTarget {
        module: &'static str,
        form: &'static str,
        target: &'static str,
    },

    #[error("invalid export option: {0}")]
    BadOption(String),

    #[error(
        "--keep-fp32 `{name}` matches no layer of the model{}",
        if close.is_empty() { String::new() } else { format!(" (close: {})", close.join(", ")) }
    )]
    UnknownLayer {
        name: String,
        /// Layer names of the model nearest to `name` (edit distance), best first.
        close: Vec<String>,
    },

    #[error(
        "model is {bytes} bytes, over protobuf's 2 GiB message limit{}",
        if *external { " even with its large initialisers in external data" }
        else { " (export it with external data: `--external-data auto` / \
                `ExportOptions::with_external_data(ExternalData::Auto)`)" }
    )]
    TooLarge {
        bytes: u64,
        /// Whether the size was measured with external data already in use.
        external: bool,
    },

    #[error(
        "the model needs ONNX external data ({reason}), which an in-memory export \
         (`export_onnx_bytes` / `export_model`) cannot return in one buffer: export to a \
         file (`export_onnx`, CLI `--onnx`), take both buffers from `export_onnx_parts`, \
         or set `ExportOptions::external_data` to `Never` (`--external-data never`)"
    )]
    ExternalDataInMemory { reason: String },

    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}
