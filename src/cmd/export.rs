use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_export::{export_onnx, ExportOptions};

#[derive(clap::Args)]
pub struct Args {
    /// Checkpoint (.safetensors written by `segtool train`).
    #[arg(long)]
    pub checkpoint: PathBuf,
    /// Output ONNX file (written atomically).
    #[arg(long)]
    pub onnx: PathBuf,
}

pub fn run(args: Args) -> Result<()> {
    let report = export_onnx(&args.checkpoint, &args.onnx, &ExportOptions::default())
        .with_context(|| format!("exporting {}", args.checkpoint.display()))?;
    println!(
        "wrote {} ({} nodes, {} initializers, {} BN folded, {:.1} MB)",
        args.onnx.display(),
        report.nodes,
        report.initializers,
        report.folded_bn,
        report.bytes as f64 / 1e6
    );
    Ok(())
}
