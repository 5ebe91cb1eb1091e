use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_calibration::report::{compare, CompareOptions};
use segtool_calibration::{
    calibrate, list_images, load_model, model_spec, write_atomic, CalibrationOptions, Method,
};

#[derive(clap::Args)]
pub struct Args {
    /// Float ONNX model (a `segtool export`).
    #[arg(long)]
    pub model: PathBuf,
    /// Folder of calibration images (png, jpg, jpeg), used in name order.
    #[arg(long)]
    pub images: PathBuf,
    /// Masks (`<image stem>.png`, class per pixel, 255 ignored): the report adds mIoU.
    #[arg(long)]
    pub labels: Option<PathBuf>,
    /// minmax | percentile | entropy (TensorRT's KL) | mse.
    #[arg(long, default_value = "entropy", value_parser = parse_method)]
    pub method: Method,
    /// Percentile of |x| kept by `--method percentile`.
    #[arg(long, default_value_t = 99.99)]
    pub percentile: f64,
    /// Number of calibration images.
    #[arg(long, default_value_t = 100)]
    pub samples: usize,
    /// Weights quantised per output channel (axis 0) instead of per tensor.
    #[arg(long)]
    pub per_channel: bool,
    /// Nodes left in float, comma-separated node names.
    #[arg(long, value_delimiter = ',')]
    pub keep_float: Vec<String>,
    /// Output QDQ model (written atomically).
    #[arg(short = 'o', long = "out")]
    pub out: PathBuf,
    /// Also write a TensorRT calibration cache (EntropyCalibration2 text format).
    #[arg(long)]
    pub trt_cache: Option<PathBuf>,
    /// Write the int8 vs fp32 report as JSON here (text goes to stdout either way).
    #[arg(long)]
    pub report: Option<PathBuf>,
    /// Images compared in the report.
    #[arg(long, default_value_t = 8)]
    pub report_samples: usize,
    /// Timed ORT CPU runs per model in the report (0: no timing).
    #[arg(long, default_value_t = 10)]
    pub latency_runs: usize,
    /// Same-size images per calibration run.
    #[arg(long, default_value_t = 4)]
    pub batch_size: usize,
    /// ONNX Runtime intra-op threads (default: ONNX Runtime's choice).
    #[arg(long)]
    pub threads: Option<usize>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
}

fn parse_method(s: &str) -> Result<Method, String> {
    s.parse()
}

pub fn run(args: Args) -> Result<()> {
    let model = load_model(&args.model)?;
    let spec = model_spec(&model).with_context(|| args.model.display().to_string())?;
    let images = list_images(&args.images)?;
    let opts = CalibrationOptions {
        method: args.method,
        percentile: args.percentile,
        samples: args.samples,
        per_channel: args.per_channel,
        keep_float: args.keep_float.clone(),
        batch_size: args.batch_size,
        threads: args.threads,
        progress: !args.quiet,
        ..Default::default()
    };
    let cal = calibrate(&model, &images, &opts)
        .with_context(|| format!("calibrating {}", args.model.display()))?;
    write_atomic(&args.out, &cal.model)?;
    eprintln!(
        "wrote {} ({} tensors calibrated with {} on {} images, {} weights per {})",
        args.out.display(),
        cal.thresholds.len(),
        args.method.name(),
        cal.samples,
        cal.plan.nodes.len(),
        if args.per_channel {
            "channel"
        } else {
            "tensor"
        }
    );
    if let Some(path) = &args.trt_cache {
        write_atomic(path, cal.trt_cache.as_bytes())?;
        eprintln!("wrote TensorRT calibration cache {}", path.display());
    }
    let report = compare(
        &model,
        &cal.model,
        &cal.plan.layer_outputs,
        &images,
        &spec,
        args.method.name(),
        &CompareOptions {
            samples: args.report_samples,
            labels: args.labels.clone(),
            latency_runs: args.latency_runs,
            threads: args.threads,
        },
    )
    .context("comparing int8 with fp32")?;
    print!("{}", report.to_text());
    if let Some(path) = &args.report {
        let mut json = report.to_json();
        json["tensors"] = cal
            .thresholds
            .iter()
            .map(|(name, t)| {
                let absmax = cal.stats[name].range.absmax();
                (
                    name.clone(),
                    serde_json::json!({"threshold": t, "scale": t / 127.0, "absmax": absmax}),
                )
            })
            .collect::<serde_json::Map<_, _>>()
            .into();
        let json = serde_json::to_string_pretty(&json)?;
        write_atomic(path, json.as_bytes())?;
    }
    Ok(())
}
