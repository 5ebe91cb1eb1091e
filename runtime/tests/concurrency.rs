//! Concurrency tests of the batching engine (`segtool_runtime::batching`).
//!
//! A fake engine makes every result traceable: images carry their request's identity in
//! the red channel (one digit 0..15 per pixel) and their size code in the green channel;
//! the engine's logits make the mask equal to the red channel, so a mask shows which
//! request it belongs to, and the engine asserts that every image of a batch has the
//! size the batch has. Random sleeps make completion order vary.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use image::{Rgb, RgbImage};
use ndarray::{Array2, Array4, ArrayView4, Axis};
use segtool_spec::ModelSpec;
use segtool_runtime::batching::{
    BatchConfig, BatchError, BatchServer, Handle, Input, OrderedStream,
};
use segtool_runtime::testing::tiny_spec;
use segtool_runtime::{normalise, Engine, Result, RuntimeError};

const CLASSES: usize = 16;
/// `(height, width)` of size codes 0, 1, 2.
const SIZES: [(u32, u32); 3] = [(6, 5), (4, 8), (7, 7)];
/// Blue value that makes the fake engine fail the whole batch with an error.
const POISON_ERROR: u8 = 255;
/// Blue value that makes the fake engine panic.
const POISON_PANIC: u8 = 254;

/// Mean 0, std 1: a normalised value is `x / 255`, so the engine recovers `x` exactly.
fn spec() -> ModelSpec {
    let mut spec = tiny_spec(CLASSES);
    spec.mean = [0.0; 3];
    spec.std = [1.0; 3];
    spec
}

/// The red digit of pixel `p` of request `id`: the first three pixels spell `id` in
/// hex (unique up to 4096), the rest is a hash of both.
fn digit(id: usize, p: usize) -> u8 {
    let d = if p < 3 {
        id >> (4 * p)
    } else {
        (id.wrapping_mul(2_654_435_761) >> 7) ^ (p * 5)
    };
    (d & 15) as u8
}

fn size_of(id: usize) -> usize {
    (id * 7 + id / 3) % SIZES.len()
}

fn image(id: usize, code: usize) -> RgbImage {
    let (h, w) = SIZES[code];
    RgbImage::from_fn(w, h, |x, y| {
        Rgb([digit(id, (y * w + x) as usize), code as u8 + 1, 0])
    })
}

fn expected_mask(id: usize, code: usize) -> Array2<u8> {
    let (h, w) = SIZES[code];
    Array2::from_shape_fn((h as usize, w as usize), |(y, x)| {
        digit(id, y * w as usize + x)
    })
}

/// Counters shared by the fake engines and the test.
#[derive(Default)]
struct Probe {
    runs: AtomicUsize,
    images: AtomicUsize,
    max_n: AtomicUsize,
    /// Images whose size code disagrees with the batch tensor's size.
    mixed: AtomicUsize,
    /// Identities in completion order.
    completed: Mutex<Vec<usize>>,
    /// While `false`, engines block before running (to hold the server full).
    open: Mutex<bool>,
    opened: Condvar,
}

impl Probe {
    fn new() -> Arc<Self> {
        let probe = Probe::default();
        *probe.open.lock().unwrap() = true;
        Arc::new(probe)
    }

    fn set_open(&self, open: bool) {
        *self.open.lock().unwrap() = open;
        self.opened.notify_all();
    }
}

struct FakeEngine {
    probe: Arc<Probe>,
    rng: u64,
    /// Random sleep per run, up to this many microseconds.
    jitter_us: u64,
    /// Fixed sleep per run.
    fixed: Duration,
}

impl FakeEngine {
    fn boxed(probe: &Arc<Probe>, seed: u64, jitter_us: u64, fixed: Duration) -> Box<dyn Engine> {
        Box::new(Self {
            probe: probe.clone(),
            rng: seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1,
            jitter_us,
            fixed,
        })
    }

    fn next_rand(&mut self) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng
    }
}

