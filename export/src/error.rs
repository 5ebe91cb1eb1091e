//! Why an export failed, precisely enough that a user can fix the input: paths, tensor
//! keys and both shapes are named in every message.

use std::path::PathBuf;

use segtool_model_spec::spec::SpecError;

/// Everything [`export_onnx`](crate::export_onnx) and its in-memory forms can fail with.
/// The `Display` message is meant to be shown to the user as is.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The checkpoint file does not exist.
    #[error("checkpoint {} not found", path.display())]
    NotFound {
        /// The checkpoint path as given.
        path: PathBuf,
    },

    /// The checkpoint exists but could not be read (permissions, I/O error).
    #[error("cannot read checkpoint {}: {source}", path.display())]
    Read {
        /// The checkpoint path as given.
        path: PathBuf,
        /// The I/O error from reading it.
        #[source]
        source: std::io::Error,
    },

    /// The checkpoint is not a well-formed safetensors file (header or tensor table).
    #[error("{} is not a valid safetensors file (truncated or corrupt?): {reason}", path.display())]
    NotSafetensors {
        /// The checkpoint path as given.
        path: PathBuf,
        /// The safetensors parser's complaint.
        reason: String,
    },

    /// The safetensors header has no segtool model spec: the checkpoint was not written
    /// by segtool and must be converted with the train tool first.
    #[error(
        "checkpoint {} has no `{key}` metadata: it was not written by segtool \
         (convert it with the train tool first)",
        path.display(),
        key = segtool_model_spec::SPEC_METADATA_KEY
    )]
    MissingSpec {
        /// The checkpoint path as given.
        path: PathBuf,
    },

    /// The checkpoint's spec metadata is present but does not parse or validate.
    #[error("checkpoint {} has an invalid model spec: {source}", path.display())]
    BadSpec {
        /// The checkpoint path as given.
        path: PathBuf,
        /// What is wrong with the spec.
        #[source]
        source: SpecError,
    },

    /// A spec handed in directly (in-memory export) fails validation.
    #[error("invalid model spec: {0}")]
    Spec(#[from] SpecError),

    /// A weight the spec's architecture needs is absent from the checkpoint (wrong
    /// backbone, or a truncated or renamed state dict).
    #[error("checkpoint has no tensor `{key}`")]
    MissingTensor {
        /// The checkpoint key, e.g. `head.conv5a.0.weight`.
        key: String,
    },

    /// A weight has a shape other than the spec implies (e.g. another class count).
    #[error("tensor `{key}` has shape {actual:?}, expected {expected:?}")]
    WrongShape {
        /// The checkpoint key.
        key: String,
        /// The shape the spec implies.
        expected: Vec<usize>,
        /// The shape stored in the checkpoint.
        actual: Vec<usize>,
    },

    /// A weight is not stored as float32 (checkpoints are read as F32 only; fp16 is an
    /// export option, not a checkpoint format).
    #[error("tensor `{key}` has dtype {actual}, expected F32")]
    WrongDtype {
        /// The checkpoint key.
        key: String,
        /// The stored dtype as safetensors names it (`F16`, `BF16`, ...).
        actual: String,
    },

    /// [`ExportOptions::opset`](crate::ExportOptions::opset) is outside
    /// [`MIN_OPSET`](crate::MIN_OPSET)..=[`MAX_OPSET`](crate::MAX_OPSET).
    #[error("unsupported opset {opset}: segtool exports opsets {min}..={max}")]
    UnsupportedOpset {
        /// The opset asked for.
        opset: i64,
        /// Lowest opset segtool writes.
        min: i64,
        /// Highest opset segtool writes.
        max: i64,
    },

    /// An attention form needs a newer opset than the one asked for (ONNX `Attention`
    /// exists from opset 23).
    #[error(
        "{module} attention as `{form}` needs opset >= {needed}, but opset {opset} was asked for"
    )]
    AttentionOpset {
        /// `PAM` or `CAM`.
        module: &'static str,
        /// The form's CLI name ([`AttentionForm::name`](crate::AttentionForm::name)).
        form: &'static str,
        /// The opset asked for.
        opset: i64,
        /// The lowest opset the form can be written in.
        needed: i64,
    },

    /// An attention form the target's runtime cannot import (ONNX Runtime's contrib
    /// `MultiHeadAttention` for TensorRT or tract).
    #[error("{module} attention as `{form}` cannot be loaded by the `{target}` target's runtime")]
    AttentionTarget {
        /// `PAM` or `CAM`.
        module: &'static str,
        /// The form's CLI name ([`AttentionForm::name`](crate::AttentionForm::name)).
        form: &'static str,
        /// The target's CLI name ([`ExportTarget::name`](crate::ExportTarget::name)).
        target: &'static str,
    },

    /// An option value or combination that makes no export (non-positive sizes, a zero
    /// batch, `keep_fp32` without `fp16`, an external data location that is not a plain
    /// file name); the message says which.
    #[error("invalid export option: {0}")]
    BadOption(String),

    /// A `keep_fp32` name selects no conv of the model.
    #[error(
        "--keep-fp32 `{name}` matches no layer of the model{}",
        if close.is_empty() { String::new() } else { format!(" (close: {})", close.join(", ")) }
    )]
    UnknownLayer {
        /// The name as given.
        name: String,
        /// Layer names of the model nearest to `name` (edit distance), best first.
        close: Vec<String>,
    },

    /// The serialised model would reach protobuf's 2 GiB message limit, which every
    /// ONNX parser enforces.
    #[error(
        "model is {bytes} bytes, over protobuf's 2 GiB message limit{}",
        if *external { " even with its large initialisers in external data" }
        else { " (export it with external data: `--external-data auto` / \
                `ExportOptions::with_external_data(ExternalData::Auto)`)" }
    )]
    TooLarge {
        /// Size of the model message (without a side file).
        bytes: u64,
        /// Whether the size was measured with external data already in use.
        external: bool,
    },

    /// An in-memory export ([`export_onnx_bytes`](crate::export_onnx_bytes),
    /// [`export_model`](crate::export_model)) would need a side file, which one buffer
    /// cannot return.
    #[error(
        "the model needs ONNX external data ({reason}), which an in-memory export \
         (`export_onnx_bytes` / `export_model`) cannot return in one buffer: export to a \
         file (`export_onnx`, CLI `--onnx`), take both buffers from `export_onnx_parts`, \
         or set `ExportOptions::external_data` to `Never` (`--external-data never`)"
    )]
    ExternalDataInMemory {
        /// Why external data is needed: the `Always` option, or the inline size.
        reason: String,
    },

    /// Writing the model or its side file failed (no such directory, a path under a
    /// regular file, a full disk, ...).
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file being written (the model or its `.data` side file).
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
