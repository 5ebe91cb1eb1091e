//! The model and engine flags both commands take: the runtime's `SegmenterOptions`, under
//! the same names.

use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_runtime::openvino::{Device, Precision};
use segtool_runtime::{EngineKind, Segmenter, SegmenterOptions};

#[derive(clap::Args, Clone, Debug)]
pub struct ModelArgs {
    /// The model: a segtool export, or a file from elsewhere with its model card (a
    /// sidecar MODEL.segtool.toml, --card, an mmdeploy or Hugging Face folder). After
    /// --ros-args, `-p model:=PATH` gives it too.
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A model card (TOML) for a file segtool did not write.
    #[arg(long, value_name = "FILE")]
    pub card: Option<PathBuf>,
    /// auto (ONNX Runtime when its library loads, else tract), ort, tract or openvino.
    #[arg(long, default_value_t = EngineKind::Auto)]
    pub engine: EngineKind,
    /// ONNX Runtime execution providers in preference order, e.g. `cuda,cpu` (CPU is the
    /// last resort; a provider that does not load is reported in the diagnostics).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
    /// OpenVINO's device: CPU, GPU, NPU or AUTO (an absent one falls back to the CPU,
    /// reported in the diagnostics).
    #[arg(long, default_value_t = Device::Cpu)]
    pub device: Device,
    /// OpenVINO's precision for float32 layers: f32 or bf16.
    #[arg(long, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// Engine threads (default: the engine's choice).
    #[arg(long)]
    pub threads: Option<usize>,
}

impl ModelArgs {
    /// Opens the model (`param` is `-p model:=...` when given).
    pub fn open(&self, param: Option<&str>) -> Result<(PathBuf, Segmenter)> {
        let model = match (&self.model, param) {
            (Some(m), _) => m.clone(),
            (None, Some(p)) => PathBuf::from(p),
            (None, None) => {
                anyhow::bail!("no model: --model PATH, or -p model:=PATH after --ros-args")
            }
        };
        let options = SegmenterOptions {
            engine: self.engine,
            providers: self.providers.clone(),
            device: self.device,
            precision: self.precision,
            threads: self.threads,
            card: self.card.clone(),
            ..SegmenterOptions::default()
        };
        let b = Segmenter::builder(&model).options(&options)?;
        let seg = b
            .open()
            .with_context(|| format!("opening {}", model.display()))?;
        Ok((model, seg))
    }
}
