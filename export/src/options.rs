//! What an export writes: the target runtime, the attention form per module, opset,
//! deployment variants (fp16, argmax, preprocess, static shapes), builder style.

use crate::{
    ExportError, ExternalData, ATTENTION_OPSET, DEFAULT_MAX_SIZE, DEFAULT_OPSET, INPUT_NAME,
    LAYOUT_NCHW_F32, LAYOUT_NHWC_U8, MASK_OUTPUT_NAME, MAX_OPSET, MIN_OPSET, OUTPUT_NAME,
    TRT_MAX_BATCH,
};

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
    /// PAM decomposed but split along the query axis into [`crate::PAM_QUERY_BLOCKS`]
    /// blocks (Slice / MatMul / Softmax over all keys / MatMul, then Concat): exact,
    /// 1/blocks of the N x N energy alive at a time; any opset >= 13, every runtime. For
    /// CAM (a C x C energy, small) it is the plain decomposed form.
    QueryBlocked,
}

impl AttentionForm {
    /// Every form, in CLI listing order.
    pub const ALL: [AttentionForm; 4] = [
        AttentionForm::Decomposed,
        AttentionForm::OnnxAttention,
        AttentionForm::MsMultiHeadAttention,
        AttentionForm::QueryBlocked,
    ];

    /// CLI / metadata spelling: `decomposed`, `onnx`, `ms-mha`, `blocked`.
    pub fn name(self) -> &'static str {
        match self {
            AttentionForm::Decomposed => "decomposed",
            AttentionForm::OnnxAttention => "onnx",
            AttentionForm::MsMultiHeadAttention => "ms-mha",
            AttentionForm::QueryBlocked => "blocked",
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
            "blocked" => Ok(AttentionForm::QueryBlocked),
            _ => Err(format!(
                "unknown attention form `{s}` (expected decomposed, onnx, ms-mha or blocked)"
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
/// CAM decomposed.
///
/// For PAM the isolated figures above did not hold inside the model. ORT's own profiler
/// on the whole ResNet-50 DANet OS8 (`bench/ort_profile.py`, 2 threads) put PAM as
/// `MultiHeadAttention` at 295 ms at 512x512 and 4.1-5.6 s at 1024x1024. The same PAM in
/// query blocks took 160 ms and 2.8 s (MatMul, Softmax and MatMul per block), with 1/16 of
/// the N x N energy alive at a time. So the `ort` target blocks PAM as well, on the CPU:
/// for ORT's CUDA EP ([`crate::ExportProvider::Cuda`]) PAM is `MultiHeadAttention`, whose
/// fused kernels never materialise N x N (not timed on a GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportTarget {
    /// ONNX Runtime, opset 17, plus the feature maps' symbolic shapes as `value_info` for
    /// ORT's fusions. CPU (the default): PAM in query blocks, CAM decomposed (the table
    /// above). CUDA ([`crate::ExportProvider::Cuda`]): PAM as
    /// `com.microsoft.MultiHeadAttention`, CAM decomposed.
    Ort,
    /// TensorRT >= 10.14 (directly or as ORT's TensorRT EP): ONNX `Attention`-23 for
    /// both (TensorRT has no importer for contrib ops), opset 23.
    TensorRt,
    /// tract: PAM query-blocked (tract 0.23.9 lowers `Attention`-23 to its flash kernel
    /// only when V's head size equals Q's; PAM's does not (C vs C/8), so `Attention` would
    /// materialise N x N), CAM decomposed (its C x C energy is small, and tract's flash
    /// kernel over 512 tokens of length N took 455 ms at 512x512 where MatMul/Softmax/MatMul
    /// took 64 ms), convs deeper than [`TRACT_CONV_SPLIT_DEPTH`] split along their input
    /// channels; opset 17.
    Tract,
    /// OpenVINO (`segtool infer --engine openvino`): both modules decomposed, opset 17.
    /// Measured on ResNet-50 DANet OS8 at 512x512 in OpenVINO 2026.4.1's CPU plugin (2
    /// threads, AMX, medians of 3 rounds of 5 runs, `segtool bench`), the forms were within
    /// 3% of each other in f32 (decomposed 1421 ms, query-blocked 1427, `Attention`-23
    /// 1391, MS `MultiHeadAttention` 1385) and decomposed was the fastest in bf16 (260 ms
    /// against 282, 285 and 289): the attention is a small share of the network there, and
    /// OpenVINO's transformations take MatMul/Softmax/MatMul as they come.
    OpenVino,
    /// Any runtime: MatMul/Softmax/MatMul, opset 17 (what `ExportOptions::default()` gives).
    Legacy,
}

impl ExportTarget {
    /// Every target, in CLI listing order.
    pub const ALL: [ExportTarget; 5] = [
        ExportTarget::Ort,
        ExportTarget::TensorRt,
        ExportTarget::Tract,
        ExportTarget::OpenVino,
        ExportTarget::Legacy,
    ];

    /// CLI / metadata spelling: `ort`, `tensorrt`, `tract`, `openvino`, `legacy`.
    pub fn name(self) -> &'static str {
        match self {
            ExportTarget::Ort => "ort",
            ExportTarget::TensorRt => "tensorrt",
            ExportTarget::Tract => "tract",
            ExportTarget::OpenVino => "openvino",
            ExportTarget::Legacy => "legacy",
        }
    }

    /// Default (PAM, CAM) forms for the target.
    pub fn attention(self) -> (AttentionForm, AttentionForm) {
        use AttentionForm::*;
        match self {
            ExportTarget::Ort => (QueryBlocked, Decomposed),
            ExportTarget::TensorRt => (OnnxAttention, OnnxAttention),
            ExportTarget::Tract => (QueryBlocked, Decomposed),
            ExportTarget::OpenVino | ExportTarget::Legacy => (Decomposed, Decomposed),
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
            "openvino" => Ok(ExportTarget::OpenVino),
            "legacy" => Ok(ExportTarget::Legacy),
            _ => Err(format!(
                "unknown export target `{s}` (expected ort, tensorrt, tract, openvino or legacy)"
            )),
        }
    }
}

/// Fields of [`ExportOptions::to_json`] that readers of the recorded choice use
/// ([`crate::AttentionChoice`]).
pub(crate) const TARGET_FIELD: &str = "target";
pub(crate) const PROVIDER_FIELD: &str = "provider";
pub(crate) const PAM_FIELD: &str = "pam_attention";
pub(crate) const CAM_FIELD: &str = "cam_attention";

/// Smallest initialiser (bytes of raw data) moved to the side file, as the `size_threshold`
/// default of onnx's `convert_model_to_external_data`; smaller ones (biases, shape
/// constants) stay inline.
pub const DEFAULT_EXTERNAL_THRESHOLD: usize = 1024;

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
    /// ONNX Runtime execution provider an `ort` export is for (recorded in metadata when
    /// set; see [`crate::ExportProvider`]); `None`: the target's default.
    pub provider: Option<crate::ExportProvider>,
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
    /// Also export mmsegmentation's auxiliary FCN head as a second output (`aux_logits`).
    pub aux: bool,
    /// Input `image` is uint8 NHWC RGB [batch, height, width, 3]; the graph casts,
    /// transposes and normalises ((x/255 - mean)/std as one Mul + Add).
    pub preprocess: bool,
    /// Fixed (height, width) instead of the `height` / `width` symbols (static engines).
    pub input_size: Option<(i64, i64)>,
    /// Fixed batch size instead of the `batch` symbol.
    pub batch: Option<i64>,
    /// Largest expected (height, width) of a dynamic export: TensorRT profile hints and
    /// the attention memory budget ([`budget`](crate::budget)).
    pub max_size: (i64, i64),
    /// Large initialisers in a side file `<model file name>.data` (storage only: the
    /// graph, and so the metadata JSON, is the same either way).
    pub external_data: ExternalData,
    /// Initialisers of at least this many bytes go to the side file when external data
    /// is used ([`DEFAULT_EXTERNAL_THRESHOLD`]).
    pub external_threshold: usize,
    /// Under `fp16`: layers kept in float32 (weights FLOAT, Casts around the conv), by
    /// checkpoint module name. A name selects every conv at or below it (`head.conv5c`:
    /// the conv `head.conv5c.0`; `pretrained.layer4`: all of layer4's). A name that
    /// selects no conv is an error ([`ExportError::UnknownLayer`]) listing close names.
    pub keep_fp32: Vec<String>,
    /// Convs whose reduction depth `in_ch x k x k` exceeds this are written as a `Sum` of
    /// convs over equal slices of their input channels (exact up to summation order);
    /// `None`: every conv whole. The `tract` target sets [`TRACT_CONV_SPLIT_DEPTH`].
    pub conv_split_depth: Option<usize>,
}

/// The `tract` target's [`ExportOptions::conv_split_depth`]: tract 0.23.9's matrix product
/// does not block its reduction axis, and at 512x512 DANet's two 2048 x 3 x 3 head convs
/// took 6.5 s of 10.9 s whole, the model 5.2 s with them split to this depth (see the
/// exporter's `conv::split`).
pub const TRACT_CONV_SPLIT_DEPTH: usize = 2304;

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
            provider: None,
            pam,
            cam,
            fp16: false,
            argmax: false,
            aux: false,
            preprocess: false,
            input_size: None,
            batch: None,
            max_size: DEFAULT_MAX_SIZE,
            external_data: ExternalData::Auto,
            external_threshold: DEFAULT_EXTERNAL_THRESHOLD,
            keep_fp32: Vec::new(),
            conv_split_depth: (target == ExportTarget::Tract).then_some(TRACT_CONV_SPLIT_DEPTH),
        }
        .raise_opset_for_forms()
    }

    /// fp16 weights and compute (see [`ExportOptions::fp16`]).
    pub fn with_fp16(mut self, on: bool) -> Self {
        self.fp16 = on;
        self
    }

    /// Layers kept in float32 under `fp16` (see [`ExportOptions::keep_fp32`]).
    pub fn with_keep_fp32<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.keep_fp32 = names.into_iter().map(Into::into).collect();
        self
    }

    /// Convs deeper than `depth` split along their input channels (see
    /// [`ExportOptions::conv_split_depth`]).
    pub fn with_conv_split_depth(mut self, depth: Option<usize>) -> Self {
        self.conv_split_depth = depth;
        self
    }

    /// Export the auxiliary head's logits as a second output (checkpoints that have one).
    pub fn with_aux(mut self, on: bool) -> Self {
        self.aux = on;
        self
    }

    /// Class map output `mask` instead of `logits` (see [`ExportOptions::argmax`]).
    pub fn with_argmax(mut self, on: bool) -> Self {
        self.argmax = on;
        self
    }

    /// uint8 NHWC RGB input, normalised in the graph (see [`ExportOptions::preprocess`]).
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

    /// Largest expected (height, width) of a dynamic export (see
    /// [`ExportOptions::max_size`]).
    pub fn with_max_size(mut self, size: (i64, i64)) -> Self {
        self.max_size = size;
        self
    }

    /// When initialisers go to a side file (see [`ExternalData`]).
    pub fn with_external_data(mut self, mode: ExternalData) -> Self {
        self.external_data = mode;
        self
    }

    /// Smallest initialiser (bytes) written to the side file.
    pub fn with_external_threshold(mut self, bytes: usize) -> Self {
        self.external_threshold = bytes;
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
    pub fn trt_profile(&self, output_stride: i64) -> Option<segtool_onnx::TrtProfileHint> {
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
        Some(segtool_onnx::TrtProfileHint {
            input: INPUT_NAME.into(),
            layout: if self.preprocess { "NHWC" } else { "NCHW" }.into(),
            min,
            opt,
            max,
            trtexec,
        })
    }

    /// Default-domain opset, taken as is: one below a chosen form's
    /// [`AttentionForm::min_opset`] fails the export with [`ExportError::AttentionOpset`].
    pub fn with_opset(mut self, opset: i64) -> Self {
        self.opset = opset;
        self
    }

    /// Uses `form` for both attention modules (raising the opset to 23 for ONNX
    /// `Attention`).
    pub fn with_attention(self, form: AttentionForm) -> Self {
        self.with_pam_attention(form).with_cam_attention(form)
    }

    /// Form of the position attention module only (raising the opset to 23 for ONNX
    /// `Attention`).
    pub fn with_pam_attention(mut self, form: AttentionForm) -> Self {
        self.pam = form;
        self.raise_opset_for_forms()
    }

    /// Form of the channel attention module only (raising the opset to 23 for ONNX
    /// `Attention`).
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

    /// The options as written to `metadata_props[EXPORT_METADATA_KEY]`. The external
    /// data settings are left out: they choose where the bytes are stored, not what the
    /// graph computes, so an inline and an external export of one checkpoint carry the
    /// same metadata.
    pub fn to_json(&self) -> String {
        let mut v = serde_json::json!({
            TARGET_FIELD: self.target.name(),
            "opset": self.opset,
            PAM_FIELD: self.pam.name(),
            CAM_FIELD: self.cam.name(),
            "fp16": self.fp16,
            "argmax": self.argmax,
            "preprocess": self.preprocess,
            "input_size": self.input_size.map(|(h, w)| [h, w]),
            "batch": self.batch,
            "max_size": [self.max_size.0, self.max_size.1],
        });
        // Only when used, so that exports without them keep their bytes.
        if self.aux {
            v["aux"] = serde_json::Value::Bool(true);
        }
        if !self.keep_fp32.is_empty() {
            v["keep_fp32"] = serde_json::json!(self.keep_fp32);
        }
        if let Some(depth) = self.conv_split_depth {
            v["conv_split_depth"] = depth.into();
        }
        if let Some(p) = self.provider {
            v[PROVIDER_FIELD] = p.name().into();
        }
        v.to_string()
    }

    pub(crate) fn validate(&self) -> Result<(), ExportError> {
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
        if !self.keep_fp32.is_empty() && !self.fp16 {
            return Err(ExportError::BadOption(
                "keep-fp32 layers only mean something in an fp16 export (--fp16)".into(),
            ));
        }
        if let Some(n) = self.keep_fp32.iter().find(|n| n.trim().is_empty()) {
            return Err(ExportError::BadOption(format!(
                "keep-fp32 layer name {n:?} is empty"
            )));
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
        if self.conv_split_depth == Some(0) {
            return Err(ExportError::BadOption(
                "conv split depth must be at least 1".into(),
            ));
        }
        self.check_provider()?;
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

    /// Refuses a provider on a target that has no choice of one.
    fn check_provider(&self) -> Result<(), ExportError> {
        match self.provider {
            Some(p) if self.target != ExportTarget::Ort => Err(ExportError::BadOption(format!(
                "provider `{p}` applies to target `ort` (ONNX Runtime's execution providers); \
                 target `{}` is for {}",
                self.target,
                match self.target {
                    ExportTarget::TensorRt => "TensorRT",
                    ExportTarget::Tract => "tract (CPU)",
                    ExportTarget::OpenVino => "OpenVINO",
                    _ => "every runtime",
                }
            ))),
            _ => Ok(()),
        }
    }
}
