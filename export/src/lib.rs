//! segtool checkpoint (.safetensors) -> ONNX.
//!
//! The ONNX protobuf is written with prost from message definitions this crate owns
//! ([`proto`]), so exporting needs neither Python, libtorch nor protoc. The graph is
//! DANet at inference: dilated ResNet ([`backbone`]), the dual-attention head ([`head`],
//! [`attention`]) and a bilinear resize to the input size, with every BatchNorm folded
//! into its conv ([`fold`]). Input `image` is float32 `[batch, 3, height, width]`
//! (normalised RGB), output `logits` float32 `[batch, classes, height, width]`; batch and
//! image size are dynamic. The model spec travels in `metadata_props` under
//! [`segtool_core::SPEC_METADATA_KEY`], so an .onnx file is self-describing.

mod attention;
mod backbone;
mod builder;
mod conv;
mod error;
mod fold;
mod head;
pub mod proto;
#[cfg(test)]
mod testutil;
mod weights;

use std::path::Path;

use prost::Message;
use safetensors::SafeTensors;
use segtool_core::{ModelSpec, SPEC_METADATA_KEY};

pub use error::ExportError;

use builder::GraphBuilder;
use conv::Ctx;
use proto::{DataType, Dim, GraphProto, ModelProto, OperatorSetIdProto, StringStringEntryProto};
use weights::Weights;

/// Opset written unless asked otherwise: old enough for every maintained runtime.
pub const DEFAULT_OPSET: i64 = 17;
/// Range of default-domain opsets the emitted ops are valid in (Softmax/Reshape/Resize
/// semantics used here date from opset 13).
pub const MIN_OPSET: i64 = 13;
pub const MAX_OPSET: i64 = 23;

/// Name of the graph input (normalised RGB, NCHW float32).
pub const INPUT_NAME: &str = "image";
/// Name of the graph output (class logits at input resolution).
pub const OUTPUT_NAME: &str = "logits";

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// Default-domain opset, [`MIN_OPSET`]..=[`MAX_OPSET`]; 17 by default.
    pub opset: i64,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self {
            opset: DEFAULT_OPSET,
        }
    }
}

impl ExportOptions {
    pub fn with_opset(mut self, opset: i64) -> Self {
        self.opset = opset;
        self
    }
}

/// What an export produced.
#[derive(Clone, Debug)]
pub struct ExportReport {
    pub nodes: usize,
    pub initializers: usize,
    /// Size of the serialised model.
    pub bytes: u64,
    /// BatchNorm layers folded into convolutions.
    pub folded_bn: usize,
    pub spec: ModelSpec,
}

