//! The Triton repository flags `export` and `card` take, and the one writer both call
//! (`segtool_runtime::expert::triton::write_repository`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use segtool_runtime::expert::triton::{write_repository, TritonOptions};

#[derive(clap::Args, Clone, Debug, Default)]
pub struct TritonArgs {
    /// Also write a Triton Inference Server model repository: DIR/<name>/config.pbtxt
    /// (platform onnxruntime_onnx, I/O from the model) and DIR/<name>/1/model.onnx.
    #[arg(long, value_name = "DIR")]
    pub triton: Option<PathBuf>,
    /// Triton model name (default: the ONNX file's stem).
    #[arg(long, requires = "triton")]
    pub triton_model_name: Option<String>,
    /// Triton max_batch_size (0: no batching); dynamic batching is configured when > 0.
    /// A static-batch model is written with 0.
    #[arg(long, default_value_t = 8, requires = "triton")]
    pub triton_max_batch: u32,
    /// Dynamic batcher queue delay in microseconds.
    #[arg(long, default_value_t = 100, requires = "triton")]
    pub triton_queue_delay_us: u64,
    /// GPUs for Triton instances, e.g. `0,1` (one KIND_GPU instance group per GPU);
    /// empty (the default): CPU instances.
    #[arg(long, default_value = "", value_parser = parse_gpus, requires = "triton")]
    pub triton_gpus: GpuList,
}

/// `--triton-gpus` value: comma-separated GPU indices, possibly none.
#[derive(Clone, Debug, Default)]
pub struct GpuList(pub Vec<u32>);

fn parse_gpus(s: &str) -> Result<GpuList, String> {
    s.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(|g| {
            g.parse::<u32>()
                .map_err(|_| format!("`{s}`: expected GPU indices like 0,1"))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(GpuList)
}

impl TritonArgs {
    /// Writes `onnx` as the repository `--triton` names (nothing without it), named
    /// `--triton-model-name`, else `default_name`, else the file's stem; prints where.
    pub fn write(&self, onnx: &Path, default_name: Option<String>) -> Result<()> {
        let Some(dir) = &self.triton else {
            return Ok(());
        };
        let mut options = TritonOptions::new()
            .with_max_batch_size(self.triton_max_batch)
            .with_max_queue_delay_us(self.triton_queue_delay_us)
            .with_gpus(self.triton_gpus.0.clone());
        if let Some(name) = self.triton_model_name.clone().or(default_name) {
            options = options.with_model_name(name);
        }
        let report = write_repository(onnx, dir, &options)
            .with_context(|| format!("writing the Triton repository {}", dir.display()))?;
        println!(
            "wrote Triton model {:?}: {} and {} (max_batch_size {}, {})",
            report.model_name,
            report.config_path.display(),
            report.model_path.display(),
            report.max_batch_size,
            if options.gpus.is_empty() {
                "CPU instances".to_string()
            } else {
                format!("GPUs {:?}", options.gpus)
            }
        );
        for note in report.notes {
            eprintln!("note: {note}");
        }
        Ok(())
    }
}
