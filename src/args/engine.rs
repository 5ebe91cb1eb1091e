//! `--engine`, `--providers`, `--device`, `--precision`, `--hint`, `--streams`,
//! `--threads`, `--strict`: the flags every inference subcommand (infer, bench, demo)
//! turns into one [`SegmenterBuilder`].

use std::path::Path;

use anyhow::Result;
use segtool_runtime::card::CardRequest;
use segtool_runtime::openvino::{Device, PerformanceHint, Precision};
use segtool_runtime::{EngineKind, Segmenter, SegmenterBuilder, SegmenterOptions};

use crate::args::card::CardArgs;

/// The engine flags, flattened into every subcommand that opens a model.
#[derive(Clone, Debug, clap::Args)]
pub struct EngineFlags {
    /// Inference engine: auto (OpenVINO for INT8 files on CPUs with AMX-INT8 and for
    /// --precision bf16, where it measured faster; else ONNX Runtime; else tract; the
    /// choice and why are printed),
    /// ort (ONNX Runtime: CPU, CUDA, TensorRT; an error without its library),
    /// openvino (Intel CPUs, iGPUs, NPUs) or tract (pure Rust, CPU only). The default is
    /// the runtime's, as in every front end.
    #[arg(long, default_value_t = EngineKind::Auto)]
    pub engine: EngineKind,
    /// ONNX Runtime execution providers in order of preference: cpu, cuda[:N],
    /// tensorrt[:N], tensorrt-fp16[:N]. Unavailable ones fall back to CPU (reported).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
    /// OpenVINO's device: CPU, GPU, NPU or AUTO. An absent one falls back to the CPU
    /// (reported), unless --strict.
    #[arg(long, default_value_t = Device::Cpu)]
    pub device: Device,
    /// OpenVINO's precision for float32 layers: f32, or bf16 (CPUs with AMX or AVX-512
    /// BF16: several times faster, labels close to f32's).
    #[arg(long, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// OpenVINO's performance hint: latency (one frame at a time) or throughput.
    #[arg(long, default_value_t = PerformanceHint::Latency)]
    pub hint: PerformanceHint,
    /// OpenVINO's parallel inference streams (default: what --hint picks).
    #[arg(long)]
    pub streams: Option<usize>,
    /// Engine threads: ONNX Runtime's intra-op threads, tract's pool, OpenVINO's CPU
    /// threads (default: the engine's choice, all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// A requested execution provider that does not load (e.g. CUDA without a GPU) is an
    /// error instead of a reported fallback to CPU.
    #[arg(long)]
    pub strict: bool,
    /// What an ONNX file from elsewhere needs beside its graph.
    #[command(flatten)]
    pub card: CardArgs,
}

impl EngineFlags {
    /// Whether ONNX Runtime is the engine asked for (`ort`, or `auto`, which opens it when
    /// its library loads): its session can be planned for one input size.
    pub fn onnx_runtime(&self) -> bool {
        matches!(self.engine, EngineKind::Ort | EngineKind::Auto)
    }

    /// The request these flags make, with `fixed_size` for ONNX Runtime's memory plan.
    pub fn request(&self, fixed_size: Option<(usize, usize)>) -> EngineRequest<'_> {
        EngineRequest {
            engine: self.engine,
            providers: &self.providers,
            openvino: (self.device, self.precision, self.hint, self.streams),
            threads: self.threads,
            strict: self.strict,
            fixed_size,
            card: self.card.request(),
        }
    }
}

/// What the inference flags ask for.
#[derive(Clone, Debug)]
pub struct EngineRequest<'a> {
    pub engine: EngineKind,
    /// `--providers` as given (`cpu`, `cuda:1`, `tensorrt-fp16`...).
    pub providers: &'a [String],
    /// OpenVINO's device, precision, performance hint and streams.
    pub openvino: (Device, Precision, PerformanceHint, Option<usize>),
    pub threads: Option<usize>,
    pub strict: bool,
    /// `(height, width)` every input will have, for ONNX Runtime's memory plan.
    pub fixed_size: Option<(usize, usize)>,
    /// The model card flags (files from elsewhere).
    pub card: CardRequest,
}

impl EngineRequest<'_> {
    /// The runtime's options these flags map onto (same names, same meaning).
    pub fn options(&self) -> SegmenterOptions {
        SegmenterOptions {
            engine: self.engine,
            providers: self.providers.to_vec(),
            device: self.openvino.0,
            precision: self.openvino.1,
            hint: self.openvino.2,
            streams: self.openvino.3,
            threads: self.threads,
            strict: self.strict,
            fixed_size: self.fixed_size.map(|(h, w)| [h, w]),
            ..SegmenterOptions::default()
        }
    }

    /// The builder for `model`; provider names are checked here (an unknown one is an
    /// error naming it). The card flags (a file, or fields of their own) come on top.
    pub fn builder(&self, model: &Path) -> Result<SegmenterBuilder> {
        Ok(Segmenter::builder(model)
            .options(&self.options())?
            .card(self.card.clone()))
    }

    /// Opens `model` as asked.
    pub fn open(&self, model: &Path) -> Result<Segmenter> {
        Ok(self.builder(model)?.open()?)
    }
}

/// `engine X on P`, with each fallback taken, for the binary's stderr.
pub fn describe(seg: &Segmenter) -> String {
    let engine = seg.engine();
    let mut line = format!("engine {} on {}", engine.name(), engine.provider());
    for fallback in seg.fallbacks() {
        line.push_str(&format!(" ({fallback})"));
    }
    if let Some(choice) = seg.engine_choice() {
        line.push_str(&format!("; {choice}"));
    }
    line
}
