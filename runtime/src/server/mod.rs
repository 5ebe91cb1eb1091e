//! The batch server: a bounded request queue, one worker thread per engine session, and
//! batches of same-size requests (the public face is [`crate::batching`]). The streams
//! that feed it in order, newest first or from many cameras are the next room,
//! [`crate::streams`].

pub(crate) mod handle;
pub(crate) mod queue;
pub(crate) mod run;
mod server;

use std::time::Duration;

use image::RgbImage;
use ndarray::Array3;

use crate::error::RuntimeError;
use crate::segmentation::{Segmentation, Served};

pub use handle::Handle;
pub use server::BatchServer;

/// How a [`BatchServer`] forms batches and how much it may hold; see the
/// [module docs](self) for why each knob exists.
///
/// ```
/// use segtool_runtime::batching::BatchConfig;
/// use std::time::Duration;
/// // A video pipeline: batches of up to 4, never waiting more than 5 ms to fill one.
/// let config = BatchConfig::new()
///     .with_max_batch(4)
///     .with_max_wait(Duration::from_millis(5))
///     .with_queue_capacity(16);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchConfig {
    /// Most requests per engine run (at least 1).
    pub max_batch: usize,
    /// How long the oldest request of a forming batch may wait for same-size company.
    pub max_wait: Duration,
    /// Requests waiting for a worker before `submit` blocks (at least 1).
    pub queue_capacity: usize,
    /// Return raw logits with every mask.
    pub keep_logits: bool,
}

impl Default for BatchConfig {
    fn default() -> Self {
        Self {
            max_batch: 8,
            max_wait: Duration::from_millis(2),
            queue_capacity: 64,
            keep_logits: false,
        }
    }
}

impl BatchConfig {
    /// The defaults: `max_batch` 8, `max_wait` 2 ms, `queue_capacity` 64, no logits.
    pub fn new() -> Self {
        Self::default()
    }

    /// A newest-frame stream's server ([`BatchServer::latest_stream`]): each frame runs
    /// alone as soon as a session is free (`max_batch` 1, no wait), and the queue holds
    /// the frames a `slot` of `slot` may keep waiting plus one in flight per session.
    /// Every live front end (the CLI's `--live`, Python's, C's, the GStreamer element's,
    /// the ROS 2 node's) starts from this, so they drop and answer frames alike.
    ///
    /// ```
    /// use segtool_runtime::batching::BatchConfig;
    /// let config = BatchConfig::live(1, 2);
    /// assert_eq!((config.max_batch, config.queue_capacity), (1, 3));
    /// assert!(config.max_wait.is_zero());
    /// ```
    pub fn live(slot: usize, sessions: usize) -> Self {
        Self::new()
            .with_max_batch(1)
            .with_max_wait(Duration::ZERO)
            .with_queue_capacity(slot.max(1) + sessions.max(1))
    }

    /// Upper bound of the batch dimension `N` handed to an engine.
    pub fn with_max_batch(mut self, max_batch: usize) -> Self {
        self.max_batch = max_batch;
        self
    }

    /// Latency budget for batch forming; `Duration::ZERO` runs whatever is queued at once.
    pub fn with_max_wait(mut self, max_wait: Duration) -> Self {
        self.max_wait = max_wait;
        self
    }

    /// Bound of the request queue (the backpressure point).
    pub fn with_queue_capacity(mut self, queue_capacity: usize) -> Self {
        self.queue_capacity = queue_capacity;
        self
    }

    /// Also return each image's logits `(classes, h, w)` in [`Segmentation::logits`].
    pub fn with_logits(mut self, keep: bool) -> Self {
        self.keep_logits = keep;
        self
    }

