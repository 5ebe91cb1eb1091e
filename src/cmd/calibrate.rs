use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_calibration::auto::{
    auto_calibrate, holdout_split, AutoOptions, MixEngine, Target, Written,
};
use segtool_calibration::qdq::{Layout, WeightRange};
use segtool_calibration::report::{compare, CompareOptions};
use segtool_calibration::{
    calibrate, list_images, load_model, write_atomic, CalibrationOptions, Feed, Method,
};
use segtool_model_spec::progress::Reporter;
use segtool_runtime::card::ModelCard;
use segtool_runtime::openvino::{Device, OpenVinoOptions, Precision};
use segtool_runtime::EngineKind;

use crate::args::card::CardArgs;
use crate::args::progress::Bar;

#[derive(clap::Args)]
pub struct Args {
    /// Float ONNX model: a `segtool export`, or a file from elsewhere with its model card
    /// (the card flags below, a sidecar MODEL.segtool.toml or --card FILE; the card is
    /// written into the INT8 file).
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
    /// Integer range of the weights: full [-127, 127], or reduced [-63, 63], which ONNX
    /// Runtime's x86 kernels without VNNI need to avoid int16 saturation. auto: reduced
    /// when this CPU lacks VNNI (x86_64), else full. Recorded in the model's metadata.
    #[arg(long, value_enum, default_value = "auto")]
    pub weight_range: WeightRangeArg,
    /// Activation type and Q/DQ placement. portable: int8, zero point 0, one Q/DQ pair
    /// per consumer (TensorRT, ONNX Runtime on any provider, tract). ort-cpu: uint8, one
    /// pair per tensor, Relus folded into the quantised range and Adds quantised, which
    /// ONNX Runtime's CPU provider fuses further (QLinearConv with the Relu, QLinearAdd);
    /// TensorRT refuses its nonzero zero points. openvino: NNCF's placement for
    /// OpenVINO's CPU plugin: as ort-cpu, but signed activations int8 with zero point 0
    /// and the attention-weighted sums quantised (its int8 MatMuls take them). Recorded
    /// in the model's metadata.
    #[arg(long, value_enum, default_value = "portable")]
    pub layout: LayoutArg,
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
    /// Accuracy-driven mix: keep few layers in float so that --min-agreement or
    /// --max-miou-drop holds on held-out images: bisection over how many of the worst
    /// layers by SNR stay float, then each chosen layer back to INT8 if the target still
    /// holds. One line per evaluation (k, the metric, elapsed, time left). Writes the
    /// model when it meets every target (see --accept-miss), and beside it `<out
    /// stem>.auto.csv`, `.auto.json` and `.auto.png` (the trade-off: fp32, all-INT8, each
    /// mix measured; the chosen point marked; the verdict says what was written).
    #[arg(long)]
    pub auto: bool,
    /// --auto target: argmax agreement with fp32 on the validation images, e.g. 0.995.
    #[arg(long, requires = "auto", conflicts_with = "max_miou_drop")]
    pub min_agreement: Option<f64>,
    /// --auto target: largest mIoU loss against fp32 in mIoU points (0.5 = 0.5 points),
    /// against --labels (masks of the validation images).
    #[arg(long, requires = "auto", requires = "labels")]
    pub max_miou_drop: Option<f64>,
    /// --auto: held-out validation images. Without it, the --images folder is split in name
    /// order: odd positions validate, even positions calibrate.
    #[arg(long, requires = "auto")]
    pub val_images: Option<PathBuf>,
    /// --auto: validation images used (the first in name order).
    #[arg(long, default_value_t = 200)]
    pub val_samples: usize,
    /// --auto: fraction of the validation images held out of the search, spread evenly
    /// over them, for a final check of the chosen mix (reported; 0: no final check).
    #[arg(long, default_value_t = 0.25)]
    pub final_check: f64,
    /// --auto with --min-agreement: the search counts a mix as meeting the target when
    /// this one-sided lower confidence bound of its mean per-image agreement does
    /// (Student's t over the search images), a margin for images it did not see (0: the
    /// agreement itself).
    #[arg(long, default_value_t = 0.95)]
    pub confidence: f64,
    /// --auto: worst layers by SNR searched. Evaluations of the validation set, after the
    /// all-INT8 one: at most 1 + 2 ceil(log2 N), all N float, the bisection and as many
    /// refinement trials (N = 24: at most 11, against a greedy search's 300).
    #[arg(long, default_value_t = 24)]
    pub candidates: usize,
    /// --auto: also require this speed-up over fp32 in the --engine (e.g. 1.3; needs
    /// --latency-runs of at least 1). A miss is a miss like the accuracy target's: see
    /// --accept-miss.
    #[arg(long, requires = "auto")]
    pub min_speedup: Option<f64>,
    /// --auto: write the model and exit 0 even when it misses a target: no mix meets the
    /// accuracy target, the chosen one misses --min-speedup, or the final check on
    /// held-out images misses the accuracy target (default: the trade-off table is
    /// written, the model and its --trt-cache are not, and the exit status is 1).
    #[arg(long, requires = "auto")]
    pub accept_miss: bool,
    /// --auto: search images each layer's cost is measured on, the layer alone in INT8
    /// against fp32 (0: rank the layers by SNR alone).
    #[arg(long, default_value_t = 8, requires = "auto")]
    pub cost_samples: usize,
    /// --auto: seconds the cost ranking may take; layers not reached keep their SNR
    /// order after those measured.
    #[arg(long, default_value_t = 120.0, requires = "auto")]
    pub cost_budget_s: f64,
    /// --auto: latency rounds over all the table's models (each --latency-runs runs).
    #[arg(long, default_value_t = 3)]
    pub latency_rounds: usize,
    /// --auto: the engine the model will ship on, where every mix is judged and timed
    /// with --threads: ort (ONNX Runtime's CPU provider) or openvino. The same INT8 file
    /// agrees and runs differently in each; a mix slower than fp32 there is not chosen.
    #[arg(long, default_value_t = EngineKind::Ort, value_parser = parse_mix_engine)]
    pub engine: EngineKind,
    /// --auto --engine openvino: the device (CPU, GPU, NPU, AUTO).
    #[arg(long, default_value_t = Device::Cpu)]
    pub device: Device,
    /// --auto --engine openvino: the precision of the layers left in float (f32, bf16).
    #[arg(long, default_value_t = Precision::F32)]
    pub precision: Precision,
    /// What an ONNX file from elsewhere needs beside its graph.
    #[command(flatten)]
    pub card: CardArgs,
}

