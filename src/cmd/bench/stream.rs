//! Stream mode (`--stream --fps F`): a producer thread feeds frames at a fixed rate into
//! one session behind an `OrderedStream` (every frame, in order) or, with `--live`, a
//! `LatestStream` (newest frame wins); each answered frame's arrival-to-mask latency is
//! recorded.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use image::RgbImage;
use segtool_runtime::batching::{BatchConfig, BatchServer, DropReason, LiveOutcome};
use serde_json::json;

use super::{report_header, stats_of, write_json, Args};
use crate::args::engine::describe;
use crate::args::size::Size;

pub(super) fn run(args: &Args) -> Result<()> {
    let fps = args.fps.context("--stream needs --fps")?;
    if !(fps > 0.0 && fps.is_finite()) {
        bail!("--fps must be a positive number");
    }
    if args.frames == 0 {
        bail!("--frames must be at least 1");
    }
    if let Some(ms) = args.deadline_ms.filter(|ms| !(*ms > 0.0 && ms.is_finite())) {
        bail!("--deadline-ms {ms} must be a positive number of milliseconds");
    }
    let frames = stream_frames(args)?;
    let (w, h) = frames[0].dimensions();
    let fixed =
        (!args.dynamic_shapes && args.engine.onnx_runtime()).then_some((h as usize, w as usize));
    let seg = args.engine.request(fixed).open(&args.model)?;
    eprintln!("{}", describe(&seg));
    let mut report = report_header(args, &seg, (h, w), fixed.is_some());
    let config = BatchConfig::new()
        .with_max_batch(1)
        .with_max_wait(Duration::ZERO)
        .with_queue_capacity(args.frames.max(64));
    let server = BatchServer::from_segmenters(config, vec![seg])?;
    for i in 0..args.warmup {
        server.submit(frames[i % frames.len()].clone()).wait()?;
    }
    let warm = server.stats();
    let pacer = Pacer::new(args.frames, fps);
    let fed = match args.live {
        true => feed_live(&server, &frames, &pacer, args),
        false => feed_ordered(&server, &frames, &pacer, args.frames),
    };
    if fed.failed > 0 {
        bail!("{} frame(s) failed in the engine", fed.failed);
    }
    let stats = server.stats();
    let runs = stats.requests() - warm.requests();
    let engine_busy: Duration = stats.workers.iter().map(|w| w.busy).sum::<Duration>()
        - warm.workers.iter().map(|w| w.busy).sum::<Duration>();
    let engine_ms = engine_busy.as_secs_f64() * 1e3 / runs.max(1) as f64;
    let span = (fed.last_answer - pacer.started).as_secs_f64();
    let answered = fed.latencies.len();
    report["source"] = json!(if args.raw.is_some() {
        "raw"
    } else if args.input.is_some() {
        "folder"
    } else {
        "generated"
    });
    report["stream"] = json!({
        "mode": if args.live { "newest-frame" } else { "ordered" },
        "fps": fps,
        "frames": args.frames,
        "answered": answered,
        "dropped": fed.replaced + fed.expired,
        "replaced": fed.replaced,
        "expired": fed.expired,
        "answered_fps": answered as f64 / span.max(1e-12),
        "latency_ms": if fed.latencies.is_empty() { serde_json::Value::Null } else { stats_of(&fed.latencies) },
        "engine_ms_per_frame": engine_ms,
        "overload": fps * engine_ms / 1e3,
        "slot": args.live.then_some(args.slot.max(1)),
        "deadline_ms": args.deadline_ms,
    });
    print_stream(args, &report);
    write_json(args, &report)
}

/// What feeding the frames measured.
struct Fed {
    latencies: Vec<Duration>,
    replaced: u64,
    expired: u64,
    failed: u64,
    last_answer: Instant,
}

impl Fed {
    fn new(started: Instant) -> Self {
        Self {
            latencies: Vec::new(),
            replaced: 0,
            expired: 0,
            failed: 0,
            last_answer: started,
        }
    }
}

