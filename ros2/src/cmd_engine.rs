//! The model and engine flags both commands take: the runtime's `SegmenterOptions`, under
//! the same names.

use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_ros2::params::Given;
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
    /// auto (OpenVINO for INT8 files on CPUs with AMX and for bf16, else ONNX Runtime,
    /// else tract),
    /// ort, tract or openvino.
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
    /// The model and the runtime's options: the flags, overridden by the ROS parameters
    /// `given` (a parameter file, then `-p`).
    pub fn resolve(&self, given: &Given) -> Result<(PathBuf, SegmenterOptions)> {
        let model = match (given.string("model"), &self.model) {
            (Some(p), _) => PathBuf::from(p),
            (None, Some(m)) => m.clone(),
            (None, None) => anyhow::bail!(
                "no model: --model PATH, or the model parameter (-p model:=PATH after \
                 --ros-args, or a --params-file)"
            ),
        };
        let parsed = |name: &str, e: String| anyhow::anyhow!("parameter {name}: {e}");
        let options = SegmenterOptions {
            engine: match given.string("engine") {
                Some(e) => e.parse().map_err(|e| parsed("engine", e))?,
                None => self.engine,
            },
            providers: given
                .strings("providers")
                .map_or_else(|| self.providers.clone(), <[String]>::to_vec),
            device: match given.string("device") {
                Some(d) => d.parse().map_err(|e| parsed("device", e))?,
                None => self.device,
            },
            precision: match given.string("precision") {
                Some(p) => p.parse().map_err(|e| parsed("precision", e))?,
                None => self.precision,
            },
            threads: match given.integer("threads") {
                Some(n) if n > 0 => Some(n as usize),
                Some(0) => None,
                Some(n) => {
                    anyhow::bail!("parameter threads: {n}, expected 0 (the engine's) or more")
                }
                None => self.threads,
            },
            card: given
                .string("card")
                .filter(|c| !c.is_empty())
                .map(PathBuf::from)
                .or_else(|| self.card.clone()),
            ..SegmenterOptions::default()
        };
        Ok((model, options))
    }

    /// Opens the model the flags and the ROS parameters `given` name.
    pub fn open(&self, given: &Given) -> Result<(PathBuf, Segmenter)> {
        let (model, options) = self.resolve(given)?;
        let b = Segmenter::builder(&model).options(&options)?;
        let seg = b
            .open()
            .with_context(|| format!("opening {}", model.display()))?;
        Ok((model, seg))
    }
}
