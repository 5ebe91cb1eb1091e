//! Which ONNX Runtime execution provider an `ort` export is for, and what that changes.
//!
//! ORT's CPU kernels ran PAM fastest in query blocks (measured, see [`ExportTarget`]), so
//! `ort` on the CPU (the default) keeps that. ORT's CUDA EP runs
//! `com.microsoft.MultiHeadAttention` through fused kernels that never materialise the
//! N x N energy, so `ort` on CUDA writes PAM that way. PAM's Q/K head size (C/8) differs
//! from V's (C), which rules out ORT's flash kernel; its memory-efficient (CUTLASS) kernel
//! takes it: fp32 or fp16, head sizes multiples of 8 up to 1024, in fp32 from 256 query
//! positions on (`ORT_MIN_SEQ_LEN_EFFICIENT_ATTENTION_FP32`; below that the unfused
//! kernel, where N x N is small). CAM stays decomposed on CUDA: its "head size" is N =
//! H*W/64, past the fused kernels' limit (1024) above 256x256 inputs, and its C x C energy
//! is 1 MiB at C = 512. None of this was timed on a GPU.
//!
//! [`ExportProvider`] itself is a value of the options (`export_provider.rs`); this module
//! builds on both. Also here: [`TargetRequest`], the one place a user's request (target, provider, GPU
//! serving) becomes a target, and [`AttentionChoice`], an export's recorded choice read
//! back from its metadata to say when it was not made for CUDA.

use crate::options::{CAM_FIELD, PAM_FIELD, PROVIDER_FIELD, TARGET_FIELD};
use crate::{AttentionForm, ExportOptions, ExportProvider, ExportTarget, PAM_QUERY_BLOCKS};

impl ExportTarget {
    /// Default (PAM, CAM) forms for the target on `provider` (only `ort` has a choice;
    /// `None` is the target's own default, for `ort` the CPU one).
    pub fn attention_on(self, provider: Option<ExportProvider>) -> (AttentionForm, AttentionForm) {
        match (self, provider) {
            (ExportTarget::Ort, Some(ExportProvider::Cuda)) => (
                AttentionForm::MsMultiHeadAttention,
                AttentionForm::Decomposed,
            ),
            _ => self.attention(),
        }
    }
}

impl ExportOptions {
    /// The target's default profile for `provider` (see [`ExportProvider`]); the provider
    /// is recorded in the metadata. Only [`ExportTarget::Ort`] takes a provider: the
    /// export of any other target fails with [`ExportError::BadOption`].
    pub fn for_target_on(target: ExportTarget, provider: ExportProvider) -> Self {
        let (pam, cam) = target.attention_on(Some(provider));
        let opts = Self {
            provider: Some(provider),
            ..Self::for_target(target)
        };
        opts.with_pam_attention(pam).with_cam_attention(cam)
    }

    /// The attention choice this export records (see [`AttentionChoice`]).
    pub fn attention_choice(&self) -> AttentionChoice {
        AttentionChoice {
            target: self.target,
            provider: self.provider,
            pam: self.pam,
            cam: self.cam,
        }
    }
}

/// What a user asked for before defaults apply: `segtool export`'s `--target` and
/// `--provider`, and whether the export will be served on GPUs (Triton GPU instances run
/// ONNX Runtime's CUDA EP).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TargetRequest {
    /// The target asked for, if any.
    pub target: Option<ExportTarget>,
    /// The provider asked for, if any.
    pub provider: Option<ExportProvider>,
    /// Served on GPUs (e.g. a Triton repository with GPU instances).
    pub gpu_serving: bool,
}

impl TargetRequest {
    /// (target, provider): what was asked wins; a provider or GPU serving without a target
    /// means `ort`; GPU serving of `ort` without a provider means CUDA; otherwise `legacy`.
    pub fn resolve(self) -> (ExportTarget, Option<ExportProvider>) {
        let implied_ort = self.provider.is_some() || self.gpu_serving;
        let target = self.target.unwrap_or(if implied_ort {
            ExportTarget::Ort
        } else {
            ExportTarget::Legacy
        });
        let gpu = (target == ExportTarget::Ort && self.gpu_serving).then_some(ExportProvider::Cuda);
        (target, self.provider.or(gpu))
    }

    /// The resolved target's default profile.
    pub fn options(self) -> ExportOptions {
        match self.resolve() {
            (target, Some(provider)) => ExportOptions::for_target_on(target, provider),
            (target, None) => ExportOptions::for_target(target),
        }
    }
}

/// The target, provider and attention forms an export records in its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionChoice {
    /// The target it was exported for.
    pub target: ExportTarget,
    /// The provider it was exported for (`None`: the target's default).
    pub provider: Option<ExportProvider>,
    /// Form of PAM.
    pub pam: AttentionForm,
    /// Form of CAM.
    pub cam: AttentionForm,
}

impl AttentionChoice {
    /// Reads the choice from the export options (`metadata_props[EXPORT_METADATA_KEY]`,
    /// see [`ExportOptions::to_json`]); `None` when they do not say (other exporters).
    pub fn from_export_options(json: &serde_json::Value) -> Option<Self> {
        let field = |k: &str| json.get(k).and_then(serde_json::Value::as_str);
        Some(Self {
            target: field(TARGET_FIELD)?.parse().ok()?,
            provider: field(PROVIDER_FIELD).and_then(|p| p.parse().ok()),
            pam: field(PAM_FIELD)?.parse().ok()?,
            cam: field(CAM_FIELD)?.parse().ok()?,
        })
    }

    /// Why this export's PAM is not the fused form ONNX Runtime's CUDA EP runs without an
    /// N x N energy, and how to re-export; `None` when it is (`ms-mha`).
    pub fn cuda_note(&self) -> Option<String> {
        let what = match self.pam {
            AttentionForm::MsMultiHeadAttention => return None,
            AttentionForm::QueryBlocked => format!(
                "runs {PAM_QUERY_BLOCKS} MatMul/Softmax blocks, each materialising 1/{PAM_QUERY_BLOCKS} \
                 of the N x N energy"
            ),
            AttentionForm::Decomposed => "materialises the whole N x N energy".to_string(),
            AttentionForm::OnnxAttention => {
                "is ONNX Attention-23, not ORT's contrib MultiHeadAttention".to_string()
            }
        };
        let why = match (self.target, self.provider) {
            (_, Some(ExportProvider::Cuda)) => "chosen explicitly",
            (ExportTarget::Ort, _) => {
                "chosen for ONNX Runtime's CPU kernels, where it measured faster"
            }
            (ExportTarget::Tract, _) => "chosen for tract",
            (ExportTarget::TensorRt, _) => "chosen for TensorRT",
            (ExportTarget::OpenVino, _) => "chosen for OpenVINO, where it measured fastest",
            (ExportTarget::Legacy, _) => "the legacy form every runtime loads",
        };
        Some(format!(
            "PAM attention is `{}` (target {}: {why}); on CUDA it {what}; for ONNX Runtime's \
             CUDA EP re-export with `segtool export --target ort --provider cuda` (PAM as fused \
             com.microsoft.MultiHeadAttention, no N x N energy)",
            self.pam, self.target
        ))
    }
}
