//! [`OrderedStream`]: frames in, results out in frame order.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crate::server::handle::Handle;
use crate::server::queue::Queue;
use crate::server::{with_frame, BatchError, Input, QueueFull};
use crate::Segmentation;

/// Frames in, results out **in frame order**, although the server's workers finish
/// batches out of order (two GPUs, batches of different sizes).
///
/// At most `window` frames are *in flight* (pushed, result not yet returned by
/// [`next`](Self::next)): [`push`](Self::push) blocks beyond that, so memory stays
/// bounded and a slow model throttles the producer. Every output carries its frame
/// index in [`Served::frame`](crate::batching::Served::frame) (0, 1, 2, ... in push order).
///
/// All methods take `&self`: the usual shape is a producer thread calling `push` and a
/// consumer thread calling `next` (see the [module example](super)). In a single-thread
/// loop, collect ready results with [`try_next`](Self::try_next) after each push, or use
/// [`try_push`](Self::try_push): a blocking `push` on a full window would wait for a
/// `next` that the same thread can never make.
///
/// Dropping the server first is safe: later frames (and queued ones) come out as
/// [`BatchError::ShutDown`].
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("danet.onnx"), 2, BatchConfig::new())?;
/// let stream = server.ordered_stream(8);
/// # let frames = vec![image::RgbImage::new(64, 48); 3];
/// std::thread::scope(|s| {
///     s.spawn(|| {
///         for f in frames {
///             stream.push(f);
///         }
///         stream.finish();
///     });
///     while let Some(out) = stream.next() {
///         let out = out.expect("segmented");
///         let frame = out.served.and_then(|s| s.frame); // 0, 1, 2, ...
///         println!("frame {frame:?}: {:?}", out.mask.dim());
///     }
/// });
/// # Ok(()) }
/// ```
pub struct OrderedStream {
    queue: Arc<Queue>,
    window: usize,
    /// Serialises producers so frame numbers and queue order agree.
    push_lock: Mutex<()>,
    /// Serialises consumers so results leave in frame order.
    next_lock: Mutex<()>,
    state: Mutex<State>,
    changed: Condvar,
}

struct State {
    /// Submitted frames, oldest first.
    pending: VecDeque<(u64, Handle)>,
    /// Frames pushed (or being pushed) whose result `next` has not returned yet.
    in_flight: usize,
    next_frame: u64,
    finished: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl OrderedStream {
    pub(crate) fn new(queue: Arc<Queue>, window: usize) -> Self {
        Self {
            queue,
            window: window.max(1),
            push_lock: Mutex::new(()),
            next_lock: Mutex::new(()),
            state: Mutex::new(State {
                pending: VecDeque::new(),
                in_flight: 0,
                next_frame: 0,
                finished: false,
            }),
            changed: Condvar::new(),
        }
    }

    /// Most frames in flight.
    pub fn window(&self) -> usize {
        self.window
    }

    /// Frames pushed whose results have not been returned yet.
    pub fn in_flight(&self) -> usize {
        lock(&self.state).in_flight
    }

    /// Submits the next frame and returns its index. Blocks while `window` frames are
    /// in flight and while the server's queue is full.
    pub fn push(&self, frame: impl Into<Input>) -> u64 {
        let _producer = lock(&self.push_lock);
        let index = {
            let mut st = lock(&self.state);
            while st.in_flight >= self.window {
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            st.reserve()
        };
        let handle = match self.queue.push(frame.into(), true) {
            Ok(handle) => handle,
            Err(_) => unreachable!("a blocking push waits for room"),
        };
        self.enqueue(index, handle);
        index
    }

    /// Submits the next frame if the window and the server's queue have room now, else
    /// gives it back (a live camera would drop it).
    pub fn try_push(&self, frame: impl Into<Input>) -> Result<u64, QueueFull> {
        let _producer = lock(&self.push_lock);
        let frame = frame.into();
        let index = {
            let mut st = lock(&self.state);
            if st.in_flight >= self.window {
                return Err(QueueFull::new(frame, self.window));
            }
            st.reserve()
        };
        match self.queue.push(frame, false) {
            Ok(handle) => {
                self.enqueue(index, handle);
                Ok(index)
            }
            Err(full) => {
                // No other producer ran meanwhile (push_lock): the number is reusable.
                let mut st = lock(&self.state);
                st.in_flight -= 1;
                st.next_frame -= 1;
                drop(st);
                self.changed.notify_all();
                Err(full)
            }
        }
    }

    /// No more frames will come: once every pushed frame's result is out, `next`
    /// returns `None` instead of waiting.
    pub fn finish(&self) {
        lock(&self.state).finished = true;
        self.changed.notify_all();
    }

    /// The next frame's result, waiting for it. `None` when nothing is in flight and
    /// [`finish`](Self::finish) was called; otherwise waits for the next push.
    #[allow(clippy::should_implement_trait)] // `&self`, shared with a producer thread
    pub fn next(&self) -> Option<Result<Segmentation, BatchError>> {
        let _consumer = lock(&self.next_lock);
        let (index, handle) = {
            let mut st = lock(&self.state);
            loop {
                if let Some(head) = st.pending.pop_front() {
                    break head;
                }
                if st.finished && st.in_flight == 0 {
                    return None;
                }
                st = self.changed.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        };
        Some(self.collect(index, handle.wait()))
    }

    /// The next frame's result if it is ready now (`None`: not ready, or nothing
    /// pushed). Never blocks on the model.
    pub fn try_next(&self) -> Option<Result<Segmentation, BatchError>> {
        let _consumer = lock(&self.next_lock);
        let (index, handle) = {
            let mut st = lock(&self.state);
            if !st.pending.front()?.1.is_ready() {
                return None;
            }
            st.pending.pop_front()?
        };
        let outcome = handle
            .try_get()
            .unwrap_or_else(|_| unreachable!("ready handles stay ready"));
        Some(self.collect(index, outcome))
    }

    fn enqueue(&self, index: u64, handle: Handle) {
        lock(&self.state).pending.push_back((index, handle));
        self.changed.notify_all();
    }

    fn collect(
        &self,
        index: u64,
        outcome: Result<Segmentation, BatchError>,
    ) -> Result<Segmentation, BatchError> {
        lock(&self.state).in_flight -= 1;
        self.changed.notify_all();
        outcome.map(|out| with_frame(out, index))
    }
}

impl State {
    fn reserve(&mut self) -> u64 {
        self.in_flight += 1;
        self.next_frame += 1;
        self.next_frame - 1
    }
}

impl std::fmt::Debug for OrderedStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = lock(&self.state);
        f.debug_struct("OrderedStream")
            .field("window", &self.window)
            .field("in_flight", &st.in_flight)
            .field("next_frame", &st.next_frame)
            .field("finished", &st.finished)
            .finish()
    }
}