impl Engine for FakeEngine {
    fn name(&self) -> &str {
        "fake"
    }

    fn provider(&self) -> &str {
        "cpu"
    }

    fn run(&mut self, input: ArrayView4<f32>) -> Result<Array4<f32>> {
        {
            let mut open = self.probe.open.lock().unwrap();
            while !*open {
                open = self.probe.opened.wait(open).unwrap();
            }
        }
        let (n, _, h, w) = input.dim();
        let byte = |v: f32| (v * 255.0).round() as u8;
        self.probe.runs.fetch_add(1, Ordering::SeqCst);
        self.probe.images.fetch_add(n, Ordering::SeqCst);
        self.probe.max_n.fetch_max(n, Ordering::SeqCst);
        let mut ids = Vec::with_capacity(n);
        for img in input.outer_iter() {
            let code = byte(img[[1, 0, 0]]) as usize - 1;
            if SIZES[code] != (h as u32, w as u32) {
                self.probe.mixed.fetch_add(1, Ordering::SeqCst);
                panic!("batch of {h}x{w} holds an image of size code {code}");
            }
            match byte(img[[2, 0, 0]]) {
                POISON_ERROR => return Err(RuntimeError::Tract("poisoned request".into())),
                POISON_PANIC => panic!("poisoned request"),
                _ => {}
            }
            let red = |p: usize| byte(img[[0, p / w, p % w]]) as usize;
            ids.push(red(0) | red(1) << 4 | red(2) << 8);
        }
        let sleep = self.fixed
            + Duration::from_micros(match self.jitter_us {
                0 => 0,
                j => self.next_rand() % j,
            });
        std::thread::sleep(sleep);
        let logits = Array4::from_shape_fn((n, CLASSES, h, w), |(i, c, y, x)| {
            f32::from(u8::from(usize::from(byte(input[[i, 0, y, x]])) == c))
        });
        self.probe.completed.lock().unwrap().extend(ids);
        Ok(logits)
    }
}

fn server(
    probe: &Arc<Probe>,
    config: BatchConfig,
    workers: usize,
    jitter_us: u64,
    fixed: Duration,
) -> BatchServer {
    BatchServer::from_factory(config, spec(), workers, |i| {
        Ok(FakeEngine::boxed(probe, i as u64 + 1, jitter_us, fixed))
    })
    .unwrap()
}

