//! What became of a live stream's frames: answered, dropped (and why) or failed, one
//! [`LiveFrame`] each; the stream's counts and its arrival-to-answer latency.

use std::collections::VecDeque;
use std::time::Instant;

use crate::server::BatchError;
use crate::Segmentation;

/// Why a frame of a [`LatestStream`](super::LatestStream) got no mask.
///
/// # Example
///
/// ```
/// use segtool_runtime::batching::DropReason;
/// // What a robot's loop does with a frame that got no mask (from `LiveFrame::dropped`).
/// let action = |why: DropReason| match why {
///     DropReason::Replaced | DropReason::Deadline => "keep the last mask",
///     DropReason::QueueFull => "the server is shared and saturated: slow the camera",
/// };
/// assert_eq!(action(DropReason::Replaced), "keep the last mask");
/// assert_eq!(DropReason::Deadline.to_string(), "deadline passed before it started");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// A newer frame took its place in the slot before a worker started it.
    Replaced,
    /// Its deadline passed before a worker started it.
    Deadline,
    /// The server's queue (shared with other submitters) had no room for it.
    QueueFull,
}

impl std::fmt::Display for DropReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DropReason::Replaced => "replaced by a newer frame",
            DropReason::Deadline => "deadline passed before it started",
            DropReason::QueueFull => "the server's queue was full",
        })
    }
}

/// What became of one frame.
///
/// # Example
///
/// ```
/// use segtool_runtime::batching::{BatchError, DropReason, LiveOutcome};
/// // One frame's fate, as `LiveFrame::outcome` holds it.
/// let log_line = |outcome: &LiveOutcome| match outcome {
///     LiveOutcome::Answered(out) => format!("mask {:?}", out.mask.dim()),
///     LiveOutcome::Dropped(why) => format!("dropped: {why}"),
///     LiveOutcome::Failed(err) => format!("failed: {err}"),
/// };
/// let dropped = LiveOutcome::Dropped(DropReason::Replaced);
/// assert_eq!(log_line(&dropped), "dropped: replaced by a newer frame");
/// let failed = LiveOutcome::Failed(BatchError::ShutDown);
/// assert!(log_line(&failed).starts_with("failed: the batch server shut down"));
/// ```
#[derive(Debug)]
pub enum LiveOutcome {
    /// It ran: its mask (and logits when the server keeps them), its
    /// [`Served::frame`](crate::batching::Served::frame) set.
    Answered(Segmentation),
    /// It never ran.
    Dropped(DropReason),
    /// It ran and failed (or the server shut down first).
    Failed(BatchError),
}

/// One submitted frame's fate, as [`LatestStream::next`](super::LatestStream::next) returns it.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 1, BatchConfig::new())?;
/// let stream = server.latest_stream(1);
/// stream.submit(image::RgbImage::new(640, 480));
/// stream.finish();
/// while let Some(frame) = stream.next() {
///     let latency = frame.submitted.elapsed(); // arrival to result
///     let n = frame.frame;
///     match (frame.output(), frame.dropped()) {
///         (Some(out), _) => println!("frame {n}: {:?} mask in {latency:?}", out.mask.dim()),
///         (None, Some(why)) => println!("frame {n} dropped: {why}"),
///         (None, None) => println!("frame {n} failed: {:?}", frame.outcome),
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct LiveFrame {
    /// The frame's index (0, 1, 2, ... in submission order).
    pub frame: u64,
    /// When [`submit`](super::LatestStream::submit) took it: arrival-to-mask latency is
    /// `submitted.elapsed()` when the result is consumed.
    pub submitted: Instant,
    /// Answered, dropped (and why) or failed.
    pub outcome: LiveOutcome,
}

impl LiveFrame {
    /// The result, when the frame was answered.
    pub fn output(&self) -> Option<&Segmentation> {
        match &self.outcome {
            LiveOutcome::Answered(out) => Some(out),
            _ => None,
        }
    }

    /// The result, by value, when the frame was answered.
    pub fn into_output(self) -> Option<Segmentation> {
        match self.outcome {
            LiveOutcome::Answered(out) => Some(out),
            _ => None,
        }
    }

    /// Why it was dropped, when it was.
    pub fn dropped(&self) -> Option<DropReason> {
        match self.outcome {
            LiveOutcome::Dropped(reason) => Some(reason),
            _ => None,
        }
    }
}

/// The counters of a [`LatestStream`](super::LatestStream). At every moment
/// `submitted == answered + failed + dropped() + pending`; once the stream is drained,
/// `pending` is 0.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 1, BatchConfig::new())?;
/// let stream = server.latest_stream(1);
/// # let camera = std::iter::empty::<image::RgbImage>();
/// for frame in camera {
///     stream.submit(frame);
/// }
/// stream.finish();
/// while stream.next().is_some() {}
/// let stats = stream.stats();
/// assert_eq!(stats.pending, 0); // drained: every frame's fate is counted
/// assert_eq!(stats.submitted, stats.answered + stats.failed + stats.dropped());
/// println!("{} of {} frames dropped", stats.dropped(), stats.submitted);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LatestStats {
    /// Frames given to `submit`.
    pub submitted: u64,
    /// Frames that ran and have a mask.
    pub answered: u64,
    /// Frames that ran and failed (or met a shut-down server).
    pub failed: u64,
    /// Frames replaced in the slot by a newer one before they started.
    pub replaced: u64,
    /// Frames whose deadline passed before they started.
    pub expired: u64,
    /// Frames refused by a full server queue.
    pub rejected: u64,
    /// Frames whose fate is not known yet: waiting in the slot, or running.
    pub pending: u64,
}

impl LatestStats {
    /// Frames that never ran: replaced, expired or rejected.
    pub fn dropped(&self) -> u64 {
        self.replaced + self.expired + self.rejected
    }
}

/// Arrival-to-answer latency of a stream's answered frames (the last 4096), from
/// `submit` to the moment the stream recorded the answer (at once when a consumer
/// waits in `next`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Latency {
    /// Frames the percentiles are over.
    pub samples: usize,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank), milliseconds.
    pub p99_ms: f64,
}

impl Latency {
    pub(super) fn of(samples: &VecDeque<f64>) -> Self {
        let mut ms: Vec<f64> = samples.iter().copied().collect();
        ms.sort_by(f64::total_cmp);
        let at = |q: f64| match ms.len() {
            0 => 0.0,
            n => ms[((n - 1) as f64 * q).round() as usize],
        };
        Self {
            samples: ms.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
        }
    }
}
