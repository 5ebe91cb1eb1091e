//! The engine flags every segtool command that opens a model takes (`segtool infer`,
//! `bench`, `demo`, and the ROS 2 node and bag tool): one clap struct, [`EngineArgs`],
//! whose flags are the runtime's [`SegmenterOptions`] under the same names, with the same
//! defaults and meanings. A crate of its own so that the `segtool` binary and the ROS 2
//! binary share it without the runtime depending on clap.

use segtool_runtime::openvino::{Device, PerformanceHint, Precision};
use segtool_runtime::{EngineKind, SegmenterOptions};

/// `--engine`, `--providers`, `--device`, `--precision`, `--hint`, `--streams`,
/// `--threads`, `--strict`: flattened into each command that opens a model.
#[derive(Clone, Debug, PartialEq, Eq, clap::Args)]
pub struct EngineArgs {
    /// Inference engine: auto (the engine timed fastest for this model on this machine,
    /// timed on first use and cached; GPU providers keep ONNX Runtime, bf16 OpenVINO; the
    /// choice and its timings are printed), ort (ONNX Runtime: CPU, CUDA, TensorRT; an
    /// error without its library), openvino (Intel CPUs, iGPUs, NPUs) or tract (pure
    /// Rust, CPU only).
    #[arg(long, default_value_t = EngineKind::Auto)]
    pub engine: EngineKind,
    /// ONNX Runtime execution providers in order of preference: cpu, cuda[:N],
    /// tensorrt[:N], tensorrt-fp16[:N]. Unavailable ones fall back to CPU (reported),
    /// unless --strict. Refused with --engine openvino or tract.
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
    /// OpenVINO's device: CPU, GPU, NPU or AUTO. An absent one falls back to the CPU
    /// (reported), unless --strict.
    #[arg(long, default_value_t = Device::Cpu)]
    pub device: Device,
    /// OpenVINO's precision for float32 layers: f32, or bf16 (CPUs with AMX or AVX-512
    /// BF16). Only OpenVINO computes bf16: refused with --engine ort or tract.
    #[arg(long, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// OpenVINO's performance hint: latency (one frame at a time) or throughput.
    #[arg(long, default_value_t = PerformanceHint::Latency)]
    pub hint: PerformanceHint,
    /// OpenVINO's parallel inference streams (default, and 0: what --hint picks).
    #[arg(long)]
    pub streams: Option<usize>,
    /// Engine threads: ONNX Runtime's intra-op threads, tract's pool, OpenVINO's CPU
    /// threads (default, and 0: the engine's choice, all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// No fallback of any kind: a provider or device that does not load, an engine auto
    /// could not open, or an option the engine that runs does not take is an error.
    #[arg(long)]
    pub strict: bool,
}

impl Default for EngineArgs {
    fn default() -> Self {
        EngineArgs::from(&SegmenterOptions::default())
    }
}

impl From<&SegmenterOptions> for EngineArgs {
    fn from(o: &SegmenterOptions) -> Self {
        Self {
            engine: o.engine,
            providers: o.providers.clone(),
            device: o.device,
            precision: o.precision,
            hint: o.hint,
            streams: o.streams,
            threads: o.threads,
            strict: o.strict,
        }
    }
}

impl EngineArgs {
    /// Whether ONNX Runtime may run the model (`ort`, or `auto`, which may pick it): the
    /// commands then plan its memory for one input size.
    pub fn onnx_runtime(&self) -> bool {
        matches!(self.engine, EngineKind::Ort | EngineKind::Auto)
    }

    /// The runtime's options these flags set (the others at their defaults).
    pub fn options(&self) -> SegmenterOptions {
        SegmenterOptions {
            engine: self.engine,
            providers: self.providers.clone(),
            device: self.device,
            precision: self.precision,
            hint: self.hint,
            streams: self.streams,
            threads: self.threads,
            strict: self.strict,
            ..SegmenterOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        engine: EngineArgs,
    }

    #[test]
    fn the_defaults_are_the_runtimes() {
        let cli = Cli::parse_from(["segtool"]);
        assert_eq!(cli.engine.options(), SegmenterOptions::default());
        assert_eq!(cli.engine, EngineArgs::default());
    }

    #[test]
    fn every_flag_is_an_option_of_the_same_name() {
        let cli = Cli::parse_from([
            "segtool",
            "--engine",
            "openvino",
            "--providers",
            "cuda:1,cpu",
            "--device",
            "GPU",
            "--precision",
            "bf16",
            "--hint",
            "throughput",
            "--streams",
            "2",
            "--threads",
            "3",
            "--strict",
        ]);
        let o = cli.engine.options();
        assert_eq!(o.engine, EngineKind::OpenVino);
        assert_eq!(o.providers, ["cuda:1", "cpu"]);
        assert_eq!((o.device, o.precision), (Device::Gpu, Precision::Bf16));
        assert_eq!(o.hint, PerformanceHint::Throughput);
        assert_eq!((o.streams, o.threads, o.strict), (Some(2), Some(3), true));
        assert_eq!(EngineArgs::from(&o), cli.engine);
        // Each flag is one of the runtime's option names (`--fixed-size`, `--card`
        // and `--logits` are the commands' own).
        let flags: Vec<String> = <Cli as clap::CommandFactory>::command()
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| l.replace('-', "_")))
            .collect();
        for flag in &flags {
            assert!(SegmenterOptions::NAMES.contains(&flag.as_str()), "{flag}");
        }
        assert_eq!(flags.len(), 8, "{flags:?}");
    }
}
