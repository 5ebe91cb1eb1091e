//! Four cameras, one model: each camera's thread submits its newest frame to a
//! `MultiStream` without waiting; one engine session runs batches formed across the
//! cameras (at most one frame of each per run, the camera served longest ago first); the
//! consumer takes every camera's answers and the per-camera counts and latency.
//!
//! `cargo run -p segtool-runtime --example four_cameras` runs a few seconds on a tiny test
//! model (built and run by `make test`). For a measurement (bench/multi_camera.py):
//!
//! ```text
//! four_cameras MODEL.onnx --mode shared|separate [--cameras 4] [--seconds 10]
//!     [--overload 2] [--size 640x480] [--threads 2] [--engine ort|tract|openvino]
//! ```
//!
//! `shared`: one model and one session for all cameras, batched across them.
//! `separate`: what one element per camera gives, each camera with its own model, session
//! and newest-frame stream. The cameras together send `--overload` times the frames one
//! session answers one at a time. Prints one JSON line.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use image::{Rgb, RgbImage};
use segtool_runtime::batching::{BatchConfig, BatchServer, LatestStream, SourceConfig};
use segtool_runtime::{EngineKind, Segmenter};
use segtool_testkit::tiny_model_file;

struct Settings {
    model: Option<PathBuf>,
    shared: bool,
    cameras: usize,
    seconds: f64,
    overload: f64,
    size: (u32, u32),
    threads: usize,
    engine: EngineKind,
}

impl Default for Settings {
    /// The example's own run: the tiny model in tract, 2 seconds.
    fn default() -> Self {
        Settings {
            model: None,
            shared: true,
            cameras: 4,
            seconds: 2.0,
            overload: 2.0,
            size: (64, 48),
            threads: 1,
            engine: EngineKind::Tract,
        }
    }
}

impl Settings {
    fn parse() -> Result<Self, Box<dyn std::error::Error>> {
        let mut s = Settings::default();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().ok_or(format!("{arg} needs a value"));
            match arg.as_str() {
                "--mode" => s.shared = value()? == "shared",
                "--cameras" => s.cameras = value()?.parse()?,
                "--seconds" => s.seconds = value()?.parse()?,
                "--overload" => s.overload = value()?.parse()?,
                "--threads" => s.threads = value()?.parse()?,
                "--engine" => s.engine = value()?.parse()?,
                "--size" => {
                    let v = value()?;
                    let (w, h) = v.split_once('x').ok_or(format!("--size {v}: WxH"))?;
                    s.size = (w.parse()?, h.parse()?);
                }
                path if !path.starts_with("--") => s.model = Some(path.into()),
                other => return Err(format!("unknown flag {other}").into()),
            }
        }
        Ok(s)
    }

    fn open(&self, model: &PathBuf) -> Result<Segmenter, Box<dyn std::error::Error>> {
        Ok(Segmenter::builder(model)
            .engine(self.engine)
            .threads(self.threads)
            .open()?)
    }
}

/// What one camera got.
struct Camera {
    answered: u64,
    submitted: u64,
    p50_ms: f64,
    p99_ms: f64,
}

fn frame((w, h): (u32, u32), camera: usize, i: u64) -> RgbImage {
    RgbImage::from_fn(w, h, |x, y| {
        Rgb([(x * 3) as u8, (y * 5 + camera as u32 * 40) as u8, i as u8])
    })
}

/// Median time of one frame alone in `seg`: the rate one session answers at.
fn one_frame(
    seg: &mut Segmenter,
    size: (u32, u32),
) -> Result<Duration, Box<dyn std::error::Error>> {
    let img = frame(size, 0, 0);
    seg.segment(&img)?;
    let mut times: Vec<Duration> = (0..5)
        .map(|_| {
            let t = Instant::now();
            seg.segment(&img).map(|_| t.elapsed())
        })
        .collect::<Result<_, _>>()?;
    times.sort();
    Ok(times[2])
}

/// Each camera's thread submits a frame every `period` for `run`.
fn cameras_send(n: usize, period: Duration, run: Duration, submit: impl Fn(usize, u64) + Sync) {
    std::thread::scope(|scope| {
        for c in 0..n {
            let submit = &submit;
            scope.spawn(move || {
                // Cameras are not in step: each starts at its own phase.
                let start = Instant::now() + period.mul_f64(c as f64 / n as f64);
                let mut i = 0u64;
                while start + period * i as u32 <= start + run {
                    if let Some(wait) =
                        (start + period * i as u32).checked_duration_since(Instant::now())
                    {
                        std::thread::sleep(wait);
                    }
                    submit(c, i);
                    i += 1;
                }
            });
        }
    });
}

