//! Batch mode: each `--batch-sizes` size timed on the same synthetic images, with
//! pre-processing, engine and post-processing apart.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::RgbImage;
use segtool_runtime::Segmenter;
use serde_json::json;

use super::{report_header, stats_of, write_json, Args};
use crate::args::engine::describe;

pub(super) fn run(args: &Args) -> Result<()> {
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
    let (h, w) = (args.size.height, args.size.width);
    let fixed_size = (!args.dynamic_shapes && args.engine.onnx_runtime()).then_some(args.size.hw());
    let mut seg = args.engine.request(fixed_size).open(&args.model)?;
    eprintln!("{}", describe(&seg));
    let mut report = report_header(args, &seg, (h, w), fixed_size.is_some());
    let all_images = synthetic_images(*args.batch_sizes.iter().max().unwrap(), h, w);
    let mut results = Vec::new();
    for &n in &args.batch_sizes {
        let row = time_batch(&mut seg, &all_images[..n], args)?;
        eprintln!(
            "batch {n}: {} runs, median {:.2} ms",
            row["iterations"],
            row["latency_ms"]["median"].as_f64().unwrap()
        );
        results.push(row);
    }
    report["duration_s"] = json!(args.duration);
    report["results"] = json!(results);
    // What the nodes ran in (OpenVINO), read back after the runs.
    if let Some(ran_in) = seg.engine().ran_in() {
        eprintln!("{ran_in}");
        report["ran_in"] = json!(ran_in);
    }
    print_table(args, &report);
    write_json(args, &report)
}

/// Times `images` as one batch: `--warmup` runs, then `--iterations` (or `--duration`)
/// timed ones; one JSON row.
fn time_batch(seg: &mut Segmenter, images: &[RgbImage], args: &Args) -> Result<serde_json::Value> {
    let n = images.len();
    let (h, w) = (args.size.height, args.size.width);
    // The runtime's three stages, timed apart: prepare, engine, decode.
    let mut step = || -> Result<[Duration; 3]> {
        let t0 = Instant::now();
        let prepared = seg.preparer().prepare(images)?;
        let t1 = Instant::now();
        let scored = seg
            .run(prepared)
            .with_context(|| format!("batch {n} at {h}x{w}"))?;
        let t2 = Instant::now();
        let masks = scored.decode()?;
        let t3 = Instant::now();
        std::hint::black_box(masks);
        Ok([t1 - t0, t2 - t1, t3 - t2])
    };
    for _ in 0..args.warmup {
        step()?;
    }
    let iterations = args.iterations.unwrap_or(20);
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
    Ok(json!({
        "batch_size": n,
        "iterations": total.len(),
        "latency_ms": stats_of(&total),
        "preprocess_ms": stats_of(&pre),
        "engine_ms": stats_of(&eng),
        "postprocess_ms": stats_of(&post),
        "throughput_ips": (n * total.len()) as f64 / timed.max(1e-12),
    }))
}

/// The results as a table on stdout.
fn print_table(args: &Args, report: &serde_json::Value) {
    let (h, w) = (args.size.height, args.size.width);
    println!(
        "model {}  engine {}  provider {}  threads {}  size {h}x{w}{}",
        args.model.display(),
        report["engine"].as_str().unwrap_or_default(),
        report["provider"].as_str().unwrap_or_default(),
        args.engine
            .options
            .threads
            .map_or_else(|| "default".to_string(), |t| t.to_string()),
        if report["shapes"] == "fixed" {
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
    for r in report["results"].as_array().into_iter().flatten() {
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
