//! What the fuzz targets share: a scratch folder per process and thread (for entry points
//! that take a path), the small models some targets open, a byte reader to carve fuzz
//! input into arguments, and the regression replay the stable tests run
//! (tests/it/fuzz_regression.rs, ros2/tests/it/fuzz_regression.rs, capi/tests/it/fuzz_regression.rs
//! include this file and the targets' files with `#[path]`).
//!
//! Std only (plus the workspace crates every including package has): the regression tests
//! include it into three packages of the main workspace, none of which gets a new dependency.
#![allow(dead_code)]

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

thread_local! {
    static SCRATCH: RefCell<Option<PathBuf>> = const { RefCell::new(None) };
}

/// This thread's scratch folder, `$TMPDIR/segtool-fuzz-PID/tN`, made on first use.
pub fn scratch() -> PathBuf {
    SCRATCH.with(|s| {
        s.borrow_mut()
            .get_or_insert_with(|| {
                static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let dir = process_dir().join(format!("t{n}"));
                std::fs::create_dir_all(&dir).expect("creating the fuzz scratch folder");
                dir
            })
            .clone()
    })
}

fn process_dir() -> PathBuf {
    std::env::temp_dir().join(format!("segtool-fuzz-{}", std::process::id()))
}

/// `scratch()/sub`, emptied: a folder whose only files are the ones this run writes.
pub fn fresh_dir(sub: &str) -> PathBuf {
    let dir = scratch().join(sub);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("creating a fuzz scratch folder");
    dir
}

/// Writes `data` to `scratch()/name` and returns the path.
pub fn write(name: &str, data: &[u8]) -> PathBuf {
    let path = scratch().join(name);
    std::fs::write(&path, data).expect("writing a fuzz input file");
    path
}

/// A 3-class segtool export (1x1 convolution; `segtool_testkit`): what the C
/// ABI, the bag converter and the card targets open. Written once into
/// `$TMPDIR/segtool-fuzz-models` (atomically: fuzzing processes share it), kept there.
pub fn tiny_model() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        use segtool_testkit::{tiny_model_bytes, tiny_spec};
        let bytes = tiny_model_bytes(&tiny_spec(3), &[[1.0; 3], [0.0; 3], [-1.0; 3]], &[0.0; 3]);
        let dir = std::env::temp_dir().join("segtool-fuzz-models");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tiny.onnx");
        if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
            segtool_runtime::io::write_atomic_unsynced(&path, &bytes).unwrap();
        }
        path
    })
}

/// A graph segtool did not write (no spec in its metadata): input `pixel_values` f32 NCHW,
/// `classes` logits. Its card must come from a sidecar, mmdeploy or Hugging Face files.
pub fn foreign_model_bytes() -> &'static [u8] {
    static BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BYTES.get_or_init(|| segtool_testkit::foreign_model_bytes(3, 4, false))
}

/// Carves fuzz input into arguments: numbers from the front, the rest as a buffer.
pub struct Bytes<'a> {
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Self { data }
    }

    pub fn u8(&mut self) -> u8 {
        let (first, rest) = self.data.split_first().map_or((0, &[][..]), |(f, r)| (*f, r));
        self.data = rest;
        first
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    /// The next `n` bytes (fewer at the end).
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (head, rest) = self.data.split_at(n.min(self.data.len()));
        self.data = rest;
        head
    }

    /// Up to the next NUL (consumed), or everything left.
    pub fn until_nul(&mut self) -> &'a [u8] {
        match self.data.iter().position(|&b| b == 0) {
            Some(i) => {
                let head = &self.data[..i];
                self.data = &self.data[i + 1..];
                head
            }
            None => self.rest(),
        }
    }

    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.data)
    }

    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

/// What one replay of a target's files found.
pub struct Replayed {
    pub files: usize,
    pub slowest: Duration,
    pub slowest_file: PathBuf,
    pub total: Duration,
}

