//! Seeded mutation sweeps over the files segtool reads (issue 19), shared by the
//! integration tests that include it.
//!
//! - [`mutations`]: from one valid file, a fixed-seed list of hostile variants:
//!   truncations at evenly spread and random offsets, single and multiple byte flips,
//!   random bursts, huge length fields (LE u64 2^63, varint 2^62, all-ones) written over
//!   random places and over the places the caller names, deleted and repeated chunks.
//! - [`Tally`]: runs each case in-process on a thread of its own under `catch_unwind`
//!   with a time limit and a bound on the largest single Rust allocation ([`CountingAlloc`],
//!   installed by the including test as its global allocator), and records what each
//!   parser answered. A case fails on a panic, a hang, an allocation over the bound, or an
//!   `Err` whose message does not name the file.
//! - [`ChildRunner`]: the same for parsers whose crash would take the test process with
//!   it (libtorch's unpickler, ONNX Runtime, deep recursion): cases run in a child process
//!   (the test binary itself, re-run on one test) under `ulimit -v`, one process for many
//!   cases; a child that dies is reported against the case it was running and a fresh one
//!   continues with the next case.
//!
//! The case count per parser is the caller's default, or `SEGTOOL_SWEEP_CASES` when set
//! (a longer sweep: `SEGTOOL_SWEEP_CASES=20000 cargo test --test it -- hostile_inputs::`).
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

// ---- allocation bound ----------------------------------------------------------------

thread_local! {
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}

/// The system allocator, recording per thread the largest single request (the bound a
/// case is checked against). Requests above 64 GiB are refused outright (null: Rust
/// aborts with "memory allocation failed"), so a runaway size cannot take the machine.
pub struct CountingAlloc;

const HARD_CAP: usize = 64 << 30;

fn note(size: usize) {
    // try_with: no panic during thread teardown.
    let _ = LARGEST.try_with(|c| {
        if size > c.get() {
            c.set(size)
        }
    });
}

unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        if layout.size() > HARD_CAP {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        if new_size > HARD_CAP {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// Resets this thread's largest-allocation record.
pub fn reset_largest_alloc() {
    LARGEST.with(|c| c.set(0));
}

/// This thread's largest single allocation since [`reset_largest_alloc`].
pub fn largest_alloc() -> usize {
    LARGEST.with(|c| c.get())
}

// ---- seeded mutations ----------------------------------------------------------------

/// splitmix64: small, seedable, the same on every platform.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// The case count: `SEGTOOL_SWEEP_CASES` when set, else `default`.
pub fn case_count(default: usize) -> usize {
    std::env::var("SEGTOOL_SWEEP_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One hostile input: what was done to the valid file, and the bytes.
pub struct Case {
    pub what: String,
    pub bytes: Vec<u8>,
}

/// Huge lengths as they appear on disk: little-endian u64 2^63 (safetensors' header
/// length), protobuf varint 2^62, all ones (u32 / u64 lengths of pickle, zip).
fn huge_lengths() -> Vec<(&'static str, Vec<u8>)> {
    let mut varint = Vec::new();
    let mut v = 1u64 << 62;
    while v >= 0x80 {
        varint.push((v as u8) | 0x80);
        v >>= 7;
    }
    varint.push(v as u8);
    vec![
        ("le u64 2^63", (1u64 << 63).to_le_bytes().to_vec()),
        ("varint 2^62", varint),
        ("all ones x8", vec![0xff; 8]),
        ("le u32 max", vec![0xff, 0xff, 0xff, 0x7f]),
    ]
}

/// `n` seeded variants of `valid` (see the module docs). `hot` are byte offsets worth
/// hitting on purpose (length fields, headers): huge lengths are written there too.
pub fn mutations(valid: &[u8], seed: u64, n: usize, hot: &[usize]) -> Vec<Case> {
    let mut rng = Rng::new(seed);
    let len = valid.len();
    let mut out = Vec::with_capacity(n);
    let truncations = n / 4;
    // Evenly spread truncations (the first is the empty file), then random ones.
    for i in 0..truncations {
        let at = if i < truncations / 2 {
            i * len / (truncations / 2).max(1)
        } else {
            rng.below(len)
        };
        out.push(Case {
            what: format!("truncated to {at} of {len} bytes"),
            bytes: valid[..at].to_vec(),
        });
    }
    let lengths = huge_lengths();
    while out.len() < n {
        let mut b = valid.to_vec();
        let what = match rng.below(8) {
            0 | 1 => {
                let at = rng.below(len);
                let x = 1 + rng.below(255) as u8;
                b[at] ^= x;
                format!("byte {at} xor 0x{x:02x}")
            }
            2 => {
                let k = 2 + rng.below(7);
                for _ in 0..k {
                    let at = rng.below(len);
                    b[at] ^= 1 << rng.below(8);
                }
                format!("{k} random bit flips")
            }
            3 => {
                let at = rng.below(len);
                let k = (1 + rng.below(16)).min(len - at);
                for x in &mut b[at..at + k] {
                    *x = rng.next_u64() as u8;
                }
                format!("{k} random bytes at {at}")
            }
            4 | 5 => {
                let (name, bytes) = &lengths[rng.below(lengths.len())];
                let at = if !hot.is_empty() && rng.below(2) == 0 {
                    hot[rng.below(hot.len())]
                } else {
                    rng.below(len)
                };
                let at = at.min(len.saturating_sub(bytes.len()));
                let k = bytes.len().min(len - at);
                b[at..at + k].copy_from_slice(&bytes[..k]);
                format!("{name} written at {at}")
            }
            6 => {
                let at = rng.below(len);
                let k = (1 + rng.below(64)).min(len - at);
                b.drain(at..at + k);
                format!("{k} bytes deleted at {at}")
            }
            _ => {
                let at = rng.below(len);
                let k = (1 + rng.below(64)).min(len - at);
                let chunk = b[at..at + k].to_vec();
                let to = rng.below(len);
                b.splice(to..to, chunk);
                format!("{k} bytes from {at} repeated at {to}")
            }
        };
        out.push(Case { what, bytes: b });
    }
    out
}

// ---- running cases -------------------------------------------------------------------

/// What one parser saw and answered, over a sweep.
pub struct Tally {
    pub parser: String,
    pub cases: usize,
    pub accepted: usize,
    pub refused: usize,
    /// Error messages by their first words (what kinds of refusal the sweep produced).
    pub kinds: BTreeMap<String, usize>,
    pub failures: Vec<String>,
    pub largest_alloc: usize,
    started: Instant,
}

/// The first words of an error message, with the case's file name and numbers blanked, so
/// similar refusals group together.
fn kind_of(msg: &str, file: &str) -> String {
    let msg = msg.replace(file, "<file>");
    let words: Vec<String> = msg
        .split_whitespace()
        .take(9)
        .map(|w| {
            if w.chars().any(|c| c.is_ascii_digit()) {
                "#".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    words.join(" ")
}

impl Tally {
    pub fn new(parser: &str) -> Self {
        Self {
            parser: parser.into(),
            cases: 0,
            accepted: 0,
            refused: 0,
            kinds: BTreeMap::new(),
            failures: Vec::new(),
            largest_alloc: 0,
            started: Instant::now(),
        }
    }

    /// Records one outcome. `Ok(())`: the parser accepted the mutated file (a flipped
    /// weight byte is still a valid model); `Err(msg)` must name `file`.
    pub fn record(&mut self, case: &str, file: &str, outcome: Outcome) {
        self.cases += 1;
        match outcome {
            Outcome::Accepted => self.accepted += 1,
            Outcome::Refused(msg) => {
                self.refused += 1;
                if !msg.contains(file) {
                    self.failures
                        .push(format!("{case}: error does not name {file}: {msg}"));
                }
                *self.kinds.entry(kind_of(&msg, file)).or_default() += 1;
            }
            Outcome::Failed(why) => self.failures.push(format!("{case}: {why}")),
        }
    }

    /// Runs `f` on each case, written to `dir/<stem>-NNNN.<ext>`, in-process: on a thread
    /// of its own, under `catch_unwind`, with `limit` per case and `alloc_bound` on the
    /// largest single allocation.
    pub fn run_in_process<F>(
        &mut self,
        dir: &Path,
        ext: &str,
        cases: &[Case],
        limit: Duration,
        alloc_bound: usize,
        f: F,
    ) where
        F: Fn(&Path) -> Result<(), String> + Send + Sync + 'static,
    {
        let f = Arc::new(f);
        for (i, case) in cases.iter().enumerate() {
            let name = format!("{}-{i:04}.{ext}", self.parser.replace(' ', "_"));
            let path = dir.join(&name);
            std::fs::write(&path, &case.bytes).unwrap();
            let (tx, rx) = mpsc::channel();
            let (f2, p2) = (f.clone(), path.clone());
            std::thread::spawn(move || {
                reset_largest_alloc();
                let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f2(&p2)));
                let _ = tx.send((r, largest_alloc()));
            });
            let outcome = match rx.recv_timeout(limit) {
                Err(_) => Outcome::Failed(format!("no answer within {limit:?} (hang)")),
                Ok((Err(panic), _)) => Outcome::Failed(format!("panicked: {}", panic_text(&panic))),
                Ok((Ok(r), largest)) => {
                    self.largest_alloc = self.largest_alloc.max(largest);
                    if largest > alloc_bound {
                        Outcome::Failed(format!(
                            "allocated {largest} bytes at once (bound {alloc_bound})"
                        ))
                    } else {
                        match r {
                            Ok(()) => Outcome::Accepted,
                            Err(m) => Outcome::Refused(m),
                        }
                    }
                }
            };
            self.record(&format!("case {i} ({})", case.what), &name, outcome);
            let _ = std::fs::remove_file(&path);
        }
    }

    /// One line for the test log (and the closing note).
    pub fn summary(&self) -> String {
        let mut kinds: Vec<_> = self.kinds.iter().collect();
        kinds.sort_by(|a, b| b.1.cmp(a.1));
        let top: Vec<String> = kinds
            .iter()
            .take(6)
            .map(|(k, n)| format!("{n}x \"{k}\""))
            .collect();
        format!(
            "sweep {}: {} cases in {:.1?}, {} accepted, {} refused, {} failures, largest \
             allocation {} KiB; refusals: {}",
            self.parser,
            self.cases,
            self.started.elapsed(),
            self.accepted,
            self.refused,
            self.failures.len(),
            self.largest_alloc >> 10,
            top.join("; ")
        )
    }

    /// Prints the summary and fails the test on any failure (listing the first ones).
    pub fn finish(self) {
        println!("{}", self.summary());
        if !self.failures.is_empty() {
            let shown: Vec<&String> = self.failures.iter().take(12).collect();
            panic!(
                "{}\n{} failing cases, first ones:\n  {}",
                self.summary(),
                self.failures.len(),
                shown
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            );
        }
    }
}

pub enum Outcome {
    Accepted,
    Refused(String),
    Failed(String),
}

pub fn panic_text(p: &Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

// ---- cases in child processes ----------------------------------------------------------

/// The environment variable that makes the child-runner test run cases.
pub const CHILD_KIND: &str = "SEGTOOL_SWEEP_CHILD";
const CHILD_LIST: &str = "SEGTOOL_SWEEP_LIST";
const CHILD_FROM: &str = "SEGTOOL_SWEEP_FROM";

/// Runs cases in children: the current test binary re-run on `runner_test` (which must
/// call [`child_main`]) under `ulimit -v vmem_kib`.
pub struct ChildRunner {
    pub runner_test: &'static str,
    pub vmem_kib: u64,
    /// Per case; a child silent for longer is killed and the case reported as a hang.
    pub limit: Duration,
}

impl ChildRunner {
    /// Writes each case to `dir/<parser>-NNNN.<ext>` and runs `kind` on it in children.
    pub fn run(&self, tally: &mut Tally, dir: &Path, ext: &str, kind: &str, cases: &[Case]) {
        let mut files = Vec::new();
        for (i, case) in cases.iter().enumerate() {
            let p = dir.join(format!("{}-{i:04}.{ext}", tally.parser.replace(' ', "_")));
            std::fs::write(&p, &case.bytes).unwrap();
            files.push(p);
        }
        let list = dir.join(format!("{}.list", tally.parser.replace(' ', "_")));
        let text: Vec<String> = files.iter().map(|p| p.display().to_string()).collect();
        std::fs::write(&list, text.join("\n")).unwrap();
        let mut next = 0;
        let mut results: Vec<Option<Outcome>> = (0..cases.len()).map(|_| None).collect();
        while next < cases.len() {
            let first = next;
            let mut child = Command::new("bash")
                .arg("-c")
                .arg(format!("ulimit -v {}; exec \"$@\"", self.vmem_kib))
                .arg("bash")
                .arg(std::env::current_exe().unwrap())
                .args([
                    self.runner_test,
                    "--exact",
                    "--nocapture",
                    "--test-threads",
                    "1",
                ])
                .env(CHILD_KIND, kind)
                .env(CHILD_LIST, &list)
                .env(CHILD_FROM, next.to_string())
                .env("RUST_BACKTRACE", "0")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("test binary re-runs");
            let stdout = child.stdout.take().unwrap();
            let mut stderr = child.stderr.take().unwrap();
            let err_thread = std::thread::spawn(move || {
                let mut s = String::new();
                let _ = std::io::Read::read_to_string(&mut stderr, &mut s);
                s
            });
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            });
            let mut running: Option<usize> = None;
            let mut hung = false;
            loop {
                match rx.recv_timeout(self.limit) {
                    Ok(line) => {
                        // libtest prints "test sweep_child ... " before the first line.
                        let Some(rest) = line.find("@@").map(|at| &line[at + 2..]) else {
                            continue;
                        };
                        let mut parts = rest.splitn(3, ' ');
                        let (tag, i, msg) = (
                            parts.next().unwrap_or(""),
                            parts.next().and_then(|i| i.parse::<usize>().ok()),
                            parts.next().unwrap_or("").to_string(),
                        );
                        let Some(i) = i else { continue };
                        match tag {
                            "start" => running = Some(i),
                            "ok" => results[i] = Some(Outcome::Accepted),
                            "err" => results[i] = Some(Outcome::Refused(msg)),
                            "panic" => {
                                results[i] = Some(Outcome::Failed(format!("panicked: {msg}")))
                            }
                            _ => {}
                        }
                        if tag != "start" {
                            running = None;
                            next = i + 1;
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        hung = true;
                        let _ = child.kill();
                        break;
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
            let status = child.wait().unwrap();
            let stderr = err_thread.join().unwrap_or_default();
            if let Some(i) = running {
                let tail: String = stderr.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
                results[i] = Some(Outcome::Failed(if hung {
                    format!("no answer within {:?} (hang)", self.limit)
                } else {
                    format!("child process died ({status}): {tail}")
                }));
                next = i + 1;
            }
            if next == first {
                panic!("sweep child ran no case ({status}): {stderr}");
            }
        }
        for (i, (case, r)) in cases.iter().zip(results).enumerate() {
            let name = files[i].file_name().unwrap().to_string_lossy().into_owned();
            let outcome = r.unwrap_or(Outcome::Failed("no result".into()));
            tally.record(&format!("case {i} ({})", case.what), &name, outcome);
            let _ = std::fs::remove_file(&files[i]);
        }
    }
}

/// The child side: when [`CHILD_KIND`] is set, runs `run(kind, path)` on each listed file
/// from [`CHILD_FROM`] on, printing `@@start i`, then `@@ok i`, `@@err i <message>` or
/// `@@panic i <message>`. Returns at once (a passing no-op test) when it is not set.
pub fn child_main(run: impl Fn(&str, &Path) -> Result<(), String>) {
    let Ok(kind) = std::env::var(CHILD_KIND) else {
        return;
    };
    let list = std::fs::read_to_string(std::env::var(CHILD_LIST).unwrap()).unwrap();
    let from: usize = std::env::var(CHILD_FROM).unwrap().parse().unwrap();
    let files: Vec<PathBuf> = list.lines().map(PathBuf::from).collect();
    let mut out = std::io::stdout();
    for (i, path) in files.iter().enumerate().skip(from) {
        writeln!(out, "@@start {i}").unwrap();
        out.flush().unwrap();
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run(&kind, path)));
        let line = match r {
            Ok(Ok(())) => format!("@@ok {i}"),
            Ok(Err(m)) => format!("@@err {i} {}", m.replace('\n', " ")),
            Err(p) => format!("@@panic {i} {}", panic_text(&p).replace('\n', " ")),
        };
        writeln!(out, "{line}").unwrap();
        out.flush().unwrap();
    }
}
