//! `segtool bench`: latency and throughput of an exported model on synthetic images,
//! per batch size, with pre-processing (normalisation), engine and post-processing
//! (argmax to a mask at image size) timed separately.
//!
//! Each timed iteration runs the library path `Segmenter` uses, single-threaded outside
//! the engine: `Segmenter::prepare_input` (normalisation, or packing uint8 NHWC pixels for
//! `--preprocess` exports), `Segmenter::run_prepared`, then `argmax` (+ `resize_nearest`
//! when the output is not at input resolution; a class map from an `--argmax` export is
//! taken as is). Latency is the sum of the three.
//!
//! `--stream --fps F` measures a video stream instead: a producer thread feeds frames at
//! a fixed rate (from `--raw WxH` stdin, a `--input` folder, or generated panning
//! shapes) into one session behind an `OrderedStream` (every frame, in order) or, with
//! `--live`, a `LatestStream` (newest frame wins, the rest dropped and counted), and each
//! answered frame's arrival-to-mask latency is recorded.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::RgbImage;
use serde_json::json;

use crate::args::engine::{describe, EngineFlags};
use crate::args::size::Size;

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
    if args.stream {
        return run_stream(&args);
    }
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
    let (h, w) = (args.size.height, args.size.width);
    let fixed_size = (!args.dynamic_shapes && args.engine.onnx_runtime()).then_some(args.size.hw());
    let mut seg = args.engine.request(fixed_size).open(&args.model)?;
    let contract = seg.contract();
    let spec = seg.spec().clone();
    let engine_name = seg.engine().name().to_string();
    let provider = seg.engine().provider().to_string();
    let fallback = seg.fallback_summary();
    eprintln!("{}", describe(&seg));
    let all_images = synthetic_images(*args.batch_sizes.iter().max().unwrap(), h, w);

    let mut results = Vec::new();
    for &n in &args.batch_sizes {
        let images = &all_images[..n];
        let mut step = || -> Result<[Duration; 3]> {
            let t0 = Instant::now();
            let input = seg.prepare_input(images)?;
            let t1 = Instant::now();
            let out = seg
                .run_prepared(input.view(), images)
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
            "latency_ms": stats_of(&total),
            "preprocess_ms": stats_of(&pre),
            "engine_ms": stats_of(&eng),
            "postprocess_ms": stats_of(&post),
            "throughput_ips": (n * total.len()) as f64 / timed.max(1e-12),
        });
        eprintln!(
            "batch {n}: {} runs, median {:.2} ms",
            total.len(),
            row["latency_ms"]["median"].as_f64().unwrap()
        );
        results.push(row);
    }

    let mut report = report_header(
        &args,
        &engine_name,
        &provider,
        &fallback,
        (h, w),
        fixed_size.is_some(),
        spec.num_classes(),
        &contract.to_string(),
    );
    report["duration_s"] = json!(args.duration);
    report["results"] = json!(results);
    // What the nodes ran in (OpenVINO), read back after the runs.
    if let Some(ran_in) = seg.engine().ran_in() {
        eprintln!("{ran_in}");
        report["ran_in"] = json!(ran_in);
    }

    println!(
        "model {}  engine {engine_name}  provider {provider}  threads {}  size {h}x{w}{}",
        args.model.display(),
        args.engine
            .threads
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
        segtool_spec::io::write_atomic(path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// Frames of a panning scene (a bright rectangle and a disc crossing a gradient), so a
/// stream has motion like a camera's.
fn panning_frames(n: usize, h: u32, w: u32) -> Vec<RgbImage> {
    (0..n)
        .map(|t| {
            let t = t as f64;
            let (rx, cx) = (
                (t * 3.0) % f64::from(w),
                f64::from(w) - (t * 2.0) % f64::from(w),
            );
            let cy = f64::from(h) * 0.6;
            let r = f64::from(h.min(w)) * 0.15;
            RgbImage::from_fn(w, h, |x, y| {
                let (xf, yf) = (f64::from(x), f64::from(y));
                if (xf - cx).powi(2) + (yf - cy).powi(2) <= r * r {
                    image::Rgb([30, 200, 60])
                } else if xf >= rx && xf < rx + f64::from(w) * 0.2 && yf < f64::from(h) * 0.4 {
                    image::Rgb([220, 40, 40])
                } else {
                    image::Rgb([(x * 255 / w.max(1)) as u8, (y * 255 / h.max(1)) as u8, 120])
                }
            })
        })
        .collect()
}

/// The frames to feed: `--raw` stdin, an `--input` folder, or generated at `--size`.
fn stream_frames(args: &Args) -> Result<Vec<RgbImage>> {
    if let Some(Size {
        width: w,
        height: h,
    }) = args.raw
    {
        let bytes = w as usize * h as usize * 3;
        let mut stdin = std::io::stdin().lock();
        let mut frames = Vec::new();
        while frames.len() < args.frames {
            let mut buf = vec![0u8; bytes];
            match std::io::Read::read_exact(&mut stdin, &mut buf) {
                Ok(()) => frames.push(RgbImage::from_raw(w, h, buf).expect("frame size")),
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
                Err(e) => return Err(anyhow::Error::new(e).context("reading frames from stdin")),
            }
        }
        if frames.is_empty() {
            bail!("--raw {w}x{h}: stdin held no complete frame");
        }
        return Ok(frames);
    }
    if let Some(dir) = &args.input {
        let files = segtool_spec::images::list_images(dir)
            .with_context(|| format!("listing {}", dir.display()))?;
        let frames = files
            .iter()
            .take(args.frames)
            .map(|f| {
                image::open(f)
                    .map(|i| i.to_rgb8())
                    .with_context(|| format!("reading {}", f.display()))
            })
            .collect::<Result<Vec<_>>>()?;
        let Some(first) = frames.first() else {
            bail!("{}: no images", dir.display());
        };
        if frames.iter().any(|f| f.dimensions() != first.dimensions()) {
            bail!(
                "{}: the frames of a stream must share one size",
                dir.display()
            );
        }
        return Ok(frames);
    }
    Ok(panning_frames(
        args.frames.min(240),
        args.size.height,
        args.size.width,
    ))
}

/// `--stream`: feeds `--frames` frames at `--fps` into one session, ordered or newest
/// frame, and measures each answered frame's arrival-to-mask latency.
fn run_stream(args: &Args) -> Result<()> {
    use segtool_runtime::batching::LiveOutcome;
    use segtool_runtime::batching::{BatchConfig, BatchServer};
    use std::sync::Mutex;

    let fps = args.fps.context("--stream needs --fps")?;
    if !(fps > 0.0 && fps.is_finite()) {
        bail!("--fps must be a positive number");
    }
    if args.frames == 0 {
        bail!("--frames must be at least 1");
    }
    let frames = stream_frames(args)?;
    let (w, h) = frames[0].dimensions();
    let fixed =
        (!args.dynamic_shapes && args.engine.onnx_runtime()).then_some((h as usize, w as usize));
    let seg = args.engine.request(fixed).open(&args.model)?;
    let engine_name = seg.engine().name().to_string();
    let provider = seg.engine().provider().to_string();
    let fallback = seg.fallback_summary();
    let contract = seg.contract().to_string();
    let spec = seg.spec().clone();
    eprintln!("{}", describe(&seg));
    let config = BatchConfig::new()
        .with_max_batch(1)
        .with_max_wait(Duration::ZERO)
        .with_queue_capacity(args.frames.max(64));
    let server = BatchServer::from_segmenters(config, vec![seg])?;
    for i in 0..args.warmup {
        server.submit(frames[i % frames.len()].clone()).wait()?;
    }
    let warm = server.stats();
    let n = args.frames;
    let period = Duration::from_secs_f64(1.0 / fps);
    let mode = if args.live { "newest-frame" } else { "ordered" };
    let arrivals: Mutex<Vec<Option<Instant>>> = Mutex::new(vec![None; n]);
    let mut latencies: Vec<Duration> = Vec::new();
    let mut counts = (0u64, 0u64, 0u64); // replaced, expired, failed
    let started = Instant::now();
    let mut last_answer = started;
    let frame_of = |i: usize| frames[i % frames.len()].clone();
    let arrive = |i: usize| {
        let due = started + period.mul_f64(i as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let now = Instant::now();
        arrivals.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(now);
    };
    if args.live {
        let mut stream = server.latest_stream(args.slot.max(1));
        if let Some(ms) = args.deadline_ms {
            if !(ms > 0.0 && ms.is_finite()) {
                bail!("--deadline-ms must be a positive number of milliseconds");
            }
            stream = stream.with_deadline(Duration::from_secs_f64(ms / 1e3));
        }
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..n {
                    arrive(i);
                    stream.submit(frame_of(i));
                }
                stream.finish();
            });
            while let Some(f) = stream.next() {
                match f.outcome {
                    LiveOutcome::Answered(out) => {
                        std::hint::black_box(out);
                        last_answer = Instant::now();
                        latencies.push(last_answer - f.submitted);
                    }
                    LiveOutcome::Dropped(segtool_runtime::batching::DropReason::Deadline) => {
                        counts.1 += 1
                    }
                    LiveOutcome::Dropped(_) => counts.0 += 1,
                    LiveOutcome::Failed(_) => counts.2 += 1,
                }
            }
        });
    } else {
        let stream = server.ordered_stream(n);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..n {
                    arrive(i);
                    stream.push(frame_of(i));
                }
                stream.finish();
            });
            while let Some(out) = stream.next() {
                match out {
                    Ok(out) => {
                        last_answer = Instant::now();
                        let i = out.frame.expect("stream frames are numbered") as usize;
                        let at = arrivals.lock().unwrap_or_else(|e| e.into_inner())[i]
                            .expect("pushed after its arrival");
                        latencies.push(last_answer - at);
                    }
                    Err(_) => counts.2 += 1,
                }
            }
        });
    }
    if counts.2 > 0 {
        bail!("{} frame(s) failed in the engine", counts.2);
    }
    let stats = server.stats();
    let runs = stats.requests() - warm.requests();
    let engine_busy: Duration = stats.workers.iter().map(|w| w.busy).sum::<Duration>()
        - warm.workers.iter().map(|w| w.busy).sum::<Duration>();
    let engine_ms = engine_busy.as_secs_f64() * 1e3 / runs.max(1) as f64;
    let span = (last_answer - started).as_secs_f64();
    let answered = latencies.len();
    let row = json!({
        "mode": mode,
        "fps": fps,
        "frames": n,
        "answered": answered,
        "dropped": counts.0 + counts.1,
        "replaced": counts.0,
        "expired": counts.1,
        "answered_fps": answered as f64 / span.max(1e-12),
        "latency_ms": if latencies.is_empty() { serde_json::Value::Null } else { stats_of(&latencies) },
        "engine_ms_per_frame": engine_ms,
        "overload": fps * engine_ms / 1e3,
        "slot": args.live.then_some(args.slot.max(1)),
        "deadline_ms": args.deadline_ms,
    });
    let mut report = report_header(
        &args,
        &engine_name,
        &provider,
        &fallback,
        (h, w),
        fixed.is_some(),
        spec.num_classes(),
        &contract,
    );
    report["source"] = json!(if args.raw.is_some() {
        "raw"
    } else if args.input.is_some() {
        "folder"
    } else {
        "generated"
    });
    report["stream"] = row;
    let l = &report["stream"]["latency_ms"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "model {}  engine {engine_name}  provider {provider}  size {h}x{w}  stream {mode} at {fps} fps \
         ({:.1}x the engine's {:.1} ms per frame)",
        args.model.display(),
        fps * engine_ms / 1e3,
        engine_ms
    );
    println!(
        "{n} frames: {answered} answered ({:.1} fps), {} dropped ({} replaced, {} past deadline); \
         arrival-to-mask ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        answered as f64 / span.max(1e-12),
        counts.0 + counts.1,
        counts.0,
        counts.1,
        f(&l["median"]),
        f(&l["p90"]),
        f(&l["p99"]),
        f(&l["max"]),
    );
    if let Some(path) = &args.json {
        let bytes = serde_json::to_vec_pretty(&report).expect("report serialises");
        segtool_spec::io::write_atomic(path, &bytes)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The fields every `segtool bench` JSON report starts with (batch and stream modes alike):
/// what ran, where, at which size and contract.
#[allow(clippy::too_many_arguments)]
fn report_header(
    args: &Args,
    engine: &str,
    provider: &str,
    fallback: &Option<String>,
    (h, w): (u32, u32),
    fixed: bool,
    classes: usize,
    contract: &str,
) -> serde_json::Value {
    json!({
        "model": args.model.display().to_string(),
        "engine": engine,
        "requested_engine": args.engine.engine.as_str(),
        "requested_providers": args.engine.providers,
        "provider": provider,
        "fallback_reason": fallback,
        "threads": args.engine.threads,
        "size": { "height": h, "width": w },
        "shapes": if fixed { "fixed" } else { "dynamic" },
        "classes": classes,
        "contract": contract,
        "warmup": args.warmup,
        "segtool_version": env!("CARGO_PKG_VERSION"),
    })
}
