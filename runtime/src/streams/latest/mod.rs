//! [`LatestStream`]: a live camera's frames in, the newest one answered.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::server::handle::{Handle, Notify};
use crate::server::queue::Queue;
use crate::server::{with_frame, BatchError, Input};

mod outcome;

pub use outcome::{DropReason, Latency, LatestStats, LiveFrame, LiveOutcome};

/// Frames in, **the newest frame answered**: the stream for a live camera (a robot),
/// where an answer about an old frame is worth less than no answer.
///
/// - [`submit`](Self::submit) never blocks on the model: it only takes two short locks
///   (this stream's and the server's queue), so it can run in the camera's callback.
/// - At most `slot` frames wait unstarted. A frame arriving to a full slot replaces the
///   oldest waiting one, which is dropped ([`DropReason::Replaced`]); a frame a worker
///   has started always runs to the end. Memory is bounded by `slot` waiting frames plus
///   what the workers run (`workers * max_batch`), whatever the camera's rate.
/// - A frame may carry a deadline ([`with_deadline`](Self::with_deadline) for every
///   frame, or [`submit_by`](Self::submit_by)): not started by then, it is dropped
///   ([`DropReason::Deadline`]), never run late.
/// - [`next`](Self::next) returns one [`LiveFrame`] per submitted frame, **in frame
///   order**, answered or dropped, so the counts ([`stats`](Self::stats)) are exact:
///   `answered + failed + dropped == submitted` once drained. Drop notices queue up
///   until `next` takes them: keep calling it.
///
/// For the lowest latency build the server with `max_batch` 1 and `max_wait` 0 (a
/// worker then starts the newest frame as soon as it is free) and one worker per
/// session. Results about frames answered out of order by several workers wait for the
/// older frame (at most about one engine run).
///
/// Dropping the stream takes its waiting frames back from the queue; dropping the
/// server first answers the remaining frames [`LiveOutcome::Failed`] with
/// [`BatchError::ShutDown`].
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer, LiveOutcome};
/// use segtool_runtime::Segmenter;
/// use std::time::Duration;
/// let config = BatchConfig::new().with_max_batch(1).with_max_wait(Duration::ZERO);
/// let server = BatchServer::open(&Segmenter::builder("danet.onnx"), 1, config)?;
/// let stream = server.latest_stream(1).with_deadline(Duration::from_millis(200));
/// # let camera_frame = || image::RgbImage::new(64, 48);
/// stream.submit(camera_frame()); // from the camera's thread, never blocking it
/// stream.finish();
/// while let Some(frame) = stream.next() {
///     match frame.outcome {
///         LiveOutcome::Answered(out) => println!("frame {}: {:?}", frame.frame, out.mask.dim()),
///         LiveOutcome::Dropped(why) => println!("frame {} dropped: {why:?}", frame.frame),
///         LiveOutcome::Failed(e) => return Err(e.into()),
///     }
/// }
/// # Ok(()) }
/// ```
pub struct LatestStream {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Arc<Queue>,
    slot: usize,
    /// Newest first (a full slot drops its oldest frame), or ordered (a full slot makes
    /// `submit` wait: every frame runs).
    backlog: Backlog,
    /// The camera this stream is, within a [`super::MultiStream`] (one frame per source
    /// per batch).
    source: Option<u32>,
    state: Mutex<State>,
    changed: Condvar,
    /// Wakes a consumer when a worker answers one of this stream's frames.
    notify: Notify,
}

/// What a stream's slot does with a frame that finds it full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Backlog {
    /// The oldest waiting frame is dropped ([`DropReason::Replaced`]): the newest frame
    /// is answered (a robot's camera).
    #[default]
    Newest,
    /// `submit` waits for room: every frame runs, in order (a recording, an inspection
    /// line).
    Ordered,
}

/// Most answered frames whose latency a stream keeps for its percentiles.
const LATENCY_SAMPLES: usize = 4096;

struct State {
    /// Every submitted frame not yet returned by `next`, oldest first.
    entries: VecDeque<Entry>,
    next_frame: u64,
    deadline: Option<Duration>,
    finished: bool,
    stats: LatestStats,
    /// Milliseconds from submission to answer, the last [`LATENCY_SAMPLES`].
    latencies: VecDeque<f64>,
}

struct Entry {
    frame: u64,
    /// The server request's id and input size (to take it back from the queue).
    id: u64,
    size: (usize, usize),
    submitted: Instant,
    deadline: Option<Instant>,
    /// No longer in the queue (a worker took it); set when taking it back failed.
    started: bool,
    fate: Fate,
}

enum Fate {
    Pending(Handle),
    Known(LiveOutcome),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Entry {
    /// Possibly still in the queue, unstarted.
    fn waiting(&self) -> bool {
        !self.started && matches!(self.fate, Fate::Pending(_))
    }
}

impl LatestStream {
    pub(crate) fn new(queue: Arc<Queue>, slot: usize) -> Self {
        Self::for_source(queue, slot, Backlog::Newest, None, None)
    }

