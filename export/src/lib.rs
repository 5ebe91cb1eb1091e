//! segtool checkpoint (.safetensors) -> ONNX.
//!
//! The ONNX protobuf is written with prost from the message definitions of
//! `segtool-onnx` (the crate that owns the file format, re-exported as [`proto`]), so exporting needs neither Python, libtorch nor protoc. The graph is
//! DANet at inference: dilated ResNet ([`backbone`]), the dual-attention head ([`head`],
//! [`attention`]) and a bilinear resize to the input size, with every BatchNorm folded
//! into its conv ([`fold`]). Input `image` is float32 `[batch, 3, height, width]`
//! (normalised RGB), output `logits` float32 `[batch, classes, height, width]`; batch and
//! image size are dynamic. The model spec travels in `metadata_props` under
//! [`segtool_model_spec::SPEC_METADATA_KEY`], so an .onnx file is self-describing.
//!
//! Weights that would take the model past protobuf's 2 GiB limit go to a side file
//! `<model>.onnx.data` as ONNX external data ([`external`], [`ExternalData`]).

#![warn(missing_docs)]

mod attention;
mod backbone;
pub mod budget;
mod builder;
mod conv;
mod doc;
mod error;
mod export_provider;
pub mod external;
mod fold;
mod head;
mod layer_names;
mod model;
mod options;
mod preprocess;
mod provider;
#[cfg(test)]
mod testutil;
mod weights;

/// The metadata keys and values every reader agrees on.
pub use segtool_onnx::metadata::{
    CHECKPOINT_SHA256_KEY, EXPORT_METADATA_KEY, INPUT_LAYOUT_KEY, LAYOUT_NCHW_F32, LAYOUT_NHWC_U8,
    OUTPUT_KIND_KEY, OUTPUT_STRIDE_KEY, SPEC_METADATA_KEY, TRT_PROFILE_KEY,
};
/// The ONNX messages, from the crate that owns the file format.
pub use segtool_onnx::proto;

pub use attention::PAM_QUERY_BLOCKS;
pub use error::ExportError;
pub use export_provider::ExportProvider;
pub use external::{ExternalData, ExternalDataFile};
pub use options::{
    AttentionForm, ExportOptions, ExportTarget, DEFAULT_EXTERNAL_THRESHOLD, TRACT_CONV_SPLIT_DEPTH,
};
pub use provider::{AttentionChoice, TargetRequest};

pub use model::{
    export_model, export_onnx, export_onnx_bytes, export_onnx_parts, sha256_hex, ExportParts,
    ExportReport, ExternalReport, ATTENTION_OPSET, AUX_OUTPUT_NAME, DEFAULT_MAX_SIZE,
    DEFAULT_OPSET, INPUT_NAME, MASK_OUTPUT_NAME, MAX_OPSET, MIN_OPSET, MS_DOMAIN, OUTPUT_NAME,
    TRT_MAX_BATCH,
};

#[cfg(test)]
use model::{build, Dest};

#[cfg(test)]
mod blocked_tests;
#[cfg(test)]
mod deploy_tests;
#[cfg(test)]
mod external_tests;
#[cfg(test)]
mod keep_fp32_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod provider_tests;
#[cfg(test)]
mod serving_tests;
#[cfg(test)]
mod tests;