/// Frame `i` arrives at `started + i / fps`; its arrival time is kept.
struct Pacer {
    started: Instant,
    period: Duration,
    arrivals: Mutex<Vec<Option<Instant>>>,
}

impl Pacer {
    fn new(frames: usize, fps: f64) -> Self {
        Self {
            started: Instant::now(),
            period: Duration::from_secs_f64(1.0 / fps),
            arrivals: Mutex::new(vec![None; frames]),
        }
    }

    /// Waits for frame `i`'s arrival time and records it.
    fn arrive(&self, i: usize) {
        let due = self.started + self.period.mul_f64(i as f64);
        if let Some(wait) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(Instant::now());
    }

    fn arrival(&self, i: usize) -> Option<Instant> {
        self.arrivals.lock().unwrap_or_else(|e| e.into_inner())[i]
    }
}

/// `--live`: newest frame wins (a `LatestStream` of `--slot` frames, `--deadline-ms`).
fn feed_live(server: &BatchServer, frames: &[RgbImage], pacer: &Pacer, args: &Args) -> Fed {
    let mut stream = server.latest_stream(args.slot.max(1));
    if let Some(ms) = args.deadline_ms {
        stream = stream.with_deadline(Duration::from_secs_f64(ms / 1e3));
    }
    let mut fed = Fed::new(pacer.started);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..args.frames {
                pacer.arrive(i);
                stream.submit(frames[i % frames.len()].clone());
            }
            stream.finish();
        });
        while let Some(f) = stream.next() {
            match f.outcome {
                LiveOutcome::Answered(out) => {
                    std::hint::black_box(out);
                    fed.last_answer = Instant::now();
                    fed.latencies.push(fed.last_answer - f.submitted);
                }
                LiveOutcome::Dropped(DropReason::Deadline) => fed.expired += 1,
                LiveOutcome::Dropped(_) => fed.replaced += 1,
                LiveOutcome::Failed(_) => fed.failed += 1,
            }
        }
    });
    fed
}

/// Every frame, in order (an `OrderedStream`).
fn feed_ordered(server: &BatchServer, frames: &[RgbImage], pacer: &Pacer, n: usize) -> Fed {
    let stream = server.ordered_stream(n);
    let mut fed = Fed::new(pacer.started);
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..n {
                pacer.arrive(i);
                stream.push(frames[i % frames.len()].clone());
            }
            stream.finish();
        });
        while let Some(out) = stream.next() {
            match out {
                Ok(out) => {
                    fed.last_answer = Instant::now();
                    let i = out
                        .served
                        .and_then(|s| s.frame)
                        .expect("stream frames are numbered") as usize;
                    let at = pacer.arrival(i).expect("pushed after its arrival");
                    fed.latencies.push(fed.last_answer - at);
                }
                Err(_) => fed.failed += 1,
            }
        }
    });
    fed
}

/// The stream's figures on stdout.
fn print_stream(args: &Args, report: &serde_json::Value) {
    let s = &report["stream"];
    let l = &s["latency_ms"];
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    println!(
        "model {}  engine {}  provider {}  size {}x{}  stream {} at {} fps \
         ({:.1}x the engine's {:.1} ms per frame)",
        args.model.display(),
        report["engine"].as_str().unwrap_or_default(),
        report["provider"].as_str().unwrap_or_default(),
        report["size"]["height"],
        report["size"]["width"],
        s["mode"].as_str().unwrap_or_default(),
        f(&s["fps"]),
        f(&s["overload"]),
        f(&s["engine_ms_per_frame"]),
    );
    println!(
        "{} frames: {} answered ({:.1} fps), {} dropped ({} replaced, {} past deadline); \
         arrival-to-mask ms p50 {:.1} p90 {:.1} p99 {:.1} max {:.1}",
        s["frames"],
        s["answered"],
        f(&s["answered_fps"]),
        s["dropped"],
        s["replaced"],
        s["expired"],
        f(&l["median"]),
        f(&l["p90"]),
        f(&l["p99"]),
        f(&l["max"]),
    );
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
        let files = segtool_model_spec::images::list_images(dir)
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