    /// A stream whose requests name `source`, and whose answers also run `listener`
    /// (a [`super::MultiStream`]'s wake-up).
    pub(crate) fn for_source(
        queue: Arc<Queue>,
        slot: usize,
        backlog: Backlog,
        source: Option<u32>,
        listener: Option<Notify>,
    ) -> Self {
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            let notify: Notify = Arc::new(move || {
                if let Some(inner) = weak.upgrade() {
                    // Taking the lock orders this wake-up after a consumer's check.
                    drop(lock(&inner.state));
                    inner.changed.notify_all();
                }
                if let Some(listener) = &listener {
                    listener();
                }
            });
            Inner {
                queue,
                slot: slot.max(1),
                backlog,
                source,
                state: Mutex::new(State {
                    entries: VecDeque::new(),
                    next_frame: 0,
                    deadline: None,
                    finished: false,
                    stats: LatestStats::default(),
                    latencies: VecDeque::new(),
                }),
                changed: Condvar::new(),
                notify,
            }
        });
        Self { inner }
    }

    /// Every later frame is dropped if not started within `deadline` of its submission.
    pub fn with_deadline(self, deadline: Duration) -> Self {
        self.set_deadline(Some(deadline));
        self
    }

    /// Changes the deadline of frames submitted from now on (`None`: no deadline).
    pub fn set_deadline(&self, deadline: Option<Duration>) {
        lock(&self.inner.state).deadline = deadline;
    }

    /// Most frames waiting unstarted.
    pub fn slot(&self) -> usize {
        self.inner.slot
    }

    /// Submits the next frame and returns its index; never waits for the model. With
    /// the stream's deadline (if any) counted from now.
    pub fn submit(&self, frame: impl Into<Input>) -> u64 {
        let input = frame.into();
        let now = Instant::now();
        let st = lock(&self.inner.state);
        let deadline = st.deadline.map(|d| now + d);
        self.inner.submit(st, input, now, deadline)
    }

    /// Like [`submit`](Self::submit), with this frame's own start deadline (`None`:
    /// none, whatever the stream's).
    pub fn submit_by(&self, frame: impl Into<Input>, deadline: Option<Instant>) -> u64 {
        let input = frame.into();
        let now = Instant::now();
        let st = lock(&self.inner.state);
        self.inner.submit(st, input, now, deadline)
    }

    /// No more frames will come: once every frame's fate is out, `next` returns `None`.
    pub fn finish(&self) {
        lock(&self.inner.state).finished = true;
        self.inner.changed.notify_all();
    }

    /// The oldest frame's fate, waiting for it. `None` once [`finish`](Self::finish)
    /// was called and every frame was returned.
    #[allow(clippy::should_implement_trait)] // `&self`, shared with a producer thread
    pub fn next(&self) -> Option<LiveFrame> {
        self.inner.next(None)
    }

    /// Like [`next`](Self::next), waiting at most `timeout`; `None` also on timeout
    /// ([`is_drained`](Self::is_drained) tells the two apart).
    pub fn next_timeout(&self, timeout: Duration) -> Option<LiveFrame> {
        self.inner.next(Some(Instant::now() + timeout))
    }

    /// The oldest frame's fate if it is known now.
    pub fn try_next(&self) -> Option<LiveFrame> {
        self.inner.next(Some(Instant::now()))
    }

    /// [`finish`](Self::finish) was called and every frame has been returned.
    pub fn is_drained(&self) -> bool {
        let st = lock(&self.inner.state);
        st.finished && st.entries.is_empty()
    }

    /// The counters now (outcomes the workers already gave are counted, whether or not
    /// `next` returned them yet).
    pub fn stats(&self) -> LatestStats {
        let mut st = lock(&self.inner.state);
        self.inner.scan(&mut st, Instant::now());
        st.stats
    }

    /// Latency percentiles of the answered frames (see [`Latency`]).
    pub fn latency(&self) -> Latency {
        let mut st = lock(&self.inner.state);
        self.inner.scan(&mut st, Instant::now());
        Latency::of(&st.latencies)
    }

    /// What a full slot does ([`Backlog`]).
    pub fn backlog(&self) -> Backlog {
        self.inner.backlog
    }
}

