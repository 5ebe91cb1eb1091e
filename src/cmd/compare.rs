//! `segtool compare A.onnx B.onnx --images DIR`: per-layer differences of two exports of
//! one checkpoint (the work is `segtool_calibration::compare`), then which kernels ONNX
//! Runtime ran for each file (`segtool_calibration::kernels`: int8, float, conversions),
//! and with `--openvino PRECISION` the precision each node ran in in OpenVINO's CPU
//! plugin (`OpenVinoEngine::node_precisions`).

use std::path::PathBuf;

use anyhow::{Context, Result};
use segtool_calibration::compare::{compare_models, CompareOptions};
use segtool_calibration::kernels::census;
use segtool_calibration::{list_images, load_model, read_image, write_atomic, Feed};

use segtool_runtime::expert::{Engine, EngineInput, OpenVinoEngine};
use segtool_runtime::openvino::{OpenVinoOptions, Precision};

use crate::args::card::CardArgs;

#[derive(clap::Args)]
pub struct Args {
    /// Reference model (e.g. the fp32 export).
    pub a: PathBuf,
    /// Model compared against it (INT8 QDQ, fp16, another target's export).
    pub b: PathBuf,
    /// Folder of images (png, jpg, jpeg), used in name order, prepared as A's spec (or,
    /// for a file from elsewhere, its model card) says.
    #[arg(long)]
    pub images: PathBuf,
    /// Images compared.
    #[arg(long, default_value_t = 8)]
    pub samples: usize,
    /// A layer is past the tolerance when max |A - B| exceeds this (default 1e-4, or no
    /// limit when --min-snr / --min-cosine is given).
    #[arg(long)]
    pub tol: Option<f64>,
    /// ...or when its SNR (dB) is below this.
    #[arg(long)]
    pub min_snr: Option<f64>,
    /// ...or when its cosine similarity is below this.
    #[arg(long)]
    pub min_cosine: Option<f64>,
    /// Write the per-layer table as JSON here (text goes to stdout either way).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// ONNX Runtime intra-op threads, and OpenVINO's with --openvino (default: the
    /// engine's choice).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also run each file once in OpenVINO's CPU plugin with this precision for float32
    /// layers (f32, bf16) and report how many nodes ran in each precision.
    #[arg(long, value_name = "PRECISION")]
    pub openvino: Option<Precision>,
    /// A's model card, for a file from elsewhere.
    #[command(flatten)]
    pub card: CardArgs,
}

pub fn run(args: Args) -> Result<()> {
    let carded = args.card.carded(&args.a)?;
    let a = load_model(&carded.path)?;
    let b = load_model(&args.b)?;
    let card = carded.card;
    let feed = Feed::of_model(&a, card.as_ref()).with_context(|| args.a.display().to_string())?;
    let images = list_images(&args.images)?;
    let opts = CompareOptions {
        samples: args.samples,
        tol: args
            .tol
            .unwrap_or(if args.min_snr.is_some() || args.min_cosine.is_some() {
                f64::INFINITY
            } else {
                1e-4
            }),
        min_snr_db: args.min_snr,
        min_cosine: args.min_cosine,
        threads: args.threads,
    };
    let c = compare_models(&a, &b, &images, &feed, &opts)
        .with_context(|| format!("comparing {} with {}", args.a.display(), args.b.display()))?;
    print!("{}", c.to_text());
    // What each file ran as in ONNX Runtime (CPU): its profile of one run on the first
    // image, after ORT's own graph optimisations.
    let first = images.first().context("no images")?;
    let x = feed.tensor(&read_image(first)?)?;
    let mut kernels = serde_json::Map::new();
    for (label, path) in [("a", &carded.path), ("b", &args.b)] {
        let bytes = std::fs::read(path).with_context(|| path.display().to_string())?;
        let k = census(&bytes, x.view(), args.threads)
            .with_context(|| format!("profiling {} in ONNX Runtime", path.display()))?;
        print!(
            "ONNX Runtime CPU kernels of {} (profile of one run, {}):\n{}",
            path.display(),
            first.display(),
            k.summary()
        );
        kernels.insert(label.into(), k.to_json());
    }
    let openvino = match args.openvino {
        Some(precision) => openvino_census(&args, &carded.path, precision, x.view(), first)?,
        None => serde_json::Value::Null,
    };
    if let Some(path) = &args.json {
        let mut json = c.to_json();
        json["openvino"] = openvino;
        json["a"] = args.a.display().to_string().into();
        json["b"] = args.b.display().to_string().into();
        json["kernels"] = kernels.into();
        write_atomic(path, serde_json::to_string_pretty(&json)?.as_bytes())?;
    }
    Ok(())
}

/// What each file ran as in OpenVINO's CPU plugin at `precision`: one run on the first
/// image, then the precision of each node of the compiled graph, counted.
fn openvino_census(
    args: &Args,
    a: &std::path::Path,
    precision: Precision,
    x: ndarray::ArrayView4<f32>,
    first: &std::path::Path,
) -> Result<serde_json::Value> {
    let options = OpenVinoOptions {
        precision,
        threads: args.threads,
        ..OpenVinoOptions::new()
    };
    let mut out = serde_json::Map::new();
    for (label, path) in [("a", a), ("b", args.b.as_path())] {
        let mut engine = OpenVinoEngine::open(path, &options)?;
        engine
            .run(EngineInput::NchwF32(x))
            .with_context(|| format!("running {} in OpenVINO", path.display()))?;
        let nodes = engine.node_precisions()?;
        println!(
            "OpenVINO {} CPU, {}: {} (one run, {}): {nodes}",
            engine.version(),
            precision.as_str(),
            path.display(),
            first.display()
        );
        out.insert(label.into(), serde_json::json!(nodes.counts()));
    }
    Ok(out.into())
}