/// Exports the checkpoint at `checkpoint` (safetensors with the spec in its metadata) to
/// an ONNX file at `out`, written atomically (temp file in the same directory, fsync,
/// rename): an interrupted export never leaves a torn model behind.
pub fn export_onnx(
    checkpoint: &Path,
    out: &Path,
    opts: &ExportOptions,
) -> Result<ExportReport, ExportError> {
    let path = checkpoint.to_path_buf();
    let bytes = std::fs::read(checkpoint).map_err(|source| match source.kind() {
        std::io::ErrorKind::NotFound => ExportError::NotFound { path: path.clone() },
        _ => ExportError::Read {
            path: path.clone(),
            source,
        },
    })?;
    let not_st = |e: safetensors::SafeTensorError| ExportError::NotSafetensors {
        path: path.clone(),
        reason: e.to_string(),
    };
    let (_, header) = SafeTensors::read_metadata(&bytes).map_err(not_st)?;
    let json = header
        .metadata()
        .as_ref()
        .and_then(|m| m.get(SPEC_METADATA_KEY))
        .ok_or_else(|| ExportError::MissingSpec { path: path.clone() })?;
    let spec = ModelSpec::from_json(json).map_err(|source| ExportError::BadSpec {
        path: path.clone(),
        source,
    })?;
    let tensors = SafeTensors::deserialize(&bytes).map_err(not_st)?;
    let (onnx, report) = export_onnx_bytes(&tensors, &spec, opts)?;
    segtool_core::io::write_atomic(out, &onnx).map_err(|source| ExportError::Write {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(report)
}

/// In-memory form of [`export_onnx`]: the serialised ModelProto and its report.
pub fn export_onnx_bytes(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    if !(MIN_OPSET..=MAX_OPSET).contains(&opts.opset) {
        return Err(ExportError::UnsupportedOpset {
            opset: opts.opset,
            min: MIN_OPSET,
            max: MAX_OPSET,
        });
    }
    spec.validate()?;

    let mut ctx = Ctx::new(GraphBuilder::new(opts.opset), Weights::new(tensors));
    // Claim the interface names first so no internal value can take them.
    let image = ctx.g.unique(INPUT_NAME);
    let logits = ctx.g.unique(OUTPUT_NAME);
    let feat = backbone::backbone(&mut ctx, &spec.backbone, &image)?;
    let low = head::head(&mut ctx, spec, &feat)?;
    head::upsample_into(&mut ctx, &low, &image, &logits);

    let folded_bn = ctx.folded_bn;
    let (node, initializer) = ctx.g.finish();
    let (nodes, initializers) = (node.len(), initializer.len());
    let classes = spec.num_classes() as i64;
    let graph = GraphProto {
        name: "danet".into(),
        node,
        initializer,
        input: vec![proto::tensor_value_info(
            &image,
            DataType::Float,
            &[
                Dim::Named("batch"),
                Dim::Fixed(3),
                Dim::Named("height"),
                Dim::Named("width"),
            ],
        )],
        output: vec![proto::tensor_value_info(
            &logits,
            DataType::Float,
            &[
                Dim::Named("batch"),
                Dim::Fixed(classes),
                Dim::Named("height"),
                Dim::Named("width"),
            ],
        )],
        ..Default::default()
    };
    let model = ModelProto {
        ir_version: ir_version_for(opts.opset),
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: opts.opset,
        }],
        producer_name: "segtool".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc_string(spec),
        graph: Some(graph),
        metadata_props: vec![StringStringEntryProto {
            key: SPEC_METADATA_KEY.into(),
            value: spec.to_json(),
        }],
        ..Default::default()
    };
    let bytes = model.encode_to_vec();
    // Protobuf parsers (onnxruntime's included) refuse messages of 2 GiB or more.
    if bytes.len() >= i32::MAX as usize {
        return Err(ExportError::TooLarge {
            bytes: bytes.len() as u64,
        });
    }
    let report = ExportReport {
        nodes,
        initializers,
        bytes: bytes.len() as u64,
        folded_bn,
        spec: spec.clone(),
    };
    Ok((bytes, report))
}

/// The IR version released together with `opset` (ONNX's versioning table), so that
/// checkers and runtimes accept the pair.
fn ir_version_for(opset: i64) -> i64 {
    match opset {
        ..=14 => 7,
        15..=18 => 8,
        19..=20 => 9,
        21..=22 => 10,
        _ => 11,
    }
}

fn doc_string(spec: &ModelSpec) -> String {
    format!(
        "DANet ({}, output stride {}) semantic segmentation, {} classes, exported by segtool. \
         Input `{INPUT_NAME}`: float32 [batch, 3, height, width], RGB in [0, 1] normalised as \
         (x - mean) / std with mean {:?}, std {:?}. Output `{OUTPUT_NAME}`: float32 \
         [batch, classes, height, width] class scores (argmax over axis 1 gives labels). \
         Model spec JSON in metadata_props[\"{SPEC_METADATA_KEY}\"].",
        spec.backbone_name,
        spec.backbone.output_stride,
        spec.num_classes(),
        spec.mean,
        spec.std
    )
}

#[cfg(test)]
mod tests;
