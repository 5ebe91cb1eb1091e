//! Dynamic batching across several engines: many producers, one or more devices.
//!
//! A [`BatchServer`] owns a bounded request queue and one worker thread per
//! [`Engine`](crate::Engine) (one per GPU, or a few CPU sessions). Callers
//! [`submit`](BatchServer::submit) images (or already-normalised tensors) from any
//! number of threads and get a [`Handle`] back; each worker repeatedly takes the oldest
//! waiting request, gathers more requests of the **same spatial size** for a short while,
//! and runs them as one `[N, 3, H, W]` batch. A batch never mixes sizes, so no padding or
//! resizing ever changes a result: every mask is exactly what
//! [`Segmenter::segment`](crate::Segmenter::segment) gives for that image.
//!
//! For video, an [`OrderedStream`] puts results back in frame order although batches on
//! different devices finish out of order. For a live camera (a robot), a
//! [`LatestStream`] answers the newest frame instead: a submit that never blocks, a
//! bounded slot where a newer frame replaces an older one not yet started, optional
//! per-frame deadlines, and exact counts of what was dropped.
//!
//! # Configuration
//!
//! [`BatchConfig`] is built like `ort`'s session builder: start from
//! [`BatchConfig::new`] (the defaults below) and change what your pipeline needs.
//!
//! | knob | default | why it exists |
//! |---|---|---|
//! | [`max_batch`](BatchConfig::with_max_batch) | 8 | Upper bound of `N` per engine run. Bigger batches raise GPU throughput until the device is saturated, then only add latency and memory (activations grow linearly with `N`). Models exported with a fixed batch dimension need `max_batch = 1` or exactly that size. |
//! | [`max_wait`](BatchConfig::with_max_wait) | 2 ms | How long the *oldest* request of a forming batch may wait for company. `0` never waits (lowest latency, batches form only from what is already queued); a few ms trades that latency for fuller batches when requests trickle in. Under load the queue is never empty and batches fill without waiting. |
//! | [`queue_capacity`](BatchConfig::with_queue_capacity) | 64 | Requests waiting for a worker. This is the backpressure bound: when it is reached, [`submit`](BatchServer::submit) blocks and [`try_submit`](BatchServer::try_submit) fails with [`QueueFull`], so a camera faster than the model slows down (or drops frames) instead of growing memory. At most `queue_capacity + workers * max_batch` requests live inside the server. |
//! | [`keep_logits`](BatchConfig::with_logits) | `false` | Also return each image's raw logits `(classes, h, w)`; costs one copy per image and `classes` times the mask's memory. |
//!
//! [`Stats`] (per worker: batches run, mean batch size, engine time) tells whether the
//! knobs fit: a mean batch size near 1 under load means `max_wait` is too short or the
//! engines are faster than the producers; a queue that stays at `queue_capacity` means
//! the devices are the bottleneck.
//!
//! # Errors and shutdown
//!
//! Every request gets exactly one result through its own handle. When a batch fails
//! (engine error or panic), each of its requests is run again alone, so one bad request
//! fails only its own handle. Dropping the server (or [`BatchServer::shutdown`]) cancels
//! queued requests with [`BatchError::ShutDown`], lets batches already running finish, and
//! joins the workers; no handle is left hanging. Dropping a [`Handle`] before its request
//! runs cancels the request (stale video frames cost nothing).
//!
//! # Example: a video pipeline
//!
//! The model is exported with `segtool export --preprocess --argmax`: `--preprocess`
//! graphs get the frame's uint8 pixels directly and `--argmax` graphs answer the class
//! map, so nothing is normalised or argmaxed on the CPU (each [`Segmenter`](crate::Segmenter)
//! knows its file's contract, and the server drives it through that). One segmenter per
//! GPU; a capture thread pushes frames while the main thread consumes masks in frame
//! order; `push` blocks when 16 frames are in flight, so a slow model throttles the
//! camera.
//!
//! ```no_run
//! # #[cfg(not(feature = "ort"))] fn main() {}
//! # #[cfg(feature = "ort")]
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use segtool_runtime::batching::{BatchConfig, BatchServer};
//! use segtool_runtime::{EngineKind, Provider, Segmenter};
//! # fn camera() -> impl Iterator<Item = image::RgbImage> { std::iter::empty() }
//!
//! let config = BatchConfig::new()
//!     .with_max_batch(4)
//!     .with_max_wait(Duration::from_millis(5))
//!     .with_queue_capacity(32);
//! // One segmenter per GPU, planned for the camera's 1024x512 frames (height, width).
//! let mut segmenters = Vec::new();
//! for gpu in 0..2 {
//!     let seg = Segmenter::builder("model.onnx")
//!         .engine(EngineKind::Ort)
//!         .providers([Provider::Cuda { device_id: gpu }])
//!         .fixed_size(512, 1024)
//!         .open()?;
//!     for fallback in seg.fallbacks() {
//!         eprintln!("gpu {gpu}: {fallback}"); // e.g. "cuda:1 requested, running on cpu: ..."
//!     }
//!     segmenters.push(seg);
//! }
//! let server = BatchServer::from_segmenters(config, segmenters)?;
//! let stream = server.ordered_stream(16);
//! std::thread::scope(|s| -> Result<(), Box<dyn std::error::Error>> {
//!     s.spawn(|| {
//!         for frame in camera() {
//!             stream.push(frame); // blocks while 16 frames are in flight
//!         }
//!         stream.finish(); // `next` returns None once the last result is out
//!     });
//!     while let Some(result) = stream.next() {
//!         let out = result?;
//!         let frame = out.served.and_then(|s| s.frame);
//!         println!("frame {frame:?}: {:?} mask", out.mask.dim());
//!     }
//!     Ok(())
//! })?;
//! eprintln!("{:?}", server.stats());
//! # Ok(()) }
//! ```

pub use crate::server::{
    BatchConfig, BatchError, BatchServer, Handle, Input, QueueFull, Stats, WorkerStats,
};
pub use crate::segmentation::Served;
pub use crate::streams::{
    Backlog, DropReason, Latency, LatestStats, LatestStream, LiveFrame, LiveOutcome,
    MultiStream, OrderedStream, SourceConfig, SourceError, SourceFrame, SourceStats,
};