/// Replays every file of `fuzz_dir/corpus/<target>` and `fuzz_dir/regressions/<target>`
/// through `run`, each on a thread of its own: a panic fails the test naming the file, and
/// so does an input still running after `bound` (the test then ends without waiting for it).
/// `SEGTOOL_FUZZ_VERBOSE=1` names each file on stderr before it runs (to find the input of
/// an abort, which ends the whole test process).
pub fn replay(fuzz_dir: &Path, target: &str, run: fn(&[u8]), bound: Duration) -> Replayed {
    let mut files = Vec::new();
    for kind in ["corpus", "regressions"] {
        let dir = fuzz_dir.join(kind).join(target);
        if let Ok(entries) = std::fs::read_dir(&dir) {
            files.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file() && !p.ends_with("README.md")),
            );
        }
    }
    files.sort();
    assert!(!files.is_empty(), "no corpus for fuzz target {target} under {}", fuzz_dir.display());
    let verbose = std::env::var_os("SEGTOOL_FUZZ_VERBOSE").is_some_and(|v| v == "1");
    count_panics();
    let mut out = Replayed {
        files: files.len(),
        slowest: Duration::ZERO,
        slowest_file: PathBuf::new(),
        total: Duration::ZERO,
    };
    for file in &files {
        let data = std::fs::read(file).unwrap();
        if verbose {
            use std::io::Write;
            let _ = writeln!(std::io::stderr(), "replaying {}", file.display());
        }
        let (tx, rx) = std::sync::mpsc::channel();
        let panics = PANICS.load(std::sync::atomic::Ordering::SeqCst);
        let started = Instant::now();
        std::thread::Builder::new()
            .name(format!("replay {target}"))
            .spawn(move || {
                let outcome = std::panic::catch_unwind(|| run(&data));
                remove_thread_scratch();
                let _ = tx.send(outcome.is_ok());
            })
            .unwrap();
        match rx.recv_timeout(bound) {
            Ok(true) if PANICS.load(std::sync::atomic::Ordering::SeqCst) == panics => {}
            Ok(true) => panic!(
                "fuzz target {target} panicked on {} (the panic was caught inside; \
                 libFuzzer counts it as a crash)",
                file.display()
            ),
            Ok(false) | Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                panic!("fuzz target {target} panicked on {}", file.display())
            }
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => panic!(
                "fuzz target {target} ran past {bound:?} on {}",
                file.display()
            ),
        }
        let took = started.elapsed();
        out.total += took;
        if took >= out.slowest {
            out.slowest = took;
            out.slowest_file = file.clone();
        }
    }
    out
}

static PANICS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts every panic of the process, caught or not (libFuzzer's hook aborts on any), and
/// reports it as before.
fn count_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            previous(info);
        }));
    });
}

fn remove_thread_scratch() {
    SCRATCH.with(|s| {
        if let Some(dir) = s.borrow_mut().take() {
            let _ = std::fs::remove_dir_all(dir);
            // The process's folder stays (empty): removing it when it looks empty races
            // another thread between its create_dir_all of the folder and of its own.
        }
    });
}

/// What a model's card drives once resolved: the card resolved for `model` (a file or an
/// SDK / Hugging Face folder) as `Segmenter::builder(..).open()` resolves it, then one small image
/// prepared under it (resize or pad, normalisation, layout) as `segment` prepares each.
/// A card whose input tensor is legitimately large (over 4M pixels, up to the runtime's
/// `MAX_INPUT_PIXELS`) is not prepared: that is a big allocation, not a bug, and would
/// leave the fuzzer a few executions a second.
pub fn resolve_and_prepare(model: &Path) {
    use segtool_runtime::card::{self, pipeline, CardRequest};
    let Ok(resolved) = card::resolve(model, &CardRequest::new()) else {
        return;
    };
    let _ = card::spec_of(&resolved.card);
    let img = image::RgbImage::from_fn(19, 13, |x, y| image::Rgb([x as u8 * 13, y as u8 * 19, 7]));
    if too_big_to_fuzz(&resolved.card, (13, 19)) {
        return;
    }
    let _ = pipeline::prepare(&[img], &resolved.card);
}

/// The card's input tensor for an image of `(h, w)` is over 4M pixels but within what the
/// runtime accepts (beyond that, `prepare` must refuse it: that is fed).
pub fn too_big_to_fuzz(card: &segtool_runtime::card::ModelCard, hw: (usize, usize)) -> bool {
    use segtool_runtime::card::pipeline::{Geometry, MAX_INPUT_PIXELS};
    let g = Geometry::of(card, hw);
    let px = |(h, w): (usize, usize)| h as u128 * w as u128;
    let pixels = px(g.tensor).max(px(g.content));
    pixels > 1 << 22 && pixels <= u128::from(MAX_INPUT_PIXELS)
}