#[test]
fn eight_threads_mixed_sizes_every_result_once_and_matching() {
    const THREADS: usize = 8;
    const PER_THREAD: usize = 500;
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(8)
        .with_max_wait(Duration::from_millis(2))
        .with_queue_capacity(64);
    let server = server(&probe, config, 2, 300, Duration::ZERO);
    let start = Instant::now();
    let server_ids: Vec<u64> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..THREADS)
            .map(|t| {
                let server = &server;
                s.spawn(move || {
                    let spec = spec();
                    let handles: Vec<(usize, Handle)> = (0..PER_THREAD)
                        .map(|i| {
                            let id = t * PER_THREAD + i;
                            let img = image(id, size_of(id));
                            // Thread 7 sends already-normalised tensors, and every 5th
                            // request of thread 6 too, so batches mix both kinds.
                            let input: Input = if t == 7 || (t == 6 && i % 5 == 0) {
                                normalise(&img, &spec).index_axis_move(Axis(0), 0).into()
                            } else {
                                img.into()
                            };
                            (id, server.submit(input))
                        })
                        .collect();
                    handles
                        .into_iter()
                        .map(|(id, h)| {
                            let out = h.wait().unwrap_or_else(|e| panic!("request {id}: {e}"));
                            assert_eq!(out.mask, expected_mask(id, size_of(id)), "request {id}");
                            assert!(out.logits.is_none());
                            assert!(out.batch_size >= 1 && out.batch_size <= 8);
                            out.id
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect()
    });
    let total = THREADS * PER_THREAD;
    let stats = server.stats();
    eprintln!("{total} requests in {:?}: {stats:#?}", start.elapsed());
    assert_eq!(server_ids.len(), total);
    assert_eq!(
        server_ids.iter().collect::<HashSet<_>>().len(),
        total,
        "ids unique"
    );
    assert_eq!(probe.mixed.load(Ordering::SeqCst), 0, "a batch mixed sizes");
    // Every request ran exactly once: no retries, no duplicates, nothing lost.
    assert_eq!(probe.images.load(Ordering::SeqCst), total);
    let mut done = probe.completed.lock().unwrap().clone();
    done.sort_unstable();
    assert_eq!(done, (0..total).collect::<Vec<_>>());
    assert_eq!(stats.requests(), total as u64);
    assert_eq!(stats.submitted, total as u64);
    assert_eq!(stats.batches(), probe.runs.load(Ordering::SeqCst) as u64);
    assert!(stats
        .workers
        .iter()
        .all(|w| w.failed_batches == 0 && w.errors == 0));
    assert!(probe.max_n.load(Ordering::SeqCst) <= 8);
    assert!(stats.mean_batch_size() > 1.0, "no batching: {stats:?}");
    assert!(
        stats.workers.iter().all(|w| w.batches > 0),
        "a worker idled"
    );
    assert_eq!((stats.queued, stats.in_batches), (0, 0));
    assert!(stats.peak_alive <= 64 + 2 * 8);
}

/// Frames of mixed sizes: same-size bucketing alone already reorders completions.
fn frame(i: usize) -> RgbImage {
    image(i, size_of(i))
}

fn check_frame(i: usize, out: std::result::Result<segtool_runtime::batching::Output, BatchError>) {
    let out = out.unwrap_or_else(|e| panic!("frame {i}: {e}"));
    assert_eq!(out.frame, Some(i as u64));
    assert_eq!(out.mask, expected_mask(i, size_of(i)), "frame {i}");
}

#[test]
fn ordered_stream_returns_300_frames_in_order() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(4)
        .with_max_wait(Duration::from_millis(1))
        .with_queue_capacity(16);
    let server = server(&probe, config, 2, 2000, Duration::ZERO);
    let stream: OrderedStream = server.ordered_stream(24);
    let mut seen = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            for i in 0..300 {
                assert_eq!(stream.push(frame(i)), i as u64);
                assert!(stream.in_flight() <= 24);
            }
            stream.finish();
        });
        while let Some(out) = stream.next() {
            check_frame(seen, out);
            seen += 1;
        }
    });
    assert_eq!(seen, 300);
    let completed = probe.completed.lock().unwrap().clone();
    assert_eq!(completed.len(), 300);
    assert!(
        completed.windows(2).any(|w| w[0] > w[1]),
        "completion order never varied; the test proves nothing"
    );
    assert!(stream.next().is_none());
}

#[test]
fn ordered_stream_in_a_single_thread_loop() {
    let probe = Probe::new();
    let config = BatchConfig::new().with_max_batch(4).with_queue_capacity(4);
    let server = server(&probe, config, 2, 1000, Duration::ZERO);
    let stream = server.ordered_stream(6);
    let mut seen = 0;
    for i in 0..60 {
        let mut input: Input = frame(i).into();
        loop {
            match stream.try_push(input) {
                Ok(index) => {
                    assert_eq!(index, i as u64);
                    break;
                }
                Err(full) => {
                    // Window or queue full: wait for the oldest result to make room.
                    input = full.into_input();
                    if let Some(out) = stream.next() {
                        check_frame(seen, out);
                        seen += 1;
                    }
                }
            }
        }
        while let Some(out) = stream.try_next() {
            check_frame(seen, out);
            seen += 1;
        }
    }
    stream.finish();
    while let Some(out) = stream.next() {
        check_frame(seen, out);
        seen += 1;
    }
    assert_eq!(seen, 60);
}

