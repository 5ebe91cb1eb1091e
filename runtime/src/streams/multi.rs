//! [`MultiStream`]: many cameras, one model.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::latest::{Backlog, Latency, LatestStats, LatestStream, LiveFrame};
use crate::server::handle::Notify;
use crate::server::queue::Queue;
use crate::server::Input;

/// How one camera of a [`MultiStream`] is served.
///
/// # Example
///
/// ```
/// use segtool_runtime::batching::{Backlog, SourceConfig};
/// use std::time::Duration;
/// let front = SourceConfig::newest().with_deadline(Duration::from_millis(100));
/// let recorder = SourceConfig::ordered(8);
/// assert_eq!(front.backlog, Backlog::Newest);
/// assert_eq!((recorder.backlog, recorder.slot), (Backlog::Ordered, 8));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceConfig {
    /// Frames that may wait unstarted (at least 1).
    pub slot: usize,
    /// What a frame finding the slot full does: replace the oldest (newest first) or
    /// wait for room (ordered).
    pub backlog: Backlog,
    /// A frame not started within this of its submission is dropped.
    pub deadline: Option<Duration>,
}

impl SourceConfig {
    /// The newest frame answered: a slot of 1, no deadline.
    pub fn newest() -> Self {
        Self {
            slot: 1,
            backlog: Backlog::Newest,
            deadline: None,
        }
    }

    /// Every frame answered in order, at most `slot` waiting (then `submit` waits).
    pub fn ordered(slot: usize) -> Self {
        Self {
            slot: slot.max(1),
            backlog: Backlog::Ordered,
            deadline: None,
        }
    }

    /// Frames not started within `deadline` are dropped.
    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }
}

/// One camera's counts and latency, as [`MultiStream::stats`] gives them.
#[derive(Clone, Debug, PartialEq)]
pub struct SourceStats {
    /// The camera's name.
    pub name: String,
    /// `submitted == answered + failed + dropped() + pending` (the sum is exact).
    pub counts: LatestStats,
    /// Arrival-to-answer percentiles of its answered frames.
    pub latency: Latency,
    /// [`MultiStream::finish_source`] was called.
    pub finished: bool,
}

/// A camera's frame and which camera it is, as [`MultiStream::next`] returns them.
#[derive(Debug)]
pub struct SourceFrame {
    /// The camera's name.
    pub source: String,
    /// Its frame's fate, numbered in that camera's own order.
    pub frame: LiveFrame,
}

/// The error of naming a camera the stream does not have.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SourceError {
    /// No camera has this name.
    #[error("no source named {name:?} (sources: {known})")]
    Unknown {
        /// The name asked for.
        name: String,
        /// The cameras there are, comma-separated.
        known: String,
    },
    /// A camera of this name was already added.
    #[error("a source named {0:?} is already open")]
    Duplicate(String),
    /// The camera was finished and takes no more frames.
    #[error("source {0:?} was finished: it takes no more frames")]
    Finished(String),
}

/// Many cameras, one model: named sources sharing one [`crate::batching::BatchServer`] (one copy
/// of the model, one set of engine sessions), batched across the cameras.
///
/// - Each source keeps its own slot (the newest frames, or an ordered backlog), its own
///   deadline and its own counts; see [`SourceConfig`].
/// - Each engine run takes at most one frame from every camera that has one waiting,
///   oldest first, up to the server's `max_batch` (same-size frames share a run): a
///   camera with a backlog never fills a batch while another camera waits.
/// - A camera that goes quiet, ends ([`finish_source`](Self::finish_source)) or sends a
///   bad frame (answered as failed, for that frame alone) never stalls the others.
/// - [`next`](Self::next) returns the next known outcome of any camera, taking the
///   cameras in turn; each camera's frames come back in its own frame order.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer, SourceConfig};
/// use segtool_runtime::Segmenter;
/// use std::time::Duration;
/// let config = BatchConfig::new().with_max_batch(4).with_max_wait(Duration::from_millis(2));
/// let server = BatchServer::open(&Segmenter::builder("danet.onnx"), 1, config)?;
/// let cameras = server.multi_stream();
/// for name in ["front", "left", "right", "rear"] {
///     cameras.add_source(name, SourceConfig::newest())?;
/// }
/// cameras.submit("front", image::RgbImage::new(640, 480))?; // from the camera's thread
/// cameras.finish();
/// while let Some(f) = cameras.next() {
///     println!("{} frame {}: answered {}", f.source, f.frame.frame, f.frame.output().is_some());
/// }
/// for s in cameras.stats() {
///     println!("{}: {} answered, p99 {:.1} ms", s.name, s.counts.answered, s.latency.p99_ms);
/// }
/// # Ok(()) }
/// ```
pub struct MultiStream {
    inner: Arc<Inner>,
}

