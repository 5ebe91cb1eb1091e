//! Many cameras on one model (`MultiStream`): fairness under overload, order per camera,
//! exact counts, a camera that ends or sends a bad frame while the others go on, cameras
//! of different sizes, and names that are not cameras.
//!
//! The test engine sleeps a fixed time per image and answers logits whose argmax is the
//! red channel; camera `c`'s frame `i` has red `c * 32 + i % 32`, so every mask names its
//! camera and frame, and the engine records which cameras shared each run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use image::{Rgb, RgbImage};
use ndarray::Array4;
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchServer, LiveOutcome, SourceConfig, SourceError};
use segtool_runtime::expert::{Engine, EngineInput, EngineOutput};
use segtool_runtime::Result;
use segtool_testkit::tiny_spec;

const CLASSES: usize = 256;
const CAMERAS: [&str; 4] = ["front", "left", "right", "rear"];

/// Mean 0, std 1: the engine sees `x / 255` and recovers `x`.
fn spec() -> ModelSpec {
    let mut spec = tiny_spec(CLASSES);
    spec.mean = [0.0; 3];
    spec.std = [1.0; 3];
    spec
}

fn frame(camera: usize, i: u64, (w, h): (u32, u32)) -> RgbImage {
    RgbImage::from_pixel(w, h, Rgb([(camera * 32 + (i % 32) as usize) as u8, 0, 0]))
}

/// The cameras (red / 32) of the images of each engine run, in run order.
type Runs = Arc<Mutex<Vec<Vec<usize>>>>;

struct SlowEngine {
    per_image: Duration,
    runs: Runs,
}

impl Engine for SlowEngine {
    fn name(&self) -> &str {
        "slow"
    }

    fn provider(&self) -> &str {
        "cpu"
    }

    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let EngineInput::NchwF32(input) = input else {
            unreachable!("a plain fake engine")
        };
        let (n, _, h, w) = input.dim();
        let byte = |v: f32| (v * 255.0).round() as usize;
        std::thread::sleep(self.per_image * n as u32);
        let cameras = (0..n).map(|i| byte(input[[i, 0, 0, 0]]) / 32).collect();
        self.runs.lock().unwrap().push(cameras);
        Ok(EngineOutput::Logits(Array4::from_shape_fn(
            (n, CLASSES, h, w),
            |(i, c, y, x)| f32::from(u8::from(byte(input[[i, 0, y, x]]) == c)),
        )))
    }
}

/// One session, batches of up to `max_batch` formed within 2 ms.
fn server(per_image: Duration, max_batch: usize) -> (BatchServer, Runs) {
    let runs = Runs::default();
    let engine = SlowEngine {
        per_image,
        runs: runs.clone(),
    };
    let config = BatchConfig::new()
        .with_max_batch(max_batch)
        .with_max_wait(Duration::from_millis(2));
    let server = BatchServer::new(config, spec(), vec![Box::new(engine)]).unwrap();
    (server, runs)
}

/// No run holds two frames of one camera.
fn one_frame_per_camera_per_run(runs: &Runs) {
    for run in runs.lock().unwrap().iter() {
        let mut seen = run.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            run.len(),
            "a run with two frames of one camera: {run:?}"
        );
    }
}

