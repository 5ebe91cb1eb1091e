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

/// Domain of ONNX Runtime's contrib operators (`MultiHeadAttention`).
pub const MS_DOMAIN: &str = "com.microsoft";
/// Opset that introduced ONNX `Attention` (needs `ir_version` 11).
pub const ATTENTION_OPSET: i64 = 23;
/// metadata_props key holding the export options (JSON), next to the spec.
pub const EXPORT_METADATA_KEY: &str = "segtool.export";

/// How one of DANet's attention modules is written into the graph. All three compute
/// the same function (PAM: attention(Q, K: B x N x C/8, V: B x N x C, scale 1); CAM:
/// attention(Q = -X, K = V = X over C tokens of length N, scale 1)); they differ in which
/// runtimes import them and how fast / how much memory those take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AttentionForm {
    /// MatMul / Softmax / MatMul exactly as DANet v0.5.0 computes it; any opset >= 13,
    /// every runtime. Materialises the N x N (PAM) / C x C (CAM) energies.
    Decomposed,
    /// ONNX `Attention` (opset 23, `ir_version` 11), 3D inputs with
    /// `q_num_heads = kv_num_heads = 1`, `scale = 1`. ORT >= 1.23, TensorRT >= 10.14, tract.
    OnnxAttention,
    /// ONNX Runtime's contrib `com.microsoft.MultiHeadAttention` (num_heads 1, scale 1,
    /// 3D inputs, V hidden size may differ from Q/K's). ONNX Runtime only.
    MsMultiHeadAttention,
}

impl AttentionForm {
    pub const ALL: [AttentionForm; 3] = [
        AttentionForm::Decomposed,
        AttentionForm::OnnxAttention,
        AttentionForm::MsMultiHeadAttention,
    ];

    /// CLI / metadata spelling: `decomposed`, `onnx`, `ms-mha`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionForm::Decomposed => "decomposed",
            AttentionForm::OnnxAttention => "onnx",
            AttentionForm::MsMultiHeadAttention => "ms-mha",
        }
    }

    /// Lowest default-domain opset the form can be written in.
    pub fn min_opset(self) -> i64 {
        match self {
            AttentionForm::OnnxAttention => ATTENTION_OPSET,
            _ => MIN_OPSET,
        }
    }
}

impl std::fmt::Display for AttentionForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for AttentionForm {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "decomposed" => Ok(AttentionForm::Decomposed),
            "onnx" | "attention" => Ok(AttentionForm::OnnxAttention),
            "ms-mha" | "mha" => Ok(AttentionForm::MsMultiHeadAttention),
            _ => Err(format!(
                "unknown attention form `{s}` (expected decomposed, onnx or ms-mha)"
            )),
        }
    }
}

/// The runtime an export is meant for; picks the attention forms and the opset.
///
/// Defaults, chosen by measurement on ONNX Runtime 1.31.1 CPU, 2 intra-op threads
/// (`tests/reference/bench_attention_forms.py`, median of 5 runs, one attention alone):
///
/// | module (size)               | decomposed        | `Attention`-23    | MS `MultiHeadAttention` |
/// |-----------------------------|-------------------|-------------------|-------------------------|
/// | PAM N=4096, d 64/64/512     | 432 ms / 166 MB   | 399 ms / 222 MB   | 397 ms / 111 MB         |
/// | PAM N=16384 (issue 6)       | 1.36 s / 1.26 GB  | 4.07 s / 2.25 GB  | 1.28 s / 0.22 GB        |
/// | CAM C=512, N=4096           |  93 ms / 107 MB   | 163 ms / 106 MB   | 184 ms / 131 MB         |
/// | CAM C=512, N=16384          | 315 ms / 208 MB   | 437 ms / 236 MB   | 4.51 s / 305 MB         |
///
/// CAM's C x C energy is small (1 MB at C=512) so nothing is gained by fusing it, and
/// ORT's fused kernels are slower on its long (N) head dimension: the `ort` target keeps
/// CAM decomposed and fuses PAM into `MultiHeadAttention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportTarget {
    /// ONNX Runtime (CPU/CUDA): PAM as `com.microsoft.MultiHeadAttention`, CAM
    /// decomposed, opset 17.
    Ort,
    /// TensorRT >= 10.14 (directly or as ORT's TensorRT EP): ONNX `Attention`-23 for
    /// both (TensorRT has no importer for contrib ops), opset 23.
    TensorRt,
    /// tract: ONNX `Attention`-23 for both (tract lowers it to its SDPA), opset 23.
    Tract,
    /// Any runtime: MatMul/Softmax/MatMul, opset 17 (what `ExportOptions::default()` gives).
    Legacy,
}

impl ExportTarget {
    pub const ALL: [ExportTarget; 4] = [
        ExportTarget::Ort,
        ExportTarget::TensorRt,
        ExportTarget::Tract,
        ExportTarget::Legacy,
    ];

    /// CLI / metadata spelling: `ort`, `tensorrt`, `tract`, `legacy`.
    pub fn name(self) -> &'static str {
        match self {
            ExportTarget::Ort => "ort",
            ExportTarget::TensorRt => "tensorrt",
            ExportTarget::Tract => "tract",
            ExportTarget::Legacy => "legacy",
        }
    }

    /// Default (PAM, CAM) forms for the target.
    pub fn attention(self) -> (AttentionForm, AttentionForm) {
        use AttentionForm::*;
        match self {
            ExportTarget::Ort => (MsMultiHeadAttention, Decomposed),
            ExportTarget::TensorRt | ExportTarget::Tract => (OnnxAttention, OnnxAttention),
            ExportTarget::Legacy => (Decomposed, Decomposed),
        }
    }

    /// Whether the target's runtime can import `form` at all.
    pub fn supports(self, form: AttentionForm) -> bool {
        !(form == AttentionForm::MsMultiHeadAttention
            && matches!(self, ExportTarget::TensorRt | ExportTarget::Tract))
    }
}

