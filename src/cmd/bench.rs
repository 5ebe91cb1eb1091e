//! `segtool bench`: latency and throughput of an exported model on synthetic images,
//! per batch size, with pre-processing (normalisation), engine and post-processing
//! (argmax to a mask at image size) timed separately.
//!
//! Each timed iteration runs the library path `Segmenter` uses, single-threaded outside
//! the engine: `Segmenter::prepare_input` (normalisation, or packing uint8 NHWC pixels for
//! `--preprocess` exports), `Segmenter::run_prepared`, then `argmax` (+ `resize_nearest`
//! when the output is not at input resolution; a class map from an `--argmax` export is
//! taken as is). Latency is the sum of the three.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::RgbImage;
use serde_json::json;

#[derive(clap::Args)]
pub struct Args {
    /// Exported model (.onnx from `segtool export`).
    #[arg(long)]
    pub model: PathBuf,
    /// ort or tract.
    #[arg(long, default_value = "ort")]
    pub engine: String,
    /// ONNX Runtime execution providers in order of preference (see `segtool infer`).
    #[arg(long, value_delimiter = ',', default_value = "cpu")]
    pub providers: Vec<String>,
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
    #[arg(long, value_parser = parse_hxw, default_value = "512x1024")]
    pub size: (u32, u32),
    /// ONNX Runtime intra-op threads (default: ONNX Runtime's choice).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Also write the results as JSON (atomically).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A requested execution provider that does not load is an error, not a CPU fallback.
    #[arg(long)]
    pub strict: bool,
    /// Keep the model's symbolic height/width instead of building the ONNX Runtime
    /// session for --size (what `segtool infer` does when all inputs share a size).
    #[arg(long)]
    pub dynamic_shapes: bool,
}

fn parse_hxw(s: &str) -> Result<(u32, u32), String> {
    let (w, h) = super::infer::parse_wxh(s).map_err(|_| {
        format!("`{s}`: expected HEIGHTxWIDTH with positive integers, e.g. 512x1024")
    })?;
    // parse_wxh reads "AxB" as (A, B); here A is the height.
    Ok((w, h))
}

/// Nearest-rank percentile of sorted `v` (milliseconds).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn stats(samples: &[Duration]) -> serde_json::Value {
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

/// Deterministic noise images (xorshift), so every run and engine sees the same input.
fn synthetic_images(n: usize, h: u32, w: u32) -> Vec<RgbImage> {
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    (0..n)
        .map(|_| {
            let mut img = RgbImage::new(w, h);
            for b in img.iter_mut() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                *b = (state >> 56) as u8;
            }
            img
        })
        .collect()
}