fn parse_method(s: &str) -> Result<Method, String> {
    s.parse()
}

/// The runtime's engine names, of which `--auto` measures in two.
fn parse_mix_engine(s: &str) -> Result<EngineKind, String> {
    match s.parse()? {
        kind @ (EngineKind::Ort | EngineKind::OpenVino) => Ok(kind),
        other => Err(format!(
            "--auto judges and times mixes in the engine the model ships on: ort or \
             openvino, not {other}"
        )),
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.auto {
        return run_auto(args);
    }
    let carded = args.card.carded(&args.model)?;
    let model = load_model(&carded.path)?;
    let opts = calibration_options(&args, carded.card)?;
    let feed = Feed::of_model(&model, opts.card.as_ref())
        .with_context(|| args.model.display().to_string())?;
    let images = list_images(&args.images)?;
    let cal = calibrate(&model, &images, &opts)
        .with_context(|| format!("calibrating {}", args.model.display()))?;
    write_atomic(&args.out, &cal.model)?;
    eprintln!(
        "wrote {} ({} tensors calibrated with {} on {} images, {} weights per {}, {} range)",
        args.out.display(),
        cal.thresholds.len(),
        args.method.name(),
        cal.samples,
        cal.plan.nodes.len(),
        if args.per_channel {
            "channel"
        } else {
            "tensor"
        },
        opts.weight_range.name()
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
        &feed,
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

fn calibration_options(args: &Args, card: Option<ModelCard>) -> Result<CalibrationOptions> {
    Ok(CalibrationOptions {
        method: args.method,
        percentile: args.percentile,
        samples: args.samples,
        per_channel: args.per_channel,
        weight_range: match args.weight_range {
            WeightRangeArg::Auto => WeightRange::for_this_cpu(),
            WeightRangeArg::Full => WeightRange::Full,
            WeightRangeArg::Reduced => WeightRange::Reduced,
        },
        layout: match args.layout {
            LayoutArg::Portable => Layout::Portable,
            LayoutArg::OrtCpu => Layout::OrtCpu,
            LayoutArg::Openvino => Layout::OpenVino,
        },
        keep_float: args.keep_float.clone(),
        batch_size: args.batch_size,
        threads: args.threads,
        progress: if args.quiet {
            Reporter::default()
        } else {
            Reporter::new(std::sync::Arc::new(Bar::default()))
        },
        card,
        ..Default::default()
    })
}

/// `<out without .onnx>.auto.<ext>`.
fn beside(out: &std::path::Path, ext: &str) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".onnx").unwrap_or(&name);
    out.with_file_name(format!("{stem}.auto.{ext}"))
}

fn run_auto(args: Args) -> Result<()> {
    let target = match (args.min_agreement, args.max_miou_drop) {
        (Some(a), None) => Target::MinAgreement(a),
        (None, Some(p)) => Target::MaxMiouDrop(p),
        _ => anyhow::bail!(
            "--auto needs a target: --min-agreement A or --max-miou-drop P (with --labels)"
        ),
    };
    let carded = args.card.carded(&args.model)?;
    let model = load_model(&carded.path)?;
    let images = list_images(&args.images)?;
    let (calib, val) = match &args.val_images {
        Some(dir) => (images, list_images(dir)?),
        None => holdout_split(&images),
    };
    let opts = calibration_options(&args, carded.card)?;
    let auto = AutoOptions {
        target,
        labels: args.labels.clone(),
        candidates: args.candidates,
        val_samples: args.val_samples,
        final_check: args.final_check,
        confidence: args.confidence,
        snr_samples: args.report_samples,
        latency_runs: args.latency_runs,
        latency_rounds: args.latency_rounds,
        min_speedup: args.min_speedup,
        cost_samples: args.cost_samples,
        cost_budget_s: args.cost_budget_s,
        engine: MixEngine {
            kind: args.engine,
            openvino: OpenVinoOptions {
                device: args.device,
                precision: args.precision,
                ..OpenVinoOptions::new()
            },
        },
    };
    let mut r = auto_calibrate(&model, &calib, &val, &opts, &auto)
        .with_context(|| format!("--auto calibration of {}", args.model.display()))?;
    // A miss (accuracy, speed or final check) is never shipped silently: no model, nor
    // its TensorRT cache, unless --accept-miss; the verdict says which happened.
    let misses = r.misses();
    let write = misses.is_empty() || args.accept_miss;
    r.written = if write {
        write_atomic(&args.out, &r.model)?;
        if let Some(path) = &args.trt_cache {
            write_atomic(path, r.trt_cache.as_bytes())?;
            eprintln!("wrote TensorRT calibration cache {}", path.display());
        }
        Written::To(args.out.clone())
    } else {
        Written::Withheld(args.out.clone())
    };
    print!("{}", r.to_text());
    let (csv, json, png) = (
        beside(&args.out, "csv"),
        beside(&args.out, "json"),
        beside(&args.out, "png"),
    );
    write_atomic(&csv, r.csv().as_bytes())?;
    write_atomic(
        &json,
        serde_json::to_string_pretty(&r.to_json())?.as_bytes(),
    )?;
    write_atomic(&png, &segtool_calibration::plot::tradeoff_png_bytes(&r)?)?;
    if let Some(path) = &args.report {
        write_atomic(path, serde_json::to_string_pretty(&r.to_json())?.as_bytes())?;
    }
    eprintln!(
        "wrote {}the trade-off table {}, {}, chart {} (x: ms in {}, y: {}; black fp32, red int8, blue steps, green ring chosen, grey target)",
        match write {
            true => format!("{} and ", args.out.display()),
            false => String::new(),
        },
        csv.display(),
        json.display(),
        png.display(),
        r.engine,
        r.target.metric_name()
    );
    if !misses.is_empty() {
        let missed: Vec<_> = misses.iter().map(|m| m.name()).collect();
        let line = format!(
            "--auto missed ({}): {}",
            missed.join(", "),
            r.written_line()
        );
        anyhow::ensure!(write, line);
        // Accepted: said on stderr as well as in the verdict.
        eprintln!("{line}");
    }
    Ok(())
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum LayoutArg {
    Portable,
    OrtCpu,
    Openvino,
}

#[derive(Clone, Copy, Debug, clap::ValueEnum)]
pub enum WeightRangeArg {
    Auto,
    Full,
    Reduced,
}
