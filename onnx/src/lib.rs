//! The exported file, owned in one place.
//!
//! Every segtool stage meets at the ONNX file `segtool export` writes: the exporter and
//! the INT8 calibration write it, the runtime, Triton support and the C library read it.
//! This crate is the contract between them:
//!
//! - [`proto`]: the subset of `onnx.proto` segtool reads and writes, as prost messages
//!   (field numbers live here and nowhere else);
//! - [`builders`]: attribute and tensor constructors;
//! - [`ModelFile::read`]: one streaming pass that reads the metadata and the graph's
//!   inputs and outputs without loading the weights, into the value every reader takes;
//! - [`card`]: the model card, what a file segtool did not write needs beside its graph;
//! - [`copy_with_metadata`]: a copy of a model with metadata entries set, nothing else
//!   touched;
//! - [`metadata`]: the key names and their values as types ([`Metadata`],
//!   [`IoContract`], [`TrtProfileHint`]); a value that is present but malformed is an
//!   error naming its key.
//!
//! ```
//! use segtool_onnx::{InputLayout, IoContract, Metadata, OutputKind, TrtProfileHint};
//! # use segtool_model_spec::{BackboneSpec, ModelSpec};
//! # let spec = ModelSpec::new("tiny", BackboneSpec::tiny(), vec!["a".into(), "b".into()]);
//! let mut meta = Metadata::new(spec);
//! meta.contract = Some(IoContract { input: InputLayout::NhwcU8, output: OutputKind::Mask });
//! let props = meta.to_props();
//! let back = Metadata::from_props("m.onnx".as_ref(), &props)?;
//! assert_eq!(back, meta);
//! // A hint with a renamed field is refused, naming the key.
//! let props = [props, vec![("segtool.trt_profile".into(), r#"{"input":"image"}"#.into())]].concat();
//! let err = Metadata::from_props("m.onnx".as_ref(), &props).unwrap_err();
//! assert!(err.to_string().contains("segtool.trt_profile"));
//! # let _: Option<TrtProfileHint> = None;
//! # Ok::<(), segtool_onnx::ModelFileError>(())
//! ```

#![warn(missing_docs)]

pub mod builders;
pub mod card;
pub mod error;
pub mod metadata;
pub mod proto;
mod read;
mod rewrite;
mod scan;
#[cfg(test)]
mod tests;

pub use error::{ModelFileError, Result};
pub use metadata::{InputLayout, IoContract, Metadata, OutputKind, TrtProfileHint};
pub use read::{read_io, read_props, ModelFile, ModelIo, TensorInfo};
pub use rewrite::{copy_with_graph_additions, copy_with_metadata, default_opset};
