//! The newest-frame stream (`LatestStream`) against the ordered one under overload, its
//! slot and deadlines, and temporal smoothing (`TemporalSmoother`, `FlickerMeter`).
//!
//! A slowed test engine sleeps a fixed time per image and answers logits whose argmax is
//! the red channel, so a mask names the frame it belongs to. Latency bounds are ratios
//! against the engine's own measured run time, never absolute numbers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use image::{Rgb, RgbImage};
use ndarray::{Array2, Array4};
use segtool_core::ConfusionMatrix;
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchError, BatchServer, DropReason, LiveOutcome};
use segtool_runtime::{
    expert::{Engine, EngineInput, EngineOutput},
    ClassMap, FlickerMeter, Result, TemporalSmoother,
};
use segtool_testkit::tiny_spec;

const CLASSES: usize = 16;
const FW: u32 = 8;
const FH: u32 = 6;

/// Mean 0, std 1: the engine sees `x / 255` and recovers `x`.
fn spec(classes: usize) -> ModelSpec {
    let mut spec = tiny_spec(classes);
    spec.mean = [0.0; 3];
    spec.std = [1.0; 3];
    spec
}

/// Frame `i`: every red value is `i % 16`, so its mask is all `i % 16`.
fn frame(i: u64) -> RgbImage {
    RgbImage::from_pixel(FW, FH, Rgb([(i % 16) as u8, 0, 0]))
}

/// What the slowed engine saw and how long its runs took.
#[derive(Default)]
struct Probe {
    /// Red value of every image run, in run order.
    ran: Mutex<Vec<u8>>,
    runs: Mutex<Vec<Duration>>,
    /// While `true`, runs wait before starting (to hold a frame "running").
    closed: Mutex<bool>,
    opened: Condvar,
    entered: AtomicBool,
}

impl Probe {
    fn set_closed(&self, closed: bool) {
        *self.closed.lock().unwrap() = closed;
        self.opened.notify_all();
    }

    /// Mean wall time of one engine run (the "one inference" the bounds refer to).
    fn mean_run(&self) -> Duration {
        let runs = self.runs.lock().unwrap();
        runs.iter().sum::<Duration>() / runs.len().max(1) as u32
    }

    fn ran(&self) -> Vec<u8> {
        self.ran.lock().unwrap().clone()
    }
}

/// Sleeps `per_image` per image of a batch; mask = red channel.
struct SlowEngine {
    probe: Arc<Probe>,
    per_image: Duration,
}

impl Engine for SlowEngine {
    fn name(&self) -> &str {
        "slow"
    }

    fn provider(&self) -> &str {
        "cpu"
    }

    // The closure gathers the body's `?`s into one result.
    #[allow(clippy::redundant_closure_call)]
    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let EngineInput::NchwF32(input) = input else {
            unreachable!("a plain fake engine")
        };
        let logits = (|| -> Result<Array4<f32>> {
            self.probe.entered.store(true, Ordering::SeqCst);
            {
                let mut closed = self.probe.closed.lock().unwrap();
                while *closed {
                    closed = self.probe.opened.wait(closed).unwrap();
                }
            }
            let t0 = Instant::now();
            let (n, _, h, w) = input.dim();
            let byte = |v: f32| (v * 255.0).round() as usize;
            std::thread::sleep(self.per_image * n as u32);
            let logits = Array4::from_shape_fn((n, CLASSES, h, w), |(i, c, y, x)| {
                f32::from(u8::from(byte(input[[i, 0, y, x]]) == c))
            });
            let mut ran = self.probe.ran.lock().unwrap();
            ran.extend((0..n).map(|i| byte(input[[i, 0, 0, 0]]) as u8));
            drop(ran);
            self.probe.runs.lock().unwrap().push(t0.elapsed());
            Ok(logits)
        })()?;
        Ok(EngineOutput::Logits(logits))
    }
}

