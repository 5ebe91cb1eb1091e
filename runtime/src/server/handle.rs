//! One request's result slot: written once by a worker ([`Reply`]), read once by the
//! caller ([`Handle`]).
//!
//! A hand-rolled one-shot channel rather than `mpsc`: the worker can see whether the
//! caller still wants the result (dropped handles are skipped), and a [`Reply`] dropped
//! without an answer (a worker unwinding) still wakes its handle with an error.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::BatchError;
use crate::Segmentation;

pub(crate) type Outcome = Result<Segmentation, BatchError>;

/// Called after a [`Reply`] wrote its answer (a stream's wake-up). Never called while
/// the batch queue's lock is held.
pub(crate) type Notify = Arc<dyn Fn() + Send + Sync>;

struct Slot {
    value: Mutex<Option<Outcome>>,
    ready: Condvar,
}

impl Slot {
    fn lock(&self) -> MutexGuard<'_, Option<Outcome>> {
        // A poisoned slot still holds a consistent Option.
        self.value.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The worker's end of one request.
pub(crate) struct Reply {
    slot: Option<Arc<Slot>>,
    notify: Option<Notify>,
}

impl Reply {
    pub(crate) fn send(mut self, outcome: Outcome) {
        if let Some(slot) = self.slot.take() {
            *slot.lock() = Some(outcome);
            slot.ready.notify_all();
        }
        if let Some(notify) = self.notify.take() {
            notify();
        }
    }

    /// No wake-up for this reply any more (a request taken back by its stream, which
    /// drops it under its own lock).
    pub(crate) fn disarm(&mut self) {
        self.notify = None;
    }

    /// The caller dropped its handle: nobody will read the result.
    pub(crate) fn abandoned(&self) -> bool {
        self.slot
            .as_ref()
            .is_none_or(|slot| Arc::strong_count(slot) == 1)
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            // Only someone still holding the handle needs waking (a cancelled or
            // abandoned request is dropped with nobody waiting, possibly under a lock).
            let waited_for = Arc::strong_count(&slot) > 1;
            *slot.lock() = Some(Err(BatchError::Disconnected));
            slot.ready.notify_all();
            if let Some(notify) = self.notify.take().filter(|_| waited_for) {
                notify();
            }
        }
    }
}

/// The caller's end of one submitted request.
///
/// Dropping it before the request runs cancels the request.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 1, BatchConfig::new())?;
/// let handle = server.submit(image::RgbImage::new(640, 480));
/// let id = handle.id();
/// match handle.wait_timeout(Duration::from_millis(100)) {
///     Ok(result) => println!("request {id}: {:?} mask", result?.mask.dim()),
///     Err(handle) => drop(handle), // too late: a request not started yet is skipped
/// }
/// # Ok(()) }
/// ```
pub struct Handle {
    id: u64,
    slot: Arc<Slot>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("id", &self.id)
            .field("ready", &self.is_ready())
            .finish()
    }
}

pub(crate) fn pair(id: u64) -> (Reply, Handle) {
    pair_notifying(id, None)
}

/// Like [`pair`], and `notify` runs once the reply has written its answer.
pub(crate) fn pair_notifying(id: u64, notify: Option<Notify>) -> (Reply, Handle) {
    let slot = Arc::new(Slot {
        value: Mutex::new(None),
        ready: Condvar::new(),
    });
    (
        Reply {
            slot: Some(slot.clone()),
            notify,
        },
        Handle { id, slot },
    )
}

/// A handle that is already answered (a request refused before it was queued).
pub(crate) fn answered(id: u64, outcome: Outcome) -> Handle {
    let (reply, handle) = pair(id);
    reply.send(outcome);
    handle
}

impl Handle {
    /// The request's number, also in [`Served::id`](crate::batching::Served::id); increases with
    /// submission order.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether [`wait`](Self::wait) would return at once.
    pub fn is_ready(&self) -> bool {
        self.slot.lock().is_some()
    }

    /// Blocks until the request is answered. Never hangs past the server's shutdown.
    pub fn wait(self) -> Result<Segmentation, BatchError> {
        let mut value = self.slot.lock();
        loop {
            if let Some(outcome) = value.take() {
                return outcome;
            }
            value = self
                .slot
                .ready
                .wait(value)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Like [`wait`](Self::wait) but gives the handle back after `timeout`.
    pub fn wait_timeout(
        self,
        timeout: Duration,
    ) -> Result<Result<Segmentation, BatchError>, Handle> {
        let deadline = Instant::now() + timeout;
        let taken = {
            let mut value = self.slot.lock();
            loop {
                if let Some(outcome) = value.take() {
                    break Some(outcome);
                }
                let now = Instant::now();
                if now >= deadline {
                    break None;
                }
                value = self
                    .slot
                    .ready
                    .wait_timeout(value, deadline - now)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
            }
        };
        taken.ok_or(self)
    }

    /// The result if it is there, else the handle back: `Err(handle)` means "still running".
    pub fn try_get(self) -> Result<Result<Segmentation, BatchError>, Handle> {
        let taken = self.slot.lock().take();
        taken.ok_or(self)
    }
}