impl Inner {
    fn submit(
        &self,
        mut guard: MutexGuard<'_, State>,
        input: Input,
        now: Instant,
        deadline: Option<Instant>,
    ) -> u64 {
        self.scan(&mut guard, now);
        // Ordered: wait for room rather than drop a frame.
        while self.backlog == Backlog::Ordered
            && guard.entries.iter().filter(|e| e.waiting()).count() >= self.slot
        {
            guard = self
                .changed
                .wait_timeout(guard, Duration::from_millis(5))
                .unwrap_or_else(|e| e.into_inner())
                .0;
            self.scan(&mut guard, Instant::now());
        }
        let st = &mut *guard;
        let frame = st.next_frame;
        st.next_frame += 1;
        st.stats.submitted += 1;
        // Room in the slot: take back the oldest waiting frames until fewer than
        // `slot` wait. One a worker already took stays (it runs to the end).
        let mut waiting = st.entries.iter().filter(|e| e.waiting()).count();
        for e in st.entries.iter_mut() {
            if waiting < self.slot {
                break;
            }
            if !e.waiting() {
                continue;
            }
            waiting -= 1;
            match self.queue.cancel(e.id, e.size) {
                Some(job) => {
                    // The handle goes first; the job (its reply disarmed) after.
                    e.fate = Fate::Known(LiveOutcome::Dropped(DropReason::Replaced));
                    drop(job);
                    st.stats.replaced += 1;
                    st.stats.pending -= 1;
                }
                None => e.started = true,
            }
        }
        let size = input.size();
        let (id, fate) = match self.queue.push_with(
            input,
            false,
            deadline,
            Some(self.notify.clone()),
            self.source,
        ) {
            Ok(handle) => {
                st.stats.pending += 1;
                (handle.id(), Fate::Pending(handle))
            }
            Err(_full) => {
                st.stats.rejected += 1;
                (
                    u64::MAX,
                    Fate::Known(LiveOutcome::Dropped(DropReason::QueueFull)),
                )
            }
        };
        st.entries.push_back(Entry {
            frame,
            id,
            size,
            submitted: now,
            deadline,
            started: false,
            fate,
        });
        drop(guard);
        self.changed.notify_all();
        frame
    }

    /// Records the outcomes the workers gave, and drops waiting frames past their
    /// deadline.
    fn scan(&self, st: &mut State, now: Instant) {
        let State {
            entries,
            stats,
            latencies,
            ..
        } = st;
        for e in entries.iter_mut() {
            let Fate::Pending(handle) = &e.fate else {
                continue;
            };
            if handle.is_ready() {
                let Fate::Pending(handle) = std::mem::replace(
                    &mut e.fate,
                    Fate::Known(LiveOutcome::Dropped(DropReason::Deadline)),
                ) else {
                    unreachable!("matched above");
                };
                let outcome = handle
                    .try_get()
                    .unwrap_or_else(|_| unreachable!("ready handles stay ready"));
                stats.pending -= 1;
                e.fate = Fate::Known(match outcome {
                    Ok(out) => {
                        stats.answered += 1;
                        if latencies.len() == LATENCY_SAMPLES {
                            latencies.pop_front();
                        }
                        latencies.push_back(now.duration_since(e.submitted).as_secs_f64() * 1e3);
                        LiveOutcome::Answered(with_frame(out, e.frame))
                    }
                    Err(BatchError::DeadlineExpired) => {
                        stats.expired += 1;
                        LiveOutcome::Dropped(DropReason::Deadline)
                    }
                    Err(err) => {
                        stats.failed += 1;
                        LiveOutcome::Failed(err)
                    }
                });
            } else if !e.started && e.deadline.is_some_and(|d| now >= d) {
                match self.queue.cancel(e.id, e.size) {
                    Some(job) => {
                        e.fate = Fate::Known(LiveOutcome::Dropped(DropReason::Deadline));
                        drop(job);
                        stats.expired += 1;
                        stats.pending -= 1;
                    }
                    None => e.started = true,
                }
            }
        }
    }

    fn next(&self, until: Option<Instant>) -> Option<LiveFrame> {
        let mut st = lock(&self.state);
        loop {
            let now = Instant::now();
            self.scan(&mut st, now);
            match st.entries.front() {
                Some(e) if matches!(e.fate, Fate::Known(_)) => {
                    let e = st.entries.pop_front().expect("front exists");
                    let Fate::Known(outcome) = e.fate else {
                        unreachable!("matched above");
                    };
                    return Some(LiveFrame {
                        frame: e.frame,
                        submitted: e.submitted,
                        outcome,
                    });
                }
                None if st.finished => return None,
                _ => {}
            }
            // Wake for the caller's limit, or the first deadline to enforce.
            let wake = st
                .entries
                .iter()
                .filter(|e| e.waiting())
                .filter_map(|e| e.deadline)
                .chain(until)
                .min();
            match wake {
                Some(_) if until.is_some_and(|u| now >= u) => return None,
                Some(w) => {
                    let wait = w
                        .saturating_duration_since(now)
                        .max(Duration::from_micros(50));
                    st = self
                        .changed
                        .wait_timeout(st, wait)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
                None => st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

impl Drop for LatestStream {
    fn drop(&mut self) {
        // Frames nobody will read should not cost an engine run.
        let mut st = lock(&self.inner.state);
        for e in st.entries.iter_mut().filter(|e| e.waiting()) {
            if let Some(job) = self.inner.queue.cancel(e.id, e.size) {
                e.fate = Fate::Known(LiveOutcome::Dropped(DropReason::Replaced));
                drop(job);
            }
        }
    }
}

impl std::fmt::Debug for LatestStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.inner.state);
        f.debug_struct("LatestStream")
            .field("slot", &self.inner.slot)
            .field("deadline", &st.deadline)
            .field("stats", &st.stats)
            .field("finished", &st.finished)
            .finish()
    }
}