pub fn run(args: Args) -> Result<()> {
    if args.batch_sizes.is_empty() || args.batch_sizes.contains(&0) {
        bail!("--batch-sizes: give positive sizes, e.g. 1,2,4");
    }
    if let Some(d) = args.duration {
        if !(d > 0.0 && d.is_finite()) {
            bail!("--duration must be a positive number of seconds");
        }
    }
    if args.iterations == Some(0) {
        bail!("--iterations must be at least 1");
    }
    let iterations = args.iterations.unwrap_or(20);
    let (h, w) = args.size;
    let fixed_size =
        (!args.dynamic_shapes && args.engine == "ort").then_some((h as usize, w as usize));
    let mut seg = super::infer::open_segmenter_strict(
        &args.model,
        &args.engine,
        &args.providers,
        args.threads,
        args.strict,
        fixed_size,
    )?;
    let contract = seg.contract();
    let spec = seg.spec().clone();
    let engine_name = seg.engine().name().to_string();
    let provider = seg.engine().provider().to_string();
    let fallback = seg.engine().fallback_reason().map(str::to_string);
    eprintln!(
        "engine {engine_name} on {provider}{}",
        fallback
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default()
    );
    let all_images = synthetic_images(*args.batch_sizes.iter().max().unwrap(), h, w);

    let mut results = Vec::new();
    for &n in &args.batch_sizes {
        let images = &all_images[..n];
        let mut step = || -> Result<[Duration; 3]> {
            let t0 = Instant::now();
            let input = seg.prepare_input(images)?;
            let t1 = Instant::now();
            let out = seg
                .run_prepared(input.view())
                .with_context(|| format!("batch {n} at {h}x{w}"))?;
            let t2 = Instant::now();
            if spec.num_classes() > 256 {
                bail!("{} classes do not fit uint8 masks", spec.num_classes());
            }
            let masks: Vec<_> = (0..n)
                .map(|i| out.mask(i, h as usize, w as usize))
                .collect();
            let t3 = Instant::now();
            std::hint::black_box(masks);
            Ok([t1 - t0, t2 - t1, t3 - t2])
        };
        for _ in 0..args.warmup {
            step()?;
        }
        let (mut pre, mut eng, mut post, mut total) = (vec![], vec![], vec![], vec![]);
        let started = Instant::now();
        loop {
            let [a, b, c] = step()?;
            pre.push(a);
            eng.push(b);
            post.push(c);
            total.push(a + b + c);
            let done = match args.duration {
                Some(d) => started.elapsed().as_secs_f64() >= d,
                None => total.len() >= iterations,
            };
            if done {
                break;
            }
        }
        let timed: f64 = total.iter().map(Duration::as_secs_f64).sum();
        let row = json!({
            "batch_size": n,
            "iterations": total.len(),
            "latency_ms": stats(&total),
            "preprocess_ms": stats(&pre),
            "engine_ms": stats(&eng),
            "postprocess_ms": stats(&post),
            "throughput_ips": (n * total.len()) as f64 / timed.max(1e-12),
        });
        eprintln!(
            "batch {n}: {} runs, median {:.2} ms",
            total.len(),
            row["latency_ms"]["median"].as_f64().unwrap()
        );
        results.push(row);
    }

    let report = json!({
        "model": args.model.display().to_string(),
        "engine": engine_name,
        "requested_engine": args.engine,
        "requested_providers": args.providers,
        "provider": provider,
        "fallback_reason": fallback,
        "threads": args.threads,
        "size": { "height": h, "width": w },
        "shapes": if fixed_size.is_some() { "fixed" } else { "dynamic" },
        "classes": spec.num_classes(),
        "contract": contract.to_string(),
        "warmup": args.warmup,
        "duration_s": args.duration,
        "segtool_version": env!("CARGO_PKG_VERSION"),
        "results": results,
    });

    println!(
        "model {}  engine {engine_name}  provider {provider}  threads {}  size {h}x{w}{}",
        args.model.display(),
        args.threads
            .map_or_else(|| "default".to_string(), |t| t.to_string()),
        if fixed_size.is_some() {
            " (session fixed to it)"
        } else {
            ""
        }
    );
    println!(
        "{:>5} {:>6} {:>9} {:>9} {:>9} {:>9} {:>8} {:>10} {:>8} {:>8}",
        "batch",
        "runs",
        "min ms",
        "median",
        "p90",
        "p99",
        "pre ms",
        "engine ms",
        "post ms",
        "img/s"
    );
    for r in report["results"].as_array().unwrap() {
        let l = &r["latency_ms"];
        let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
        println!(
            "{:>5} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>8.2} {:>10.2} {:>8.2} {:>8.2}",
            r["batch_size"].as_u64().unwrap_or(0),
            r["iterations"].as_u64().unwrap_or(0),
            f(&l["min"]),
            f(&l["median"]),
            f(&l["p90"]),
            f(&l["p99"]),
            f(&r["preprocess_ms"]["median"]),
            f(&r["engine_ms"]["median"]),
            f(&r["postprocess_ms"]["median"]),
            f(&r["throughput_ips"]),
        );
    }
    println!("(pre/engine/post: medians per batch; img/s over the timed runs)");

    if let Some(path) = &args.json {
        let bytes = serde_json::to_vec_pretty(&report).expect("report serialises");
        segtool_core::io::write_atomic(path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