/// One worker, batches of one, no batch forming wait: the live configuration.
fn slow_server(per_image: Duration) -> (BatchServer, Arc<Probe>) {
    let probe = Arc::new(Probe::default());
    let engine = SlowEngine {
        probe: probe.clone(),
        per_image,
    };
    let config = BatchConfig::new()
        .with_max_batch(1)
        .with_max_wait(Duration::ZERO);
    let server = BatchServer::new(config, spec(CLASSES), vec![Box::new(engine)]).unwrap();
    (server, probe)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

/// Frames every `period` for `n` frames, starting at `start`; returns the arrival times.
fn pace(n: u64, period: Duration, mut submit: impl FnMut(u64)) -> Vec<Instant> {
    let start = Instant::now();
    (0..n)
        .map(|i| {
            let due = start + period * i as u32;
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
            let arrived = Instant::now();
            submit(i);
            arrived
        })
        .collect()
}

const INFERENCE: Duration = Duration::from_millis(45);
const FRAMES: u64 = 48;

#[test]
fn newest_frame_at_3x_overload_keeps_latency_bounded_and_counts_drops() {
    let (server, probe) = slow_server(INFERENCE);
    let stream = server.latest_stream(1);
    let mut latencies = Vec::new();
    let mut answered = Vec::new();
    let mut dropped = 0u64;
    std::thread::scope(|s| {
        s.spawn(|| {
            pace(FRAMES, INFERENCE / 3, |i| {
                assert_eq!(stream.submit(frame(i)), i);
            });
            stream.finish();
        });
        let mut expected = 0;
        while let Some(f) = stream.next() {
            assert_eq!(f.frame, expected, "fates come in frame order");
            expected += 1;
            match f.outcome {
                LiveOutcome::Answered(out) => {
                    latencies.push(f.submitted.elapsed());
                    assert_eq!(out.served.and_then(|s| s.frame), Some(f.frame));
                    assert!(out.mask.iter().all(|c| u64::from(c) == f.frame % 16));
                    answered.push(f.frame);
                }
                LiveOutcome::Dropped(DropReason::Replaced) => dropped += 1,
                other => panic!("frame {}: {other:?}", f.frame),
            }
        }
        assert_eq!(expected, FRAMES, "one fate per submitted frame");
    });
    let stats = stream.stats();
    let one = probe.mean_run();
    let worst = latencies.iter().max().unwrap();
    eprintln!(
        "newest-frame: {} answered, {dropped} dropped of {FRAMES}; one inference {one:?}, \
         worst latency {worst:?} ({:.2}x)",
        answered.len(),
        worst.as_secs_f64() / one.as_secs_f64()
    );
    assert_eq!(stats.submitted, FRAMES);
    assert_eq!(stats.answered, answered.len() as u64);
    assert_eq!(stats.replaced, dropped);
    assert_eq!(stats.answered + stats.dropped(), stats.submitted);
    assert_eq!((stats.pending, stats.failed, stats.expired), (0, 0, 0));
    // The engine ran exactly the answered frames: a replaced frame never ran.
    let ran: Vec<u64> = probe.ran().into_iter().map(u64::from).collect();
    let want: Vec<u64> = answered.iter().map(|f| f % 16).collect();
    assert_eq!(ran, want);
    // The newest frame is never replaced: the last one is always answered.
    assert_eq!(answered.last(), Some(&(FRAMES - 1)));
    // Arriving 3x faster than the engine: about a third answered, the rest dropped.
    assert!(
        dropped >= FRAMES / 3,
        "{dropped} dropped of {FRAMES} at 3x overload"
    );
    for (f, l) in answered.iter().zip(&latencies) {
        assert!(
            l.as_secs_f64() < 2.5 * one.as_secs_f64(),
            "frame {f}: latency {l:?} is over 2.5 inferences ({one:?} each)"
        );
    }
}

#[test]
fn ordered_at_3x_overload_answers_everything_in_order_and_latency_grows() {
    let (server, probe) = slow_server(INFERENCE);
    let n = FRAMES / 2;
    // A window as long as the clip: the camera is never throttled, frames queue up.
    let stream = server.ordered_stream(n as usize);
    let arrivals = Mutex::new(Vec::new());
    let mut latencies = Vec::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let times = pace(n, INFERENCE / 3, |i| {
                assert_eq!(stream.push(frame(i)), i);
            });
            *arrivals.lock().unwrap() = times;
            stream.finish();
        });
        let mut done = Vec::new();
        while let Some(out) = stream.next() {
            let out = out.unwrap();
            done.push((out.served.and_then(|s| s.frame).unwrap(), Instant::now()));
        }
        assert_eq!(
            done.iter().map(|d| d.0).collect::<Vec<_>>(),
            (0..n).collect::<Vec<_>>()
        );
        let arrivals = arrivals.lock().unwrap();
        latencies = done
            .iter()
            .map(|&(i, at)| (at - arrivals[i as usize]).as_secs_f64())
            .collect();
    });
    let q = latencies.len() / 4;
    let (first, last) = (
        mean(&latencies[..q]),
        mean(&latencies[latencies.len() - q..]),
    );
    let one = probe.mean_run().as_secs_f64();
    eprintln!(
        "ordered: first-quarter mean latency {:.1} inferences, last-quarter {:.1}",
        first / one,
        last / one
    );
    // Every frame waits for all earlier ones: latency grows along the clip.
    assert!(last > 2.0 * first, "first {first:.4} s, last {last:.4} s");
    assert!(
        last > 2.5 * one,
        "the queue grows past what newest-frame mode allows"
    );
    assert_eq!(probe.ran().len() as u64, n);
}