#[test]
fn memory_stays_bounded_and_try_submit_reports_queue_full() {
    const CAPACITY: usize = 8;
    const MAX_BATCH: usize = 4;
    const WORKERS: usize = 2;
    const BOUND: usize = CAPACITY + WORKERS * MAX_BATCH;
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(MAX_BATCH)
        .with_max_wait(Duration::from_millis(1))
        .with_queue_capacity(CAPACITY);

    // Held engines: accept with try_submit until the server is full.
    {
        let server = server(&probe, config.clone(), WORKERS, 0, Duration::ZERO);
        probe.set_open(false);
        let mut handles = Vec::new();
        let full = loop {
            match server.try_submit(image(handles.len(), 0)) {
                Ok(h) => handles.push(h),
                Err(full) => break full,
            }
            assert!(handles.len() <= BOUND, "accepted more than the bound");
            // Let workers take what they can, so that the bound is reached exactly.
            std::thread::sleep(Duration::from_millis(2));
        };
        let given_back = full.into_input();
        assert_eq!(given_back.size(), (6, 5), "the request is given back");
        let stats = server.stats();
        assert_eq!(stats.queued, CAPACITY);
        assert!(stats.alive() <= BOUND && stats.rejected == 1, "{stats:?}");
        probe.set_open(true);
        for (id, h) in handles.into_iter().enumerate() {
            assert_eq!(h.wait().unwrap().mask, expected_mask(id, 0));
        }
    }

    // Slow engines, fast submitters: the queue stays full, memory stays bounded.
    let server = server(&probe, config, WORKERS, 0, Duration::from_millis(4));
    let rejected = AtomicUsize::new(0);
    let max_alive = AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        let monitor = s.spawn(|| {
            while !stop.load(Ordering::SeqCst) {
                max_alive.fetch_max(server.stats().alive(), Ordering::SeqCst);
                std::thread::sleep(Duration::from_micros(200));
            }
        });
        let submitters: Vec<_> = (0..6)
            .map(|t| {
                let (server, rejected) = (&server, &rejected);
                s.spawn(move || {
                    let mut handles = Vec::new();
                    for i in 0..40 {
                        let id = t * 40 + i;
                        let code = size_of(id);
                        if t == 0 {
                            // A "drop frames when busy" producer.
                            match server.try_submit(image(id, code)) {
                                Ok(h) => handles.push((id, code, h)),
                                Err(_) => {
                                    rejected.fetch_add(1, Ordering::SeqCst);
                                    std::thread::sleep(Duration::from_millis(1));
                                }
                            }
                        } else {
                            handles.push((id, code, server.submit(image(id, code))));
                        }
                    }
                    for (id, code, h) in handles {
                        assert_eq!(h.wait().unwrap().mask, expected_mask(id, code));
                    }
                })
            })
            .collect();
        for t in submitters {
            t.join().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        monitor.join().unwrap();
    });
    let stats = server.stats();
    eprintln!("bounded: {stats:#?}");
    assert!(
        stats.peak_alive <= BOUND,
        "peak {} > {BOUND}",
        stats.peak_alive
    );
    assert!(max_alive.load(Ordering::SeqCst) <= BOUND);
    assert!(
        stats.peak_alive >= CAPACITY,
        "the queue never filled: {stats:?}"
    );
    assert!(
        rejected.load(Ordering::SeqCst) > 0,
        "try_submit never saw QueueFull"
    );
    assert_eq!(stats.rejected, rejected.load(Ordering::SeqCst) as u64);
    assert!(probe.max_n.load(Ordering::SeqCst) <= MAX_BATCH);
}

