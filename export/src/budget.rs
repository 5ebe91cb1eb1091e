//! Attention memory budget of an export at the largest expected input size.
//!
//! DANet's PAM attends over N = (H/s)(W/s) positions (s the output stride): its energy
//! is N x N, 4 GiB in fp32 for a 1024x2048 frame at stride 8. CAM's is C x C (1 MiB at
//! C = 512). Energies and softmax are fp32 in every profile (fp16 ones included). What
//! a form materialises depends on the runtime's kernel:
//! - `decomposed`: MatMul / Softmax / MatMul materialise the energy and the attention
//!   (at least one full matrix alive at a time, usually two);
//! - `onnx` (`Attention`-23): ONNX Runtime 1.31 CPU materialises the full matrix (measured
//!   2.25 GB peak at N = 16384); TensorRT's and tract's fused kernels may not;
//! - `ms-mha` (`com.microsoft.MultiHeadAttention`): ONNX Runtime's CPU kernel streams
//!   over key blocks (flash-style): no N x N buffer (measured 0.22 GB at N = 16384);
//! - `blocked` (PAM only; CAM stays decomposed): one query block's energy at a time,
//!   1/[`crate::PAM_QUERY_BLOCKS`] of the matrix.

use segtool_model_spec::ModelSpec;

use crate::{AttentionForm, ExportOptions};

/// 2 GiB: above this a materialised attention matrix gets a warning.
pub const WARN_BYTES: u64 = 2 << 30;

/// One attention module's full energy matrix at a given input size.
#[derive(Clone, Debug, PartialEq)]
pub struct AttentionBudget {
    /// `PAM` or `CAM`.
    pub module: &'static str,
    /// Tokens attended over: positions N (PAM) or channels C (CAM).
    pub tokens: u64,
    /// Bytes of one full fp32 energy (= attention) matrix, batch included.
    pub matrix_bytes: u64,
    /// The form this export uses for the module.
    pub form: AttentionForm,
}

impl AttentionBudget {
    /// Bytes `form` materialises for the energies in ONNX Runtime CPU (see module docs):
    /// the full matrix for `decomposed` and `onnx`, none for `ms-mha`.
    pub fn materialised_by(&self, form: AttentionForm) -> u64 {
        match form {
            AttentionForm::Decomposed | AttentionForm::OnnxAttention => self.matrix_bytes,
            AttentionForm::MsMultiHeadAttention => 0,
            AttentionForm::QueryBlocked if self.module == "PAM" => {
                self.matrix_bytes.div_ceil(crate::PAM_QUERY_BLOCKS as u64)
            }
            AttentionForm::QueryBlocked => self.matrix_bytes,
        }
    }

    /// Whether this export's form materialises more than [`WARN_BYTES`] in its
    /// decomposed form (the form any runtime must materialise).
    pub fn warn(&self) -> bool {
        self.form == AttentionForm::Decomposed && self.matrix_bytes > WARN_BYTES
    }
}

/// Feature-map side for an input side: the stem's stride-2 conv and max-pool and the
/// stride-2 stages each round up (PyTorch's output size with "same"-style padding).
fn feature_side(side: i64, stride: i64) -> u64 {
    let mut s = side.max(1);
    let mut f = 1;
    while f < stride {
        s = (s + 1) / 2;
        f *= 2;
    }
    s as u64
}

/// PAM and CAM energy sizes of `spec` at (height, width) and `batch`.
pub fn attention_budget(
    spec: &ModelSpec,
    opts: &ExportOptions,
    (height, width): (i64, i64),
    batch: i64,
) -> Vec<AttentionBudget> {
    let os = spec.backbone.output_stride;
    let n = feature_side(height, os) * feature_side(width, os);
    let c = spec.inter_channels() as u64;
    let b = batch.max(1) as u64;
    vec![
        AttentionBudget {
            module: "PAM",
            tokens: n,
            matrix_bytes: b * n * n * 4,
            form: opts.pam,
        },
        AttentionBudget {
            module: "CAM",
            tokens: c,
            matrix_bytes: b * c * c * 4,
            form: opts.cam,
        },
    ]
}