/// Holds the single worker on frame 0 until released; returns once it is running.
fn hold_worker(probe: &Probe) {
    probe.set_closed(true);
}

fn wait_entered(probe: &Probe) {
    let t0 = Instant::now();
    while !probe.entered.load(Ordering::SeqCst) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "engine never entered"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_full_slot_replaces_the_oldest_waiting_frame_never_a_running_one() {
    let (server, probe) = slow_server(Duration::from_millis(1));
    hold_worker(&probe);
    let stream = server.latest_stream(2);
    stream.submit(frame(0));
    wait_entered(&probe);
    for i in 1..=6 {
        stream.submit(frame(i));
    }
    // Frame 0 runs, 5 and 6 wait in the slot of 2, 1..=4 were replaced.
    let stats = stream.stats();
    assert_eq!(
        (stats.submitted, stats.replaced, stats.pending),
        (7, 4, 3),
        "{stats:?}"
    );
    assert_eq!(server.stats().cancelled, 4);
    probe.set_closed(false);
    stream.finish();
    let fates: Vec<(u64, Option<DropReason>)> = std::iter::from_fn(|| stream.next())
        .map(|f| (f.frame, f.dropped()))
        .collect();
    let replaced = Some(DropReason::Replaced);
    assert_eq!(
        fates,
        [
            (0, None),
            (1, replaced),
            (2, replaced),
            (3, replaced),
            (4, replaced),
            (5, None),
            (6, None)
        ]
    );
    assert_eq!(probe.ran(), [0, 5, 6]);
    let stats = stream.stats();
    assert_eq!((stats.answered, stats.dropped(), stats.pending), (3, 4, 0));
    assert!(stream.is_drained());
}

#[test]
fn deadlines_drop_frames_not_started_in_time() {
    let (server, probe) = slow_server(Duration::from_millis(1));
    hold_worker(&probe);
    let stream = server.latest_stream(8);
    stream.submit(frame(0)); // runs (held)
    wait_entered(&probe);
    let now = Instant::now();
    stream.submit_by(frame(1), Some(now + Duration::from_millis(30)));
    stream.submit_by(frame(2), Some(now + Duration::from_secs(600)));
    let stream = stream.with_deadline(Duration::from_millis(30));
    stream.submit(frame(3)); // the stream's deadline
    stream.submit_by(frame(4), None); // none, whatever the stream's
                                      // Frame 0 is held, so nothing can start: the consumer learns about the expired
                                      // frames while it waits, without any further submission.
    std::thread::sleep(Duration::from_millis(60));
    let stats = stream.stats();
    assert_eq!((stats.expired, stats.pending), (2, 3), "{stats:?}");
    probe.set_closed(false);
    stream.finish();
    let fates: Vec<(u64, Option<DropReason>)> = std::iter::from_fn(|| stream.next())
        .map(|f| (f.frame, f.dropped()))
        .collect();
    let late = Some(DropReason::Deadline);
    assert_eq!(
        fates,
        [(0, None), (1, late), (2, None), (3, late), (4, None)]
    );
    assert_eq!(probe.ran(), [0, 2, 4], "expired frames never run");

    // A deadline already past when the worker is free: dropped by the worker (or by
    // the stream, whichever looks first), never run.
    let past = Instant::now();
    stream.submit_by(frame(5), Some(past));
    let f = stream
        .next_timeout(Duration::from_secs(20))
        .expect("a fate");
    assert_eq!((f.frame, f.dropped()), (5, late));
    assert_eq!(probe.ran(), [0, 2, 4]);
    let stats = stream.stats();
    assert_eq!(stats.answered + stats.dropped(), stats.submitted);
    assert_eq!(stats.expired, 3);
    assert!(stream.is_drained());
}

#[test]
fn consumer_wakes_for_a_deadline_while_the_engine_is_busy() {
    let (server, probe) = slow_server(Duration::from_millis(1));
    hold_worker(&probe);
    let stream = server.latest_stream(2);
    stream.submit(frame(0));
    wait_entered(&probe);
    stream.submit_by(frame(1), Some(Instant::now() + Duration::from_millis(20)));
    // Frame 0 is still held: the next fate out is... none until it finishes, but
    // frame 1's drop is recorded while waiting (the wait wakes for its deadline).
    assert!(stream.next_timeout(Duration::from_millis(80)).is_none());
    assert_eq!(stream.stats().expired, 1);
    assert!(!stream.is_drained());
    probe.set_closed(false);
    let fates: Vec<_> = (0..2)
        .map(|_| stream.next_timeout(Duration::from_secs(20)).unwrap())
        .map(|f| (f.frame, f.dropped()))
        .collect();
    assert_eq!(fates, [(0, None), (1, Some(DropReason::Deadline))]);
}

#[test]
fn shutdown_and_bad_frames_fail_without_hanging() {
    let (server, _probe) = slow_server(Duration::from_millis(1));
    let stream = server.latest_stream(1);
    let bad = stream.submit(RgbImage::new(0, 0));
    let f = stream.next_timeout(Duration::from_secs(20)).unwrap();
    assert_eq!(f.frame, bad);
    assert!(matches!(
        f.outcome,
        LiveOutcome::Failed(BatchError::Runtime(_))
    ));
    drop(server);
    stream.submit(frame(1));
    stream.finish();
    let f = stream.next().unwrap();
    assert!(matches!(
        f.outcome,
        LiveOutcome::Failed(BatchError::ShutDown)
    ));
    assert!(stream.next().is_none());
    let stats = stream.stats();
    assert_eq!((stats.submitted, stats.failed, stats.pending), (2, 2, 0));
}

#[test]
fn submit_never_waits_for_the_engine() {
    // A held engine and a slot of 1: a thousand submits still return at once, and
    // memory stays at one running plus one waiting frame.
    let (server, probe) = slow_server(Duration::from_millis(1));
    hold_worker(&probe);
    let stream = server.latest_stream(1);
    stream.submit(frame(0));
    wait_entered(&probe);
    // The engine is held throughout: a submit that waited for it would hang here.
    for i in 1..1000 {
        stream.submit(frame(i));
    }
    let stats = server.stats();
    assert!(stats.alive() <= 2, "{stats:?}");
    assert_eq!(stream.stats().replaced, 998);
    assert!(
        probe.runs.lock().unwrap().is_empty(),
        "frame 0 is still held"
    );
    probe.set_closed(false);
    stream.finish();
    let answered: Vec<u64> = std::iter::from_fn(|| stream.next())
        .filter_map(|f| f.output().map(|_| f.frame))
        .collect();
    assert_eq!(answered, [0, 999]);
}

// ---------------------------------------------------------------------------------------
// Temporal smoothing.

const SW: usize = 96;
const SH: usize = 64;
const SEQUENCE: usize = 40;

/// The panning scene at frame `t`: background 0, a 24x20 rectangle (class 1) moving
/// right 1.5 px per frame, a disc (class 2, radius 11) moving left and down.
fn scene(t: usize) -> Array2<u8> {
    let x0 = (10.0 + 1.5 * t as f64) as usize;
    let (cy, cx) = (40.0 + 0.3 * t as f64, 70.0 - t as f64);
    Array2::from_shape_fn((SH, SW), |(y, x)| {
        let (dy, dx) = (y as f64 - cy, x as f64 - cx);
        if dy * dy + dx * dx <= 121.0 {
            2
        } else if (20..40).contains(&y) && (x0..x0 + 24).contains(&x) {
            1
        } else {
            0
        }
    })
}

/// The frame: the class in red (x 80), the frame number in blue (the noise seed).
fn scene_image(t: usize) -> RgbImage {
    let truth = scene(t);
    RgbImage::from_fn(SW as u32, SH as u32, |x, y| {
        Rgb([truth[[y as usize, x as usize]] * 80, 0, t as u8])
    })
}

/// A model that is sure inside regions and unsure near their boundaries, with fresh
/// noise every frame: the true class's logit is the distance to the nearest other class
/// (1..3 px, capped), plus Gaussian noise of std 0.6 on every logit, seeded by the frame.
struct NoisyEngine;

fn gaussian(seed: u64) -> f32 {
    let mix = |mut z: u64| {
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let a = mix(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15).wrapping_add(1));
    let b = mix(a);
    let u1 = ((a >> 11) as f64 + 0.5) / (1u64 << 53) as f64;
    let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
    ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
}

impl Engine for NoisyEngine {
    fn name(&self) -> &str {
        "noisy"
    }

    fn provider(&self) -> &str {
        "cpu"
    }

    // The closure gathers the body's `?`s into one result.
    #[allow(clippy::redundant_closure_call)]
    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let EngineInput::NchwF32(input) = input else {
            unreachable!("a plain fake engine")
        };
        let logits = (|| -> Result<Array4<f32>> {
            let (n, _, h, w) = input.dim();
            let mut out = Array4::zeros((n, 3, h, w));
            for i in 0..n {
                let class = |y: usize, x: usize| (input[[i, 0, y, x]] * 255.0 / 80.0).round() as u8;
                let seed = (input[[i, 2, 0, 0]] * 255.0).round() as u64;
                for y in 0..h {
                    for x in 0..w {
                        let c = class(y, x);
                        let mut d = 3;
                        for r in (1..=2).rev() {
                            let near = (y.saturating_sub(r)..=(y + r).min(h - 1)).any(|yy| {
                                (x.saturating_sub(r)..=(x + r).min(w - 1))
                                    .any(|xx| class(yy, xx) != c)
                            });
                            if near {
                                d = r;
                            }
                        }
                        for k in 0..3 {
                            let noise = 0.6
                                * gaussian(
                                    ((seed * SH as u64 + y as u64) * SW as u64 + x as u64) * 3
                                        + k as u64,
                                );
                            out[[i, k, y, x]] =
                                if k == c as usize { d as f32 } else { 0.0 } + noise;
                        }
                    }
                }
            }
            Ok(out)
        })()?;
        Ok(EngineOutput::Logits(logits))
    }
}

