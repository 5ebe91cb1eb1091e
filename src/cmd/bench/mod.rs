//! `segtool bench`: latency and throughput of an exported model on synthetic images,
//! per batch size, with pre-processing (normalisation), engine and post-processing
//! (argmax to a mask at image size) timed separately.
//!
//! Each timed iteration runs the runtime's three stages, the path `Segmenter::segment_batch`
//! takes, single-threaded outside the engine: `Preparer::prepare` (fitting a fixed-size
//! graph, the card's steps, normalisation or packing uint8 pixels for `--preprocess`
//! exports), `Segmenter::run`, then `Scored::decode` (the mask at image size). Latency is
//! the sum of the three.
//!
//! `--stream --fps F` measures a video stream instead: a producer thread feeds frames at
//! a fixed rate (from `--raw WxH` stdin, a `--input` folder, or generated panning
//! shapes) into one session behind an `OrderedStream` (every frame, in order) or, with
//! `--live`, a `LatestStream` (newest frame wins, the rest dropped and counted), and each
//! answered frame's arrival-to-mask latency is recorded.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::Segmenter;
use serde_json::json;

use crate::args::engine::EngineFlags;
use crate::args::size::Size;

mod batch;
mod stream;

#[derive(clap::Args)]
pub struct Args {
    /// Exported model (.onnx from `segtool export`).
    #[arg(long)]
    pub model: PathBuf,
    #[command(flatten)]
    pub engine: EngineFlags,
    /// Batch sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1")]
    pub batch_sizes: Vec<usize>,
    /// Timed runs per batch size [default: 20 unless --duration].
    #[arg(long, conflicts_with = "duration")]
    pub iterations: Option<usize>,
    /// Run each batch size for this many seconds (at least one run) instead of a count.
    #[arg(long)]
    pub duration: Option<f64>,
    /// Untimed runs per batch size first (the first run includes plan/allocation set-up).
    #[arg(long, default_value_t = 2)]
    pub warmup: usize,
    /// Input size HxW.
    #[arg(long, value_parser = crate::args::size::hxw, default_value = "512x1024")]
    pub size: Size,
    /// Also write the results as JSON (atomically).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Keep the model's symbolic height/width instead of building the ONNX Runtime
    /// session for --size (what `segtool infer` does when all inputs share a size).
    #[arg(long)]
    pub dynamic_shapes: bool,
    /// Stream benchmark: frames fed at --fps; arrival-to-mask latency per frame, answered
    /// fps, dropped frames.
    #[arg(long, requires = "fps")]
    pub stream: bool,
    /// --stream: the producer's frame rate.
    #[arg(long, requires = "stream")]
    pub fps: Option<f64>,
    /// --stream: newest-frame mode (LatestStream) instead of ordered (OrderedStream).
    #[arg(long, requires = "stream")]
    pub live: bool,
    /// --stream: frames to feed.
    #[arg(long, default_value_t = 120)]
    pub frames: usize,
    /// --stream: read the frames (rgb24, WIDTHxHEIGHT) from stdin first (at most
    /// --frames; fewer are cycled).
    #[arg(long, value_name = "WxH", value_parser = crate::args::size::wxh, requires = "stream", conflicts_with = "input")]
    pub raw: Option<Size>,
    /// --stream: the frames from the images of this folder (sorted by name, cycled;
    /// all of one size).
    #[arg(long, requires = "stream")]
    pub input: Option<PathBuf>,
    /// --stream --live: frames that may wait unstarted.
    #[arg(long, default_value_t = 1)]
    pub slot: usize,
    /// --stream --live: drop a frame not started within this many milliseconds.
    #[arg(long, value_name = "MS", requires = "live")]
    pub deadline_ms: Option<f64>,
}

pub fn run(args: Args) -> Result<()> {
    match args.stream {
        true => stream::run(&args),
        false => batch::run(&args),
    }
}

/// Nearest-rank percentile of sorted `v` (milliseconds).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats_of(samples: &[Duration]) -> serde_json::Value {
    let mut ms: Vec<f64> = samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    ms.sort_by(f64::total_cmp);
    json!({
        "min": ms[0],
        "median": percentile(&ms, 50.0),
        "p90": percentile(&ms, 90.0),
        "p99": percentile(&ms, 99.0),
        "max": ms[ms.len() - 1],
        "mean": ms.iter().sum::<f64>() / ms.len() as f64,
    })
}

/// The fields every `segtool bench` JSON report starts with (batch and stream modes alike):
/// what ran, where (and why there), at which size and contract.
fn report_header(
    args: &Args,
    seg: &Segmenter,
    (h, w): (u32, u32),
    fixed: bool,
) -> serde_json::Value {
    json!({
        "model": args.model.display().to_string(),
        "engine": seg.engine().name(),
        "requested_engine": args.engine.options.engine.as_str(),
        "engine_choice": seg.engine_choice(),
        "requested_providers": args.engine.options.providers,
        "provider": seg.engine().provider(),
        "fallback_reason": seg.fallback_summary(),
        "threads": args.engine.options.threads,
        "size": { "height": h, "width": w },
        "shapes": if fixed { "fixed" } else { "dynamic" },
        "classes": seg.spec().num_classes(),
        "contract": seg.contract().to_string(),
        "warmup": args.warmup,
        "segtool_version": env!("CARGO_PKG_VERSION"),
    })
}

/// `--json`: the report, written atomically.
fn write_json(args: &Args, report: &serde_json::Value) -> Result<()> {
    if let Some(path) = &args.json {
        let bytes = serde_json::to_vec_pretty(report).expect("report serialises");
        segtool_model_spec::io::write_atomic(path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