#[test]
fn four_cameras_at_twice_the_engine_rate_are_served_fairly() {
    // 4 cameras, each at twice what the engine answers for it: 10 ms per image, runs of
    // at most 2, so the engine answers ~100 frames/s in all, 25 per camera, and each
    // camera sends 50.
    let per_image = Duration::from_millis(10);
    let (server, runs) = server(per_image, 2);
    let cameras = Arc::new(server.multi_stream());
    for name in CAMERAS {
        cameras.add_source(name, SourceConfig::newest()).unwrap();
    }
    let period = Duration::from_millis(20);
    let frames = 50u64;
    let producers: Vec<_> = CAMERAS
        .iter()
        .enumerate()
        .map(|(c, name)| {
            let cameras = cameras.clone();
            std::thread::spawn(move || {
                let start = Instant::now();
                for i in 0..frames {
                    if let Some(wait) =
                        (start + period * i as u32).checked_duration_since(Instant::now())
                    {
                        std::thread::sleep(wait);
                    }
                    cameras.submit(name, frame(c, i, (8, 6))).unwrap();
                }
            })
        })
        .collect();
    let consumer = {
        let cameras = cameras.clone();
        std::thread::spawn(move || {
            let mut answered: HashMap<String, Vec<u64>> = HashMap::new();
            while let Some(f) = cameras.next() {
                if let LiveOutcome::Answered(out) = &f.frame.outcome {
                    let c = CAMERAS.iter().position(|n| *n == f.source).unwrap();
                    let want = (c * 32 + (f.frame.frame % 32) as usize) as u8;
                    assert!(
                        out.mask.iter().all(|v| v == u16::from(want)),
                        "{} frame {}",
                        f.source,
                        f.frame.frame
                    );
                    answered
                        .entry(f.source.clone())
                        .or_default()
                        .push(f.frame.frame);
                }
            }
            answered
        })
    };
    for p in producers {
        p.join().unwrap();
    }
    cameras.finish();
    let answered = consumer.join().unwrap();
    let counts: Vec<usize> = CAMERAS
        .iter()
        .map(|n| answered.get(*n).map_or(0, Vec::len))
        .collect();
    eprintln!("answered per camera: {counts:?}");
    let (least, most) = (*counts.iter().min().unwrap(), *counts.iter().max().unwrap());
    assert!(least > 0, "a camera was starved: {counts:?}");
    // Fairness: the spread of answered counts within 10% of the most served camera
    // (plus one frame for the run in flight when the cameras stopped).
    assert!(
        (most - least) as f64 <= 0.1 * most as f64 + 1.0,
        "unfair: {counts:?}"
    );
    // Each camera's answers come in its own frame order.
    for (name, frames) in &answered {
        assert!(frames.windows(2).all(|w| w[0] < w[1]), "{name}: {frames:?}");
    }
    one_frame_per_camera_per_run(&runs);
    let batched = runs.lock().unwrap().iter().filter(|r| r.len() > 1).count();
    assert!(batched > 0, "no run was shared by two cameras");
    for s in cameras.stats() {
        let c = s.counts;
        assert_eq!(c.pending, 0, "{}", s.name);
        assert_eq!(c.submitted, frames, "{}", s.name);
        assert_eq!(
            c.submitted,
            c.answered + c.failed + c.dropped(),
            "{}",
            s.name
        );
        assert!(
            c.replaced > 0,
            "{}: overloaded, yet nothing replaced",
            s.name
        );
        assert_eq!(s.latency.samples as u64, c.answered);
        assert!(s.latency.p50_ms <= s.latency.p99_ms);
    }
}

#[test]
fn ordered_cameras_answer_every_frame_in_order_one_frame_per_camera_per_run() {
    let (server, runs) = server(Duration::from_millis(2), 8);
    let cameras = server.multi_stream();
    for name in &CAMERAS[..3] {
        cameras.add_source(name, SourceConfig::ordered(4)).unwrap();
    }
    let frames = 20u64;
    for i in 0..frames {
        for (c, name) in CAMERAS[..3].iter().enumerate() {
            assert_eq!(cameras.submit(name, frame(c, i, (8, 6))).unwrap(), i);
        }
    }
    cameras.finish();
    let mut seen: HashMap<String, Vec<u64>> = HashMap::new();
    while let Some(f) = cameras.next() {
        assert!(
            f.frame.output().is_some(),
            "{} frame {}: {:?}",
            f.source,
            f.frame.frame,
            f.frame.outcome
        );
        seen.entry(f.source).or_default().push(f.frame.frame);
    }
    for name in &CAMERAS[..3] {
        assert_eq!(seen[*name], (0..frames).collect::<Vec<_>>(), "{name}");
    }
    one_frame_per_camera_per_run(&runs);
    for s in cameras.stats() {
        let c = s.counts;
        assert_eq!(
            (c.submitted, c.answered, c.dropped(), c.failed),
            (frames, frames, 0, 0)
        );
    }
}

