//! Concurrency tests of the batching engine (`segtool_runtime::batching`).
//!
//! A fake engine makes every result traceable: images carry their request's identity in
//! the red channel (one digit 0..15 per pixel) and their size code in the green channel;
//! the engine's logits make the mask equal to the red channel, so a mask shows which
//! request it belongs to, and the engine asserts that every image of a batch has the
//! size the batch has. Random sleeps make completion order vary.
//!
//! The fake engine and its helpers live here; the cases, by topic, in `concurrency/`.

#[path = "concurrency/lifecycle.rs"]
mod lifecycle;
#[path = "concurrency/load.rs"]
mod load;
#[path = "concurrency/streams.rs"]
mod streams;
#[cfg(feature = "tract")]
#[path = "concurrency/tract.rs"]
mod tract;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use image::{Rgb, RgbImage};
use ndarray::{Array2, Array4};
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchServer};
use segtool_runtime::{
    expert::{Engine, EngineInput, EngineOutput},
    ClassMap, Result, RuntimeError,
};
use segtool_testkit::tiny_spec;

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

fn expected_mask(id: usize, code: usize) -> ClassMap {
    let (h, w) = SIZES[code];
    ClassMap::from(Array2::from_shape_fn((h as usize, w as usize), |(y, x)| {
        digit(id, y * w as usize + x)
    }))
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

    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let EngineInput::NchwF32(input) = input else {
            unreachable!("a plain fake engine")
        };
        let logits = (|| -> Result<Array4<f32>> {
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
        })()?;
        Ok(EngineOutput::Logits(logits))
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