struct Inner {
    queue: Arc<Queue>,
    state: Mutex<State>,
    /// Woken when any camera's frame is answered, or a camera is added or finished.
    changed: Condvar,
}

struct State {
    sources: Vec<Source>,
    by_name: HashMap<String, usize>,
    /// The camera `next` looks at first (round robin).
    turn: usize,
    /// The queue's tag for the next camera added (tags are never reused, so a removed
    /// camera's turn is not inherited).
    next_tag: u32,
    finished: bool,
}

struct Source {
    name: String,
    stream: Arc<LatestStream>,
    finished: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MultiStream {
    pub(crate) fn new(queue: Arc<Queue>) -> Self {
        Self {
            inner: Arc::new(Inner {
                queue,
                state: Mutex::new(State {
                    sources: Vec::new(),
                    by_name: HashMap::new(),
                    turn: 0,
                    next_tag: 0,
                    finished: false,
                }),
                changed: Condvar::new(),
            }),
        }
    }

    /// Opens a camera named `name`.
    pub fn add_source(&self, name: &str, config: SourceConfig) -> Result<(), SourceError> {
        let mut st = lock(&self.inner.state);
        if st.by_name.contains_key(name) {
            return Err(SourceError::Duplicate(name.into()));
        }
        let id = st.next_tag;
        st.next_tag += 1;
        let weak = Arc::downgrade(&self.inner);
        let listener: Notify = Arc::new(move || {
            if let Some(inner) = weak.upgrade() {
                drop(lock(&inner.state));
                inner.changed.notify_all();
            }
        });
        let stream = LatestStream::for_source(
            self.inner.queue.clone(),
            config.slot,
            config.backlog,
            Some(id),
            Some(listener),
        );
        stream.set_deadline(config.deadline);
        let at = st.sources.len();
        st.by_name.insert(name.into(), at);
        st.sources.push(Source {
            name: name.into(),
            stream: Arc::new(stream),
            finished: false,
        });
        drop(st);
        self.inner.changed.notify_all();
        Ok(())
    }

    /// The cameras' names, in the order they were added.
    pub fn sources(&self) -> Vec<String> {
        lock(&self.inner.state)
            .sources
            .iter()
            .map(|s| s.name.clone())
            .collect()
    }

    /// Submits camera `source`'s next frame and returns its index in that camera's
    /// stream. Never waits for the model (an ordered camera with a full backlog waits
    /// for room in its own backlog only).
    pub fn submit(&self, source: &str, frame: impl Into<Input>) -> Result<u64, SourceError> {
        let stream = self.open_stream(source)?;
        Ok(stream.submit(frame))
    }

    /// [`submit`](Self::submit) with this frame's own start deadline.
    pub fn submit_by(
        &self,
        source: &str,
        frame: impl Into<Input>,
        deadline: Option<Instant>,
    ) -> Result<u64, SourceError> {
        let stream = self.open_stream(source)?;
        Ok(stream.submit_by(frame, deadline))
    }

    /// Camera `source` sends no more frames (its end of stream); the others go on.
    pub fn finish_source(&self, source: &str) -> Result<(), SourceError> {
        let mut st = lock(&self.inner.state);
        let at = find(&st, source)?;
        st.sources[at].finished = true;
        st.sources[at].stream.finish();
        drop(st);
        self.inner.changed.notify_all();
        Ok(())
    }

    /// Removes camera `source`: its frames not started are taken back from the queue,
    /// its outcomes not yet returned are dropped, and its name is free again (a camera
    /// that was unplugged, or an element flushed and restarted).
    pub fn remove_source(&self, source: &str) -> Result<(), SourceError> {
        let mut st = lock(&self.inner.state);
        let at = find(&st, source)?;
        let removed = st.sources.remove(at);
        st.by_name = st
            .sources
            .iter()
            .enumerate()
            .map(|(i, s)| (s.name.clone(), i))
            .collect();
        st.turn = match st.sources.len() {
            0 => 0,
            n => st.turn % n,
        };
        drop(st);
        removed.stream.finish();
        // The stream's last reference: dropping it cancels its waiting frames.
        drop(removed);
        self.inner.changed.notify_all();
        Ok(())
    }

    /// No camera sends more frames, and none will be added: once every outcome is out,
    /// [`next`](Self::next) returns `None`.
    pub fn finish(&self) {
        let mut st = lock(&self.inner.state);
        st.finished = true;
        for s in st.sources.iter_mut() {
            s.finished = true;
            s.stream.finish();
        }
        drop(st);
        self.inner.changed.notify_all();
    }

    /// The next known outcome of any camera, waiting for one; cameras are taken in turn
    /// so that a busy one does not hide the others. `None` once [`finish`](Self::finish)
    /// was called and every frame was returned.
    #[allow(clippy::should_implement_trait)] // `&self`, shared with the cameras' threads
    pub fn next(&self) -> Option<SourceFrame> {
        self.next_until(None)
    }

    /// Like [`next`](Self::next), waiting at most `timeout` (`None` also on timeout).
    pub fn next_timeout(&self, timeout: Duration) -> Option<SourceFrame> {
        self.next_until(Some(Instant::now() + timeout))
    }

    /// Camera `source`'s next outcome, waiting at most `timeout` (`Ok(None)` on timeout,
    /// or once the camera is finished and every frame of it was returned).
    pub fn next_from_timeout(
        &self,
        source: &str,
        timeout: Duration,
    ) -> Result<Option<LiveFrame>, SourceError> {
        let stream = {
            let st = lock(&self.inner.state);
            st.sources[find(&st, source)?].stream.clone()
        };
        Ok(stream.next_timeout(timeout))
    }

    /// Camera `source`'s next outcome if it is known now.
    pub fn try_next_from(&self, source: &str) -> Result<Option<LiveFrame>, SourceError> {
        let st = lock(&self.inner.state);
        let at = find(&st, source)?;
        Ok(st.sources[at].stream.try_next())
    }

    /// Each camera's counts and latency, in the order the cameras were added.
    pub fn stats(&self) -> Vec<SourceStats> {
        let streams: Vec<(String, Arc<LatestStream>, bool)> = lock(&self.inner.state)
            .sources
            .iter()
            .map(|s| (s.name.clone(), s.stream.clone(), s.finished))
            .collect();
        streams
            .into_iter()
            .map(|(name, stream, finished)| SourceStats {
                name,
                counts: stream.stats(),
                latency: stream.latency(),
                finished,
            })
            .collect()
    }

    fn open_stream(&self, source: &str) -> Result<Arc<LatestStream>, SourceError> {
        let st = lock(&self.inner.state);
        let at = find(&st, source)?;
        match st.sources[at].finished {
            true => Err(SourceError::Finished(source.into())),
            false => Ok(st.sources[at].stream.clone()),
        }
    }

    fn next_until(&self, until: Option<Instant>) -> Option<SourceFrame> {
        let mut st = lock(&self.inner.state);
        loop {
            let n = st.sources.len();
            for k in 0..n {
                let at = (st.turn + k) % n;
                if let Some(frame) = st.sources[at].stream.try_next() {
                    st.turn = (at + 1) % n;
                    return Some(SourceFrame {
                        source: st.sources[at].name.clone(),
                        frame,
                    });
                }
            }
            if st.finished && st.sources.iter().all(|s| s.stream.is_drained()) {
                return None;
            }
            let now = Instant::now();
            if until.is_some_and(|u| now >= u) {
                return None;
            }
            // Woken by an answer; the short period also enforces the cameras'
            // deadlines (checked by their `try_next`).
            let wait = until
                .map_or(Duration::from_millis(5), |u| u - now)
                .min(Duration::from_millis(5));
            st = self
                .inner
                .changed
                .wait_timeout(st, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn find(st: &State, source: &str) -> Result<usize, SourceError> {
    st.by_name
        .get(source)
        .copied()
        .ok_or_else(|| SourceError::Unknown {
            name: source.into(),
            known: st
                .sources
                .iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

impl std::fmt::Debug for MultiStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.inner.state);
        f.debug_struct("MultiStream")
            .field(
                "sources",
                &st.sources.iter().map(|s| &s.name).collect::<Vec<_>>(),
            )
            .field("finished", &st.finished)
            .finish()
    }
}