fn miou(truth: &[Array2<u8>], masks: &[ClassMap]) -> f64 {
    let mut cm = ConfusionMatrix::new(3);
    for (t, m) in truth.iter().zip(masks) {
        let m = m.as_u8().expect("3 classes: u8 ids");
        cm.update(t.as_slice().unwrap(), m.as_slice().unwrap(), 255u8);
    }
    100.0 * cm.mean_iou()
}

#[test]
fn smoothing_lowers_flicker_on_a_panning_sequence_at_equal_miou() {
    let config = BatchConfig::new().with_logits(true);
    let server = BatchServer::new(config, spec(3), vec![Box::new(NoisyEngine)]).unwrap();
    let stream = server.ordered_stream(4);
    let truth: Vec<Array2<u8>> = (0..SEQUENCE).map(scene).collect();
    let (mut raw, mut smooth) = (Vec::new(), Vec::new());
    let (mut raw_flicker, mut smooth_flicker) = (FlickerMeter::new(), FlickerMeter::new());
    let mut smoother = TemporalSmoother::new(0.5).unwrap();
    std::thread::scope(|s| {
        s.spawn(|| {
            for t in 0..SEQUENCE {
                stream.push(scene_image(t));
            }
            stream.finish();
        });
        while let Some(out) = stream.next() {
            let out = out.unwrap();
            let logits = out.logits.as_ref().expect("kept");
            let smoothed = smoother.mask(logits.view(), SH, SW);
            raw_flicker.observe(&out.mask);
            smooth_flicker.observe(&smoothed);
            raw.push(out.mask);
            smooth.push(smoothed);
        }
    });
    let mut truth_flicker = FlickerMeter::new();
    for t in &truth {
        truth_flicker.observe(t.view());
    }
    let (fr, fs) = (
        raw_flicker.flicker().unwrap(),
        smooth_flicker.flicker().unwrap(),
    );
    let (mr, ms) = (miou(&truth, &raw), miou(&truth, &smooth));
    eprintln!(
        "flicker: unsmoothed {:.4}, smoothed (0.5) {:.4} ({:.0}% lower; the motion alone \
         {:.4}); mIoU unsmoothed {mr:.2}, smoothed {ms:.2}",
        fr,
        fs,
        100.0 * (1.0 - fs / fr),
        truth_flicker.flicker().unwrap()
    );
    assert_eq!(raw_flicker.pairs(), SEQUENCE as u64 - 1);
    assert!(
        fs <= 0.7 * fr,
        "flicker {fr:.4} -> {fs:.4}: less than 30% lower"
    );
    assert!((ms - mr).abs() <= 0.5, "mIoU {mr:.2} -> {ms:.2}");
}
