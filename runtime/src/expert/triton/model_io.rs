//! Reading a model's graph inputs and outputs ([`model_io`]) without loading its weights:
//! `segtool-onnx`'s streaming reader, which owns the file format. Used by the Triton
//! support; `OrtOptions::with_fixed_input_size` takes the same [`ModelIo`] from the
//! [`ModelFile`](segtool_onnx::ModelFile) a segmenter opened.

use std::path::Path;

use crate::error::Result;

pub use segtool_onnx::{ModelIo, TensorInfo};

/// Reads the graph's inputs and outputs from an ONNX file without loading the weights.
pub fn model_io(path: impl AsRef<Path>) -> Result<ModelIo> {
    Ok(segtool_onnx::read_io(path)?)
}
