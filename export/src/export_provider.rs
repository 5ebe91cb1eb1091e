//! [`ExportProvider`]: which ONNX Runtime execution provider an `ort` export is for. A
//! value of the options ([`crate::ExportOptions::provider`]); what it changes lives in
//! `provider.rs`, which builds on both.

/// The ONNX Runtime execution provider an [`ExportTarget::Ort`] export is meant for
/// (`segtool export --provider`); it picks the attention forms, nothing else.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ExportProvider {
    /// `CPUExecutionProvider`: PAM in query blocks, CAM decomposed (measured fastest).
    Cpu,
    /// `CUDAExecutionProvider`: PAM as `com.microsoft.MultiHeadAttention` (fused, no
    /// N x N), CAM decomposed.
    Cuda,
}

impl ExportProvider {
    /// Every provider, in CLI listing order.
    pub const ALL: [ExportProvider; 2] = [ExportProvider::Cpu, ExportProvider::Cuda];

    /// CLI / metadata spelling: `cpu`, `cuda`.
    pub fn name(self) -> &'static str {
        match self {
            ExportProvider::Cpu => "cpu",
            ExportProvider::Cuda => "cuda",
        }
    }
}

impl std::fmt::Display for ExportProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ExportProvider {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cpu" => Ok(ExportProvider::Cpu),
            "cuda" => Ok(ExportProvider::Cuda),
            _ => Err(format!(
                "unknown execution provider `{s}` (expected cpu or cuda)"
            )),
        }
    }
}