fn shared(
    s: &Settings,
    model: &PathBuf,
    period: Duration,
) -> Result<Vec<Camera>, Box<dyn std::error::Error>> {
    let config = BatchConfig::new()
        .with_max_batch(s.cameras)
        .with_max_wait(Duration::from_millis(2));
    let server = BatchServer::from_segmenters(config, vec![s.open(model)?])?;
    let cameras = Arc::new(server.multi_stream());
    let names: Vec<String> = (0..s.cameras).map(|c| format!("camera{c}")).collect();
    for name in &names {
        cameras.add_source(name, SourceConfig::newest())?;
    }
    let consumer = {
        let cameras = cameras.clone();
        std::thread::spawn(move || while cameras.next().is_some() {})
    };
    cameras_send(
        s.cameras,
        period,
        Duration::from_secs_f64(s.seconds),
        |c, i| {
            cameras
                .submit(&names[c], frame(s.size, c, i))
                .expect("an open camera");
        },
    );
    cameras.finish();
    consumer.join().expect("the consumer ends");
    Ok(cameras
        .stats()
        .into_iter()
        .map(|st| Camera {
            answered: st.counts.answered,
            submitted: st.counts.submitted,
            p50_ms: st.latency.p50_ms,
            p99_ms: st.latency.p99_ms,
        })
        .collect())
}

fn separate(
    s: &Settings,
    model: &PathBuf,
    period: Duration,
) -> Result<Vec<Camera>, Box<dyn std::error::Error>> {
    let servers: Vec<BatchServer> = (0..s.cameras)
        .map(|_| {
            Ok(BatchServer::from_segmenters(
                BatchConfig::live(1, 1),
                vec![s.open(model)?],
            )?)
        })
        .collect::<Result<_, Box<dyn std::error::Error>>>()?;
    let streams: Vec<Arc<LatestStream>> = servers
        .iter()
        .map(|sv| Arc::new(sv.latest_stream(1)))
        .collect();
    let consumers: Vec<_> = streams
        .iter()
        .map(|st| {
            let st = st.clone();
            std::thread::spawn(move || while st.next().is_some() {})
        })
        .collect();
    cameras_send(
        s.cameras,
        period,
        Duration::from_secs_f64(s.seconds),
        |c, i| {
            streams[c].submit(frame(s.size, c, i));
        },
    );
    streams.iter().for_each(|st| st.finish());
    for c in consumers {
        c.join().expect("the consumer ends");
    }
    Ok(streams
        .iter()
        .map(|st| {
            let (counts, latency) = (st.stats(), st.latency());
            Camera {
                answered: counts.answered,
                submitted: counts.submitted,
                p50_ms: latency.p50_ms,
                p99_ms: latency.p99_ms,
            }
        })
        .collect())
}

/// Peak resident memory of this process, from /proc (MiB; 0 where there is none).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Runs the cameras as `s` says; returns each camera's outcome, the time of one frame
/// alone and the cameras' period.
fn measure(s: &Settings) -> Result<(Vec<Camera>, Duration, Duration), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let model = match &s.model {
        Some(path) => path.clone(),
        None => tiny_model_file(dir.path())?,
    };
    let alone = one_frame(&mut s.open(&model)?, s.size)?;
    // Together the cameras send `overload` times what one session answers alone.
    let period = alone.mul_f64(s.cameras as f64 / s.overload);
    let cameras = match s.shared {
        true => shared(s, &model, period)?,
        false => separate(s, &model, period)?,
    };
    Ok((cameras, alone, period))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let s = Settings::parse()?;
    let (cameras, alone, period) = measure(&s)?;
    let answered: Vec<u64> = cameras.iter().map(|c| c.answered).collect();
    let (least, most) = (
        answered.iter().min().copied().unwrap_or(0),
        answered.iter().max().copied().unwrap_or(0),
    );
    assert!(least > 0, "a camera got no answer: {answered:?}");
    let list = |f: &dyn Fn(&Camera) -> String| cameras.iter().map(f).collect::<Vec<_>>().join(", ");
    println!(
        "{{\"mode\": \"{}\", \"cameras\": {}, \"one_frame_ms\": {:.3}, \"period_ms\": {:.3}, \"seconds\": {}, \
         \"answered_per_s\": {:.2}, \"answered\": [{}], \"submitted\": [{}], \"p50_ms\": [{}], \"p99_ms\": [{}], \
         \"spread\": {:.4}, \"peak_rss_mib\": {:.1}}}",
        if s.shared { "shared" } else { "separate" },
        s.cameras,
        alone.as_secs_f64() * 1e3,
        period.as_secs_f64() * 1e3,
        s.seconds,
        answered.iter().sum::<u64>() as f64 / s.seconds,
        list(&|c| c.answered.to_string()),
        list(&|c| c.submitted.to_string()),
        list(&|c| format!("{:.2}", c.p50_ms)),
        list(&|c| format!("{:.2}", c.p99_ms)),
        (most - least) as f64 / most.max(1) as f64,
        peak_rss_mib()
    );
    Ok(())
}

#[test]
fn every_camera_is_answered_shared_or_separate() {
    for shared in [true, false] {
        let s = Settings {
            shared,
            seconds: 1.0,
            ..Settings::default()
        };
        let (cameras, ..) = measure(&s).unwrap();
        assert_eq!(cameras.len(), 4);
        for c in &cameras {
            assert!(
                c.answered >= 1 && c.answered <= c.submitted,
                "shared {shared}"
            );
        }
    }
}
