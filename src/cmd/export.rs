use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_export::{export_onnx, AttentionForm, ExportOptions, ExportTarget};

#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint (.safetensors written by `segtool train`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Output ONNX file (written atomically).
    #[arg(long)]
    pub onnx: PathBuf,
    /// Runtime the model is for; picks the attention forms and the opset.
    /// `legacy` (the default): MatMul/Softmax/MatMul, opset 17, loads everywhere (ORT,
    /// TensorRT, tract). `ort`: PAM as com.microsoft MultiHeadAttention (fastest and
    /// ~6x less memory in ONNX Runtime), CAM decomposed; ONNX Runtime only.
    /// `tensorrt` / `tract`: ONNX Attention (opset 23) for both modules.
    /// The default stays `legacy` so that one file serves the ORT and the tract engine.
    #[arg(long, default_value = "legacy", value_parser = parse_target)]
    pub target: ExportTarget,
    /// Override the target's attention form for both modules:
    /// decomposed | onnx (Attention-23) | ms-mha (com.microsoft MultiHeadAttention).
    #[arg(long, value_parser = parse_form)]
    pub attention: Option<AttentionForm>,
    /// Default-domain opset (13..=23); defaults to the target's (17, or 23 with Attention).
    #[arg(long)]
    pub opset: Option<i64>,
}

fn parse_target(s: &str) -> Result<ExportTarget, String> {
    s.parse()
}

fn parse_form(s: &str) -> Result<AttentionForm, String> {
    s.parse()
}

impl Args {
    pub fn options(&self) -> ExportOptions {
        let mut opts = ExportOptions::for_target(self.target);
        if let Some(form) = self.attention {
            opts = opts.with_attention(form);
        }
        if let Some(opset) = self.opset {
            opts = opts.with_opset(opset);
        }
        opts
    }
}

pub fn run(args: Args) -> Result<()> {
    let opts = args.options();
    let report = export_onnx(&args.checkpoint, &args.onnx, &opts)
        .with_context(|| format!("exporting {}", args.checkpoint.display()))?;
    println!(
        "wrote {} (target {}, PAM {}, CAM {}, opset {}; {} nodes, {} initializers, {} BN folded, {:.1} MB)",
        args.onnx.display(),
        opts.target,
        opts.pam,
        opts.cam,
        opts.opset,
        report.nodes,
        report.initializers,
        report.folded_bn,
        report.bytes as f64 / 1e6
    );
    Ok(())
}