    fn validate(&self) -> Result<(), BatchError> {
        if self.max_batch == 0 {
            return Err(BatchError::InvalidConfig(
                "max_batch must be at least 1".into(),
            ));
        }
        if self.queue_capacity == 0 {
            return Err(BatchError::InvalidConfig(
                "queue_capacity must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

/// One request: an image, normalised by the server with the model's mean/std, or a
/// tensor `(3, H, W)` that is already normalised (e.g. from a GPU-side decoder).
///
/// # Example
///
/// ```
/// use ndarray::Array3;
/// use segtool_runtime::batching::Input;
/// // `submit` takes anything `Into<Input>`: an image, or a normalised tensor.
/// let image = Input::from(image::RgbImage::new(64, 48));
/// let tensor = Input::from(Array3::<f32>::zeros((3, 48, 64)));
/// assert_eq!(image.size(), (48, 64)); // (height, width): the batching key
/// assert_eq!(image.size(), tensor.size()); // so the two may share a batch
/// assert!(matches!(tensor, Input::Tensor(_)));
/// ```
#[derive(Clone, Debug)]
pub enum Input {
    /// An RGB frame: normalised by the server, or handed as its uint8 pixels to a
    /// `--preprocess` graph.
    Image(RgbImage),
    /// A normalised float32 `(3, H, W)` tensor (channels first, the model's mean/std
    /// already applied), run as is.
    Tensor(Array3<f32>),
}

impl Input {
    /// `(height, width)`: the batching key and the size of the returned mask.
    pub fn size(&self) -> (usize, usize) {
        match self {
            Input::Image(img) => (img.height() as usize, img.width() as usize),
            Input::Tensor(t) => (t.shape()[1], t.shape()[2]),
        }
    }

    /// Rejects what no model can take, before it occupies a queue slot.
    fn check(&self) -> Result<(), RuntimeError> {
        let (h, w) = self.size();
        let channels = match self {
            Input::Image(_) => 3,
            Input::Tensor(t) => t.shape()[0],
        };
        if channels == 3 && h > 0 && w > 0 {
            return Ok(());
        }
        let got = match self {
            Input::Image(_) => format!("a {w}x{h} image"),
            Input::Tensor(t) => format!("a tensor {:?}", t.shape()),
        };
        Err(RuntimeError::InputShape {
            expected: "a non-empty RGB image or a normalised (3, H, W) tensor".into(),
            got,
        })
    }
}

impl From<RgbImage> for Input {
    fn from(img: RgbImage) -> Self {
        Input::Image(img)
    }
}

impl From<Array3<f32>> for Input {
    fn from(t: Array3<f32>) -> Self {
        Input::Tensor(t)
    }
}

/// `seg` with its frame index set (a stream's answer).
pub(crate) fn with_frame(mut seg: Segmentation, frame: u64) -> Segmentation {
    if let Some(served) = &mut seg.served {
        served.frame = Some(frame);
    }
    seg
}

/// Why a request produced no [`Segmentation`].
///
/// # Example
///
/// ```
/// use segtool_runtime::batching::{BatchConfig, BatchError, BatchServer};
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// // A server is checked before it starts: here it has no engine to run on.
/// let err = BatchServer::new(BatchConfig::new(), spec, Vec::new()).unwrap_err();
/// assert!(matches!(err, BatchError::InvalidConfig(_)));
/// assert_eq!(err.to_string(), "invalid batch server configuration: no engines (workers) given");
/// // A handle's error tells whether its request ran at all.
/// let never_ran =
///     |e: &BatchError| matches!(e, BatchError::ShutDown | BatchError::DeadlineExpired);
/// assert!(never_ran(&BatchError::ShutDown));
/// ```
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    /// Normalising, running or decoding this request failed (its own error: a failing
    /// batch is retried request by request).
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The engine panicked while running this request alone.
    #[error("engine panicked: {0}")]
    EnginePanicked(String),
    /// The server shut down before the request ran.
    #[error("the batch server shut down before the request ran")]
    ShutDown,
    /// The result was lost (a worker died without answering); should not happen.
    #[error("the worker running the request went away without a result")]
    Disconnected,
    /// The request's deadline passed before a worker started it (it never ran).
    #[error("the request's deadline passed before it started")]
    DeadlineExpired,
    /// The server cannot be built as configured.
    #[error("invalid batch server configuration: {0}")]
    InvalidConfig(String),
}

/// [`BatchServer::try_submit`] / [`OrderedStream::try_push`] found no room; the request
/// is given back untouched.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let config = BatchConfig::new().with_queue_capacity(4);
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 1, config)?;
/// # let frame = image::RgbImage::new(640, 480);
/// match server.try_submit(frame) {
///     Ok(handle) => println!("queued as request {}", handle.id()),
///     Err(full) => {
///         eprintln!("{full}; frame dropped"); // or keep `full.into_input()` to retry
///         assert_eq!(full.capacity(), 4);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(thiserror::Error)]
#[error("the batch queue is full ({capacity} requests); retry later or drop the request")]
pub struct QueueFull {
    input: Input,
    capacity: usize,
}

impl QueueFull {
    pub(crate) fn new(input: Input, capacity: usize) -> Self {
        Self { input, capacity }
    }

    /// The rejected request.
    pub fn into_input(self) -> Input {
        self.input
    }

    /// The bound that was hit (queue capacity, or the stream's window).
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl std::fmt::Debug for QueueFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (h, w) = self.input.size();
        f.debug_struct("QueueFull")
            .field("input", &format_args!("{w}x{h}"))
            .field("capacity", &self.capacity)
            .finish()
    }
}

/// One worker's counters.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 2, BatchConfig::new())?;
/// # let frames: Vec<image::RgbImage> = Vec::new();
/// server.segment_all(frames)?;
/// for w in server.stats().workers {
///     println!(
///         "worker {} ({} on {}): {} requests, mean batch {:.1}, {} errors, busy {:?}",
///         w.worker, w.engine, w.provider, w.requests, w.mean_batch_size(), w.errors, w.busy
///     );
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkerStats {
    /// The worker's index: its engine's (or segmenter's) position in the list the
    /// server was built from, as in [`Served::worker`].
    pub worker: usize,
    /// [`Engine::name`](crate::Engine::name) of its engine (`onnxruntime`, `tract`).
    pub engine: String,
    /// [`Engine::provider`](crate::Engine::provider) of its engine: the execution
    /// provider actually in use (`cpu`, `cuda:0`, ...), which a fallback may have changed.
    pub provider: String,
    /// Engine runs that succeeded as a whole.
    pub batches: u64,
    /// Requests answered (with a result or an error).
    pub requests: u64,
    /// Batches that failed and were retried request by request.
    pub failed_batches: u64,
    /// Requests answered with an error.
    pub errors: u64,
    /// Largest batch run.
    pub max_batch_size: usize,
    /// Time spent normalising, running and decoding.
    pub busy: Duration,
}

impl WorkerStats {
    /// Mean requests per batch (0 before the first batch); the number to watch when
    /// tuning `max_wait` and `max_batch`.
    pub fn mean_batch_size(&self) -> f64 {
        let runs = self.batches + self.failed_batches;
        if runs == 0 {
            0.0
        } else {
            self.requests as f64 / runs as f64
        }
    }
}

/// A snapshot of the server.
///
/// # Example
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use segtool_runtime::batching::{BatchConfig, BatchServer};
/// use segtool_runtime::Segmenter;
/// let config = BatchConfig::new().with_queue_capacity(32);
/// let server = BatchServer::open(&Segmenter::builder("model.onnx"), 2, config)?;
/// # let frames: Vec<image::RgbImage> = Vec::new();
/// server.segment_all(frames)?;
/// let stats = server.stats();
/// assert!(stats.peak_alive <= 32 + 2 * server.config().max_batch);
/// // Near 1 under load: `max_wait` is too short, or the engines outpace the producers.
/// println!("{} batches, mean size {:.1}", stats.batches(), stats.mean_batch_size());
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    /// One entry per worker, in worker order.
    pub workers: Vec<WorkerStats>,
    /// Requests waiting in the queue now.
    pub queued: usize,
    /// Requests taken by workers and not answered yet.
    pub in_batches: usize,
    /// Highest `queued + in_batches` seen (bounded by `queue_capacity + workers * max_batch`).
    pub peak_alive: usize,
    /// Requests accepted into the queue.
    pub submitted: u64,
    /// `try_submit` calls refused with [`QueueFull`].
    pub rejected: u64,
    /// Requests skipped because their handle was dropped before they ran.
    pub abandoned: u64,
    /// Requests taken back unstarted (a [`LatestStream`] frame replaced by a newer one).
    pub cancelled: u64,
    /// Requests answered [`BatchError::DeadlineExpired`] by a worker.
    pub expired: u64,
}

impl Stats {
    /// Requests inside the server now.
    pub fn alive(&self) -> usize {
        self.queued + self.in_batches
    }

    /// Engine runs over all workers.
    pub fn batches(&self) -> u64 {
        self.workers
            .iter()
            .map(|w| w.batches + w.failed_batches)
            .sum()
    }

    /// Requests answered over all workers.
    pub fn requests(&self) -> u64 {
        self.workers.iter().map(|w| w.requests).sum()
    }

    /// Mean batch size over all workers.
    pub fn mean_batch_size(&self) -> f64 {
        match self.batches() {
            0 => 0.0,
            b => self.requests() as f64 / b as f64,
        }
    }
}