impl std::fmt::Display for ExportTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ExportTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ort" | "onnxruntime" => Ok(ExportTarget::Ort),
            "tensorrt" | "trt" => Ok(ExportTarget::TensorRt),
            "tract" => Ok(ExportTarget::Tract),
            "legacy" => Ok(ExportTarget::Legacy),
            _ => Err(format!(
                "unknown export target `{s}` (expected ort, tensorrt, tract or legacy)"
            )),
        }
    }
}

/// What to export. `ExportOptions::default()` is the `legacy` profile (decomposed
/// attention, opset 17), which every runtime loads; [`ExportOptions::for_target`] picks a
/// runtime's fused profile, and [`ExportOptions::with_attention`] overrides its forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportOptions {
    /// Default-domain opset, [`MIN_OPSET`]..=[`MAX_OPSET`]; 17 by default, at least
    /// [`ATTENTION_OPSET`] when a module uses [`AttentionForm::OnnxAttention`].
    pub opset: i64,
    /// The runtime the export is meant for (recorded in metadata; restricts forms).
    pub target: ExportTarget,
    /// Form of the position attention module (`head.sa`).
    pub pam: AttentionForm,
    /// Form of the channel attention module (`head.sc`).
    pub cam: AttentionForm,
}

impl Default for ExportOptions {
    fn default() -> Self {
        Self::for_target(ExportTarget::Legacy)
    }
}

impl ExportOptions {
    /// The target's default profile (see [`ExportTarget`]).
    pub fn for_target(target: ExportTarget) -> Self {
        let (pam, cam) = target.attention();
        Self {
            opset: DEFAULT_OPSET,
            target,
            pam,
            cam,
        }
        .raise_opset_for_forms()
    }

    pub fn with_opset(mut self, opset: i64) -> Self {
        self.opset = opset;
        self
    }

    /// Uses `form` for both attention modules (raising the opset to 23 for ONNX
    /// `Attention`).
    pub fn with_attention(self, form: AttentionForm) -> Self {
        self.with_pam_attention(form).with_cam_attention(form)
    }

    pub fn with_pam_attention(mut self, form: AttentionForm) -> Self {
        self.pam = form;
        self.raise_opset_for_forms()
    }

    pub fn with_cam_attention(mut self, form: AttentionForm) -> Self {
        self.cam = form;
        self.raise_opset_for_forms()
    }

    fn raise_opset_for_forms(mut self) -> Self {
        self.opset = self
            .opset
            .max(self.pam.min_opset())
            .max(self.cam.min_opset());
        self
    }

    /// Whether some node comes from ONNX Runtime's `com.microsoft` domain.
    pub fn uses_ms_domain(&self) -> bool {
        [self.pam, self.cam].contains(&AttentionForm::MsMultiHeadAttention)
    }

    /// The options as written to `metadata_props[EXPORT_METADATA_KEY]`.
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "target": self.target.name(),
            "opset": self.opset,
            "pam_attention": self.pam.name(),
            "cam_attention": self.cam.name(),
        })
        .to_string()
    }

    fn validate(&self) -> Result<(), ExportError> {
        if !(MIN_OPSET..=MAX_OPSET).contains(&self.opset) {
            return Err(ExportError::UnsupportedOpset {
                opset: self.opset,
                min: MIN_OPSET,
                max: MAX_OPSET,
            });
        }
        for (module, form) in [("PAM", self.pam), ("CAM", self.cam)] {
            if self.opset < form.min_opset() {
                return Err(ExportError::AttentionOpset {
                    module,
                    form: form.name(),
                    opset: self.opset,
                    needed: form.min_opset(),
                });
            }
            if !self.target.supports(form) {
                return Err(ExportError::AttentionTarget {
                    module,
                    form: form.name(),
                    target: self.target.name(),
                });
            }
        }
        Ok(())
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
    opts.validate()?;
    spec.validate()?;

    let mut ctx = Ctx::new(GraphBuilder::new(opts.opset), Weights::new(tensors));
    // Claim the interface names first so no internal value can take them.
    let image = ctx.g.unique(INPUT_NAME);
    let logits = ctx.g.unique(OUTPUT_NAME);
    let feat = backbone::backbone(&mut ctx, &spec.backbone, &image)?;
    let low = head::head(&mut ctx, spec, &feat, opts)?;
    head::upsample_into(&mut ctx, &low, &image, &logits);

    let folded_bn = ctx.folded_bn;
    let mut opset_import = vec![OperatorSetIdProto {
        domain: String::new(),
        version: opts.opset,
    }];
    opset_import.extend(ctx.g.domains().map(|d| OperatorSetIdProto {
        domain: d.to_string(),
        version: 1,
    }));
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
        opset_import,
        producer_name: "segtool".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc_string(spec),
        graph: Some(graph),
        metadata_props: vec![
            StringStringEntryProto {
                key: SPEC_METADATA_KEY.into(),
                value: spec.to_json(),
            },
            StringStringEntryProto {
                key: EXPORT_METADATA_KEY.into(),
                value: opts.to_json(),
            },
        ],
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
mod profile_tests;
#[cfg(test)]
mod tests;