/// Human-readable size.
pub fn human_bytes(b: u64) -> String {
    let b = b as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.2} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else {
        format!("{:.1} KiB", b / 1024.0)
    }
}

/// The report `segtool export` prints for a dynamic export: one line per module with
/// what each form materialises, then warnings. Returns (lines, warnings).
pub fn report(
    spec: &ModelSpec,
    opts: &ExportOptions,
    size: (i64, i64),
    batch: i64,
) -> (Vec<String>, Vec<String>) {
    let mut lines = vec![format!(
        "attention memory at {}x{} batch {batch} (fp32 energies; ONNX Runtime CPU kernels):",
        size.0, size.1
    )];
    let mut warnings = Vec::new();
    for a in attention_budget(spec, opts, size, batch) {
        let forms = AttentionForm::ALL
            .iter()
            .map(|&f| {
                let mark = if f == a.form { "*" } else { "" };
                let bytes = a.materialised_by(f);
                let what = if bytes == 0 {
                    "streamed (no N^2 buffer)".to_string()
                } else {
                    human_bytes(bytes)
                };
                format!("{}{mark} {what}", f.name())
            })
            .collect::<Vec<_>>()
            .join(", ");
        lines.push(format!(
            "  {} ({} tokens, full matrix {}): {forms}",
            a.module,
            a.tokens,
            human_bytes(a.matrix_bytes)
        ));
        if a.warn() {
            warnings.push(format!(
                "{} is decomposed: it materialises a {} x {} fp32 energy matrix of {} (> 2 GiB) \
                 at {}x{}; use --target ort or tract (PAM in query blocks), --attention ms-mha (streams it) \
                 or a smaller --max-size",
                a.module,
                a.tokens,
                a.tokens,
                human_bytes(a.matrix_bytes),
                size.0,
                size.1
            ));
        }
    }
    lines.push("  (* = this export's form)".into());
    (lines, warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::spec_with;
    use crate::ExportTarget;
    use segtool_model_spec::BackboneSpec;

    #[test]
    fn pam_at_cityscapes_full_frame_is_4_gib_and_warns_only_when_decomposed() {
        let spec = spec_with(BackboneSpec::resnet(50, 8).unwrap(), 19);
        let legacy = ExportOptions::default();
        let b = attention_budget(&spec, &legacy, (1024, 2048), 1);
        assert_eq!(b[0].tokens, 128 * 256);
        assert_eq!(b[0].matrix_bytes, 4 << 30);
        assert_eq!(b[1].tokens, 512);
        assert_eq!(b[1].matrix_bytes, 1 << 20);
        assert!(b[0].warn() && !b[1].warn());
        let (_, w) = report(&spec, &legacy, (1024, 2048), 1);
        assert_eq!(w.len(), 1, "{w:?}");
        let ort = ExportOptions::for_target(ExportTarget::Ort);
        let (lines, w) = report(&spec, &ort, (1024, 2048), 1);
        assert!(w.is_empty());
        assert!(lines[1].contains("blocked* 256.0 MiB"), "{lines:?}");
        let mha = ort.with_pam_attention(crate::AttentionForm::MsMultiHeadAttention);
        let (lines, w) = report(&spec, &mha, (1024, 2048), 1);
        assert!(w.is_empty());
        assert!(lines[1].contains("ms-mha* streamed"), "{lines:?}");
        // 768 crop: N = 96^2, 340 MB (DESIGN.md).
        let b = attention_budget(&spec, &legacy, (768, 768), 1);
        assert_eq!(b[0].matrix_bytes, 96u64.pow(4) * 4);
        assert!(!b[0].warn());
        // Odd sizes round up like the convs.
        assert_eq!(feature_side(70, 8), 9);
        assert_eq!(feature_side(61, 16), 4);
    }
}