#[test]
fn a_camera_that_ends_or_sends_a_bad_frame_does_not_stop_the_others() {
    let (server, _runs) = server(Duration::from_millis(1), 4);
    let cameras = server.multi_stream();
    for name in &CAMERAS[..3] {
        cameras.add_source(name, SourceConfig::ordered(8)).unwrap();
    }
    cameras.submit("front", frame(0, 0, (8, 6))).unwrap();
    cameras.finish_source("front").unwrap();
    assert_eq!(
        cameras.submit("front", frame(0, 1, (8, 6))).unwrap_err(),
        SourceError::Finished("front".into())
    );
    let bad = cameras.submit("left", RgbImage::new(0, 0)).unwrap();
    for i in 0..5 {
        cameras.submit("left", frame(1, i, (8, 6))).unwrap();
        cameras.submit("right", frame(2, i, (16, 12))).unwrap();
    }
    cameras.finish();
    let mut outcomes: HashMap<String, Vec<(u64, bool)>> = HashMap::new();
    while let Some(f) = cameras.next_timeout(Duration::from_secs(20)) {
        if f.source == "left" && f.frame.frame == bad {
            assert!(
                matches!(f.frame.outcome, LiveOutcome::Failed(_)),
                "{:?}",
                f.frame.outcome
            );
        }
        if let Some(out) = f.frame.output() {
            // Each camera at its own size.
            let size = if f.source == "right" {
                (12, 16)
            } else {
                (6, 8)
            };
            assert_eq!(out.mask.dim(), size, "{}", f.source);
        }
        outcomes
            .entry(f.source)
            .or_default()
            .push((f.frame.frame, f.frame.output().is_some()));
    }
    assert_eq!(outcomes["front"], [(0, true)]);
    assert_eq!(outcomes["left"].len(), 6);
    assert_eq!(outcomes["left"].iter().filter(|(_, ok)| *ok).count(), 5);
    assert_eq!(outcomes["right"].iter().filter(|(_, ok)| *ok).count(), 5);
    let stats = cameras.stats();
    assert!(stats[0].finished);
    assert_eq!((stats[1].counts.failed, stats[1].counts.answered), (1, 5));
}

#[test]
fn names_that_are_not_cameras_are_refused_by_name() {
    let (server, _runs) = server(Duration::from_millis(1), 1);
    let cameras = server.multi_stream();
    cameras.add_source("front", SourceConfig::newest()).unwrap();
    cameras.add_source("rear", SourceConfig::newest()).unwrap();
    let err = cameras.submit("left", frame(0, 0, (8, 6))).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no source named \"left\" (sources: front, rear)"
    );
    assert_eq!(
        cameras
            .add_source("front", SourceConfig::newest())
            .unwrap_err(),
        SourceError::Duplicate("front".into())
    );
    assert!(cameras.try_next_from("side").is_err());
    assert_eq!(cameras.sources(), ["front", "rear"]);
}

#[test]
fn a_camera_removed_frees_its_name_and_one_camera_can_be_waited_for() {
    let (server, _runs) = server(Duration::from_millis(1), 4);
    let cameras = server.multi_stream();
    cameras
        .add_source("front", SourceConfig::ordered(4))
        .unwrap();
    cameras
        .add_source("rear", SourceConfig::ordered(4))
        .unwrap();
    for i in 0..3 {
        cameras.submit("front", frame(0, i, (8, 6))).unwrap();
        cameras.submit("rear", frame(1, i, (8, 6))).unwrap();
    }
    // One camera's answers, waited for, in its own order.
    for i in 0..3 {
        let f = cameras
            .next_from_timeout("rear", Duration::from_secs(20))
            .unwrap()
            .expect("rear's frame in time");
        assert_eq!(f.frame, i);
        assert!(f.output().is_some());
    }
    cameras.remove_source("front").unwrap();
    assert_eq!(cameras.sources(), ["rear"]);
    assert!(matches!(
        cameras.submit("front", frame(0, 9, (8, 6))),
        Err(SourceError::Unknown { .. })
    ));
    // The name is free again: a fresh camera, counting from 0.
    cameras.add_source("front", SourceConfig::newest()).unwrap();
    assert_eq!(cameras.submit("front", frame(0, 0, (8, 6))).unwrap(), 0);
    cameras.finish();
    let mut seen = Vec::new();
    while let Some(f) = cameras.next_timeout(Duration::from_secs(20)) {
        seen.push((f.source, f.frame.frame));
    }
    assert_eq!(seen, [("front".to_string(), 0)]);
}
