//! `segtool report RUN_DIR [-o report.html]`: the run report page
//! (`segtool_train::report`), with this build's receipt.

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Args)]
pub struct Args {
    /// Run directory (metrics.jsonl, config.toml, environment.json, val_overlays/).
    pub run_dir: PathBuf,
    /// Output file; default RUN_DIR/report.html.
    #[arg(short, long, value_name = "FILE")]
    pub out: Option<PathBuf>,
}

pub fn run(args: Args) -> Result<()> {
    let ort = segtool_runtime::expert::env_report().onnxruntime;
    let receipt = vec![
        (
            "report made by segtool".to_string(),
            format!(
                "{} (commit {})",
                env!("CARGO_PKG_VERSION"),
                env!("SEGTOOL_GIT_COMMIT")
            ),
        ),
        (
            "ONNX Runtime (this build)".to_string(),
            match (&ort.version, &ort.library) {
                (Some(v), Some(lib)) => format!("{v} at {lib}"),
                (Some(v), None) => v.clone(),
                _ => "not loaded".to_string(),
            },
        ),
    ];
    let html = segtool_train::report::build(&args.run_dir, &receipt)?;
    let out = args.out.unwrap_or_else(|| args.run_dir.join("report.html"));
    segtool_model_spec::io::write_atomic(&out, html.as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    println!("wrote {}", out.display());
    Ok(())
}
