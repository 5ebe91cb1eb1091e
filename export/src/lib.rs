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
pub mod budget;
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
/// Name of the graph output under `--argmax` (class map at input resolution).
pub const MASK_OUTPUT_NAME: &str = "mask";

/// metadata_props keys written next to the spec and the export options.
pub const INPUT_LAYOUT_KEY: &str = "segtool.input_layout";
pub const OUTPUT_KIND_KEY: &str = "segtool.output";
pub const OUTPUT_STRIDE_KEY: &str = "segtool.output_stride";
pub const CHECKPOINT_SHA256_KEY: &str = "segtool.checkpoint_sha256";
pub const TRT_PROFILE_KEY: &str = "segtool.trt_profile";
/// `segtool.input_layout` values.
pub const LAYOUT_NCHW_F32: &str = "NCHW float32 normalised";
pub const LAYOUT_NHWC_U8: &str = "NHWC uint8 RGB";
/// Largest image expected by default (Cityscapes full frames): TensorRT profile hints
/// and the attention memory budget use it unless `--max-size` says otherwise.
pub const DEFAULT_MAX_SIZE: (i64, i64) = (1024, 2048);
/// Largest batch written into the TensorRT profile hint of a dynamic-batch export.
pub const TRT_MAX_BATCH: i64 = 8;

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
    /// Weights and compute in fp16 (initialisers FLOAT16), attention energies and
    /// softmax in fp32; the interface (input, logits) stays float32.
    pub fp16: bool,
    /// Output `mask` = ArgMax over classes of the resized logits, uint8 [batch, height,
    /// width] (int64 when there are more than 256 classes) instead of `logits`.
    pub argmax: bool,
    /// Input `image` is uint8 NHWC RGB [batch, height, width, 3]; the graph casts,
    /// transposes and normalises ((x/255 - mean)/std as one Mul + Add).
    pub preprocess: bool,
    /// Fixed (height, width) instead of the `height` / `width` symbols (static engines).
    pub input_size: Option<(i64, i64)>,
    /// Fixed batch size instead of the `batch` symbol.
    pub batch: Option<i64>,
    /// Largest expected (height, width) of a dynamic export: TensorRT profile hints and
    /// the attention memory budget ([`budget`]).
    pub max_size: (i64, i64),
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
            fp16: false,
            argmax: false,
            preprocess: false,
            input_size: None,
            batch: None,
            max_size: DEFAULT_MAX_SIZE,
        }
        .raise_opset_for_forms()
    }

    pub fn with_fp16(mut self, on: bool) -> Self {
        self.fp16 = on;
        self
    }

    pub fn with_argmax(mut self, on: bool) -> Self {
        self.argmax = on;
        self
    }

    pub fn with_preprocess(mut self, on: bool) -> Self {
        self.preprocess = on;
        self
    }

    /// Static (height, width).
    pub fn with_input_size(mut self, size: Option<(i64, i64)>) -> Self {
        self.input_size = size;
        self
    }

    /// Static batch size.
    pub fn with_batch(mut self, batch: Option<i64>) -> Self {
        self.batch = batch;
        self
    }

    pub fn with_max_size(mut self, size: (i64, i64)) -> Self {
        self.max_size = size;
        self
    }

    /// `segtool.input_layout` of the export.
    pub fn input_layout(&self) -> &'static str {
        if self.preprocess {
            LAYOUT_NHWC_U8
        } else {
            LAYOUT_NCHW_F32
        }
    }

    /// `segtool.output` of the export: `logits` or `mask`.
    pub fn output_kind(&self) -> &'static str {
        if self.argmax {
            MASK_OUTPUT_NAME
        } else {
            OUTPUT_NAME
        }
    }

    /// The standard interface: float NCHW normalised input, float logits output (what
    /// the runtime's `Segmenter` and `--verify` expect).
    pub fn is_standard_interface(&self) -> bool {
        !self.argmax && !self.preprocess
    }

    /// TensorRT optimisation-profile hints for the dynamic axes (None for a fully static
    /// export): JSON with the input name, its layout, min/opt/max shapes and the
    /// equivalent `trtexec` flags. min is 1 x 128x128, opt is 1 x half of `max_size`
    /// (rounded up to the output stride), max is [`TRT_MAX_BATCH`] (or the static batch)
    /// x `max_size`.
    pub fn trt_profile(&self, output_stride: i64) -> Option<String> {
        if self.input_size.is_some() && self.batch.is_some() {
            return None;
        }
        let round = |v: i64| (v + output_stride - 1) / output_stride * output_stride;
        let (mh, mw) = self.max_size;
        let hw = |b: i64, h: i64, w: i64| -> Vec<i64> {
            let b = self.batch.unwrap_or(b);
            let (h, w) = self.input_size.unwrap_or((h, w));
            if self.preprocess {
                vec![b, h, w, 3]
            } else {
                vec![b, 3, h, w]
            }
        };
        let min = hw(1, 128.min(mh), 128.min(mw));
        let opt = hw(1, round(mh / 2).min(mh), round(mw / 2).min(mw));
        let max = hw(TRT_MAX_BATCH, mh, mw);
        let dims = |v: &[i64]| {
            v.iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join("x")
        };
        let trtexec = format!(
            "--minShapes={INPUT_NAME}:{} --optShapes={INPUT_NAME}:{} --maxShapes={INPUT_NAME}:{}",
            dims(&min),
            dims(&opt),
            dims(&max)
        );
        Some(
            serde_json::json!({
                "input": INPUT_NAME,
                "layout": if self.preprocess { "NHWC" } else { "NCHW" },
                "min": min,
                "opt": opt,
                "max": max,
                "trtexec": trtexec,
            })
            .to_string(),
        )
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
            "fp16": self.fp16,
            "argmax": self.argmax,
            "preprocess": self.preprocess,
            "input_size": self.input_size.map(|(h, w)| [h, w]),
            "batch": self.batch,
            "max_size": [self.max_size.0, self.max_size.1],
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
        if let Some((h, w)) = self.input_size {
            if h < 1 || w < 1 {
                return Err(ExportError::BadOption(format!(
                    "input size {h}x{w}: both sides must be positive"
                )));
            }
        }
        if matches!(self.batch, Some(b) if b < 1) {
            return Err(ExportError::BadOption("batch must be at least 1".into()));
        }
        if self.max_size.0 < 1 || self.max_size.1 < 1 {
            return Err(ExportError::BadOption(format!(
                "max size {}x{}: both sides must be positive",
                self.max_size.0, self.max_size.1
            )));
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
    let sha = sha256_hex(&bytes);
    let (onnx, report) = export_model(&tensors, &spec, opts, Some(&sha))?;
    segtool_core::io::write_atomic(out, &onnx).map_err(|source| ExportError::Write {
        path: out.to_path_buf(),
        source,
    })?;
    Ok(report)
}

/// Lower-case hex sha256 of `bytes` (the checkpoint hash written to metadata).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// In-memory form of [`export_onnx`]: the serialised ModelProto and its report. No
/// checkpoint file, so no `segtool.checkpoint_sha256` (see [`export_model`]).
pub fn export_onnx_bytes(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    export_model(tensors, spec, opts, None)
}

/// [`export_onnx_bytes`] recording `checkpoint_sha256` (hex) in the metadata.
pub fn export_model(
    tensors: &SafeTensors,
    spec: &ModelSpec,
    opts: &ExportOptions,
    checkpoint_sha256: Option<&str>,
) -> Result<(Vec<u8>, ExportReport), ExportError> {
    opts.validate()?;
    spec.validate()?;

    let mut ctx = Ctx::new(GraphBuilder::new(opts.opset), Weights::new(tensors));
    ctx.fp16 = opts.fp16;
    let classes = spec.num_classes() as i64;
    // Claim the interface names first so no internal value can take them.
    let image = ctx.g.unique(INPUT_NAME);
    let output = ctx.g.unique(opts.output_kind());
    // `nchw`: the float32 normalised NCHW image (the graph input itself by default).
    let nchw = if opts.preprocess {
        preprocess(&mut ctx, spec, &image)
    } else {
        image.clone()
    };
    let net_in = if opts.fp16 {
        ctx.cast(&nchw, DataType::Float16, "image_fp16")
    } else {
        nchw.clone()
    };
    let feat = backbone::backbone(&mut ctx, &spec.backbone, &net_in)?;
    let low = head::head(&mut ctx, spec, &feat, opts)?;
    // fp16: back to float32 at feature resolution, so the resize (and argmax) see fp32.
    let low = if opts.fp16 {
        ctx.cast(&low, DataType::Float, "head.conv8.1_fp32")
    } else {
        low
    };
    if opts.argmax {
        let logits = ctx.g.unique(OUTPUT_NAME);
        head::upsample_into(&mut ctx, &low, &nchw, &logits);
        let attrs = vec![
            builder::attr_int("axis", 1),
            builder::attr_int("keepdims", 0),
        ];
        if classes <= 256 {
            let idx = ctx.g.add_node("ArgMax", &[&logits], attrs, "argmax");
            ctx.g.add_node_into(
                "Cast",
                &[&idx],
                vec![builder::attr_int("to", DataType::Uint8 as i64)],
                &output,
            );
        } else {
            ctx.g.add_node_into("ArgMax", &[&logits], attrs, &output);
        }
    } else {
        head::upsample_into(&mut ctx, &low, &nchw, &output);
    }

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
    let batch = opts.batch.map_or(Dim::Named("batch"), Dim::Fixed);
    let (height, width) = opts
        .input_size
        .map_or((Dim::Named("height"), Dim::Named("width")), |(h, w)| {
            (Dim::Fixed(h), Dim::Fixed(w))
        });
    let input = if opts.preprocess {
        proto::tensor_value_info(
            &image,
            DataType::Uint8,
            &[batch, height, width, Dim::Fixed(3)],
        )
    } else {
        proto::tensor_value_info(
            &image,
            DataType::Float,
            &[batch, Dim::Fixed(3), height, width],
        )
    };
    let output = if opts.argmax {
        let dt = if classes <= 256 {
            DataType::Uint8
        } else {
            DataType::Int64
        };
        proto::tensor_value_info(&output, dt, &[batch, height, width])
    } else {
        proto::tensor_value_info(
            &output,
            DataType::Float,
            &[batch, Dim::Fixed(classes), height, width],
        )
    };
    let graph = GraphProto {
        name: "danet".into(),
        node,
        initializer,
        input: vec![input],
        output: vec![output],
        ..Default::default()
    };
    let entry = |k: &str, v: String| StringStringEntryProto {
        key: k.into(),
        value: v,
    };
    let mut metadata_props = vec![
        entry(SPEC_METADATA_KEY, spec.to_json()),
        entry(EXPORT_METADATA_KEY, opts.to_json()),
        entry(INPUT_LAYOUT_KEY, opts.input_layout().into()),
        entry(OUTPUT_KIND_KEY, opts.output_kind().into()),
        entry(OUTPUT_STRIDE_KEY, spec.backbone.output_stride.to_string()),
    ];
    if let Some(sha) = checkpoint_sha256 {
        metadata_props.push(entry(CHECKPOINT_SHA256_KEY, sha.into()));
    }
    if let Some(p) = opts.trt_profile(spec.backbone.output_stride) {
        metadata_props.push(entry(TRT_PROFILE_KEY, p));
    }
    let model = ModelProto {
        ir_version: ir_version_for(opts.opset),
        opset_import,
        producer_name: "segtool".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        doc_string: doc_string(spec, opts),
        graph: Some(graph),
        metadata_props,
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

/// `--preprocess`: uint8 NHWC RGB `image` -> Cast -> Transpose (NCHW) -> one Mul + Add
/// computing (x/255 - mean)/std = x * 1/(255 std) + (-mean/std), per channel.
fn preprocess(ctx: &mut Ctx<'_, '_>, spec: &ModelSpec, image: &str) -> String {
    let scale: Vec<f32> = (0..3)
        .map(|c| (1.0f64 / (255.0 * spec.std[c] as f64)) as f32)
        .collect();
    let shift: Vec<f32> = (0..3)
        .map(|c| (-(spec.mean[c] as f64) / spec.std[c] as f64) as f32)
        .collect();
    let g = &mut ctx.g;
    let scale = g.add_initializer_f32("preprocess.scale", &[1, 3, 1, 1], &scale);
    let shift = g.add_initializer_f32("preprocess.shift", &[1, 3, 1, 1], &shift);
    let x = g.add_node(
        "Cast",
        &[image],
        vec![builder::attr_int("to", DataType::Float as i64)],
        "preprocess.float",
    );
    let x = g.add_node(
        "Transpose",
        &[&x],
        vec![builder::attr_ints("perm", &[0, 3, 1, 2])],
        "preprocess.nchw",
    );
    let x = g.add_node("Mul", &[&x, &scale], vec![], "preprocess.scaled");
    g.add_node("Add", &[&x, &shift], vec![], "preprocess.normalised")
}

fn doc_string(spec: &ModelSpec, opts: &ExportOptions) -> String {
    let mut s = legacy_doc_string(spec);
    if opts.preprocess {
        s.push_str(
            " With --preprocess the input is instead uint8 [batch, height, width, 3] RGB \
             (normalisation inside the graph).",
        );
    }
    if opts.argmax {
        s.push_str(&format!(
            " With --argmax the output is instead `{MASK_OUTPUT_NAME}` [batch, height, width], \
             the class index per pixel."
        ));
    }
    if opts.fp16 {
        s.push_str(" Weights and compute in fp16, attention energies and softmax in fp32.");
    }
    s
}

fn legacy_doc_string(spec: &ModelSpec) -> String {
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
mod deploy_tests;
#[cfg(test)]
mod profile_tests;
#[cfg(test)]
mod tests;