#[test]
fn dropping_the_server_with_pending_requests_returns_promptly() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(2)
        .with_max_wait(Duration::ZERO)
        .with_queue_capacity(100);
    let server = server(&probe, config, 2, 0, Duration::from_millis(50));
    let handles: Vec<Handle> = (0..60).map(|id| server.submit(image(id, 0))).collect();
    std::thread::sleep(Duration::from_millis(10));
    let start = Instant::now();
    drop(server);
    let took = start.elapsed();
    // Processing all 60 would take 30 batches x 50 ms / 2 workers = 750 ms at least;
    // only the (at most two rounds of) running batches may finish. Generous for loaded CI.
    assert!(took < Duration::from_millis(2000), "drop took {took:?}");
    let (mut ok, mut shut_down) = (0, 0);
    for (id, h) in handles.into_iter().enumerate() {
        match h.wait_timeout(Duration::from_secs(1)) {
            Ok(Ok(out)) => {
                assert_eq!(out.mask, expected_mask(id, 0));
                ok += 1;
            }
            Ok(Err(BatchError::ShutDown)) => shut_down += 1,
            Ok(Err(e)) => panic!("request {id}: unexpected error {e}"),
            Err(_) => panic!("request {id}: handle still pending after shutdown"),
        }
    }
    assert!(ok <= 8 && shut_down >= 52, "ok {ok}, shut down {shut_down}");
    assert_eq!(ok + shut_down, 60);
}

#[test]
fn shutdown_answers_later_submissions_and_streams() {
    let probe = Probe::new();
    let server = server(&probe, BatchConfig::new(), 1, 0, Duration::ZERO);
    let before = server.submit(image(1, 1));
    assert_eq!(before.wait().unwrap().mask, expected_mask(1, 1));
    let stream = server.ordered_stream(4);
    server.shutdown();
    server.shutdown(); // idempotent
    assert!(matches!(
        server.submit(image(2, 1)).wait(),
        Err(BatchError::ShutDown)
    ));
    assert!(matches!(
        server.try_submit(image(3, 1)).unwrap().wait(),
        Err(BatchError::ShutDown)
    ));
    assert_eq!(stream.push(image(4, 1)), 0);
    stream.finish();
    assert!(matches!(stream.next(), Some(Err(BatchError::ShutDown))));
    assert!(stream.next().is_none());
}

#[test]
fn one_bad_request_fails_only_its_own_handle() {
    let probe = Probe::new();
    let config = BatchConfig::new()
        .with_max_batch(8)
        .with_max_wait(Duration::from_millis(20));
    let server = server(&probe, config, 2, 0, Duration::ZERO);
    let poisoned = |id: usize, blue: u8| {
        let mut img = image(id, 0);
        img.put_pixel(0, 0, Rgb([digit(id, 0), 1, blue]));
        img
    };
    let handles: Vec<Handle> = (0..40)
        .map(|id| match id {
            17 => server.submit(poisoned(id, POISON_ERROR)),
            29 => server.submit(poisoned(id, POISON_PANIC)),
            _ => server.submit(image(id, 0)),
        })
        .collect();
    let empty = server.submit(RgbImage::new(0, 0));
    let wrong = server.submit(Array4::<f32>::zeros((1, 4, 2, 2)).index_axis_move(Axis(0), 0));
    for (id, h) in handles.into_iter().enumerate() {
        match (id, h.wait()) {
            (17, Err(BatchError::Runtime(RuntimeError::Tract(msg)))) => {
                assert!(msg.contains("poisoned"))
            }
            (29, Err(BatchError::EnginePanicked(msg))) => assert!(msg.contains("poisoned")),
            (17 | 29, other) => panic!("request {id}: {other:?}"),
            (_, out) => assert_eq!(out.unwrap().mask, expected_mask(id, 0)),
        }
    }
    for h in [empty, wrong] {
        assert!(matches!(
            h.wait(),
            Err(BatchError::Runtime(RuntimeError::InputShape { .. }))
        ));
    }
    let stats = server.stats();
    assert!(stats.mean_batch_size() > 1.0, "{stats:?}");
    assert!(stats.workers.iter().map(|w| w.failed_batches).sum::<u64>() >= 2);
    assert_eq!(stats.workers.iter().map(|w| w.errors).sum::<u64>(), 2);
}

#[test]
fn dropped_handles_are_skipped_and_config_is_checked() {
    let probe = Probe::new();
    let config = BatchConfig::new().with_max_batch(4).with_queue_capacity(32);
    let server = server(&probe, config.clone(), 1, 0, Duration::ZERO);
    probe.set_open(false);
    let first = server.submit(image(0, 0));
    while server.stats().in_batches == 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    for id in 1..11 {
        drop(server.submit(image(id, 0))); // the caller lost interest
    }
    let last = server.submit(image(11, 0));
    probe.set_open(true);
    assert_eq!(first.wait().unwrap().mask, expected_mask(0, 0));
    assert_eq!(last.wait().unwrap().mask, expected_mask(11, 0));
    assert_eq!(server.stats().abandoned, 10);
    assert_eq!(probe.images.load(Ordering::SeqCst), 2);

    let bad = |c: BatchConfig| {
        BatchServer::new(
            c,
            spec(),
            vec![FakeEngine::boxed(&probe, 1, 0, Duration::ZERO)],
        )
    };
    assert!(matches!(
        bad(config.clone().with_max_batch(0)),
        Err(BatchError::InvalidConfig(_))
    ));
    assert!(matches!(
        bad(config.clone().with_queue_capacity(0)),
        Err(BatchError::InvalidConfig(_))
    ));
    assert!(matches!(
        BatchServer::new(config, spec(), vec![]),
        Err(BatchError::InvalidConfig(_))
    ));
}

/// The real thing: two tract sessions of a tiny ONNX model give exactly the masks and
/// logits of `Segmenter::segment`.
#[cfg(feature = "tract")]
#[test]
fn tract_sessions_match_segmenter() {
    use segtool_runtime::testing::tiny_model_bytes;
    use segtool_runtime::{Backend, Segmenter, TractEngine};

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rgb.onnx");
    let weights = [
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.5, 0.5, -1.0],
    ];
    std::fs::write(
        &path,
        tiny_model_bytes(&tiny_spec(4), &weights, &[0.0, 0.1, -0.1, 0.2]),
    )
    .unwrap();
    let imgs: Vec<RgbImage> = (0..12u32)
        .map(|i| {
            let (w, h) = [(5, 3), (8, 8), (2, 6)][i as usize % 3];
            RgbImage::from_fn(w, h, |x, y| {
                let v = |k: u32| ((i * 37 + x * 53 + y * 91 + k * 71) % 256) as u8;
                Rgb([v(0), v(1), v(2)])
            })
        })
        .collect();

    let mut seg = Segmenter::open(&path, Backend::Tract)
        .unwrap()
        .with_logits(true);
    let spec = seg.spec().clone();
    let config = BatchConfig::new()
        .with_max_batch(4)
        .with_max_wait(Duration::from_millis(20))
        .with_logits(true);
    let server = BatchServer::from_factory(config, spec.clone(), 2, |_| {
        Ok(Box::new(TractEngine::open(&path)?) as Box<dyn Engine>)
    })
    .unwrap();
    assert!(server.stats().workers.iter().all(|w| w.engine == "tract"));
    let handles: Vec<Handle> = imgs.iter().map(|img| server.submit(img.clone())).collect();
    // The same images as normalised tensors.
    let tensors: Vec<Handle> = imgs
        .iter()
        .map(|img| server.submit(normalise(img, &spec).index_axis_move(Axis(0), 0)))
        .collect();
    for ((img, h), t) in imgs.iter().zip(handles).zip(tensors) {
        let want = seg.segment(img).unwrap();
        let got = h.wait().unwrap();
        assert_eq!(got.mask, want.mask);
        assert_eq!(got.logits, want.logits);
        assert_eq!(t.wait().unwrap().into_segmentation().mask, want.mask);
    }
    let all = server.segment_all(imgs.clone()).unwrap();
    assert_eq!(all.len(), imgs.len());
    let stats = server.stats();
    eprintln!("tract: {stats:#?}");
    assert_eq!(stats.requests(), 36);
    assert!(stats.mean_batch_size() > 1.0);
}
