//! The newest-frame stream for live cameras (robots): the opaque [`segtool_live`] over a
//! `segtool_runtime::batching::LatestStream`, its options, `segtool_live_submit` (never waits for
//! the model; the camera callback's call), `segtool_live_next` (the inference thread's
//! call: the next answered frame, in frame order), the drop counters and optional
//! temporal smoothing of logits; and many cameras on the one handle: sources added with
//! `segtool_live_add_source` (a `MultiStream` on the same server), fed by
//! `segtool_live_submit_source`, read by `segtool_live_next_source`, counted by
//! `segtool_live_source_stats`.

use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use segtool_runtime::batching::{
    BatchConfig, BatchError, BatchServer, LatestStats, LatestStream, LiveFrame, LiveOutcome,
    MultiStream,
};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{OutputKind, TemporalSmoother};

use crate::options::{segtool_options, segtool_options_default};
use crate::result::{segtool_result, Logits};
use crate::segmenter::builder;
use crate::status::segtool_status::{self, *};
use crate::status::{clear_out, path_arg, status_guard, write_if_asked, Error};

/// Options of `segtool_live_open`. Start from `segtool_live_options_default()`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct segtool_live_options {
    /// Frames that may wait unstarted (default 1). A frame submitted to a full slot
    /// replaces the oldest waiting one, which is dropped and counted; a frame already
    /// running always finishes.
    pub slot: u32,
    /// A frame not started within this many milliseconds of its submission is dropped
    /// (counted in `expired`), never run late; 0 (default): no deadline.
    pub deadline_ms: u32,
    /// Engine sessions, each on its own thread (default 1). Every session loads the
    /// model once more.
    pub sessions: u32,
    /// Temporal smoothing: weight of the history in an exponential moving average of
    /// the logits across answered frames, in [0, 1); 0 (default) is off. 0.5 to 0.7
    /// steadies masks that flicker between frames, at a lag of about one frame on moving
    /// edges. Needs a model that outputs logits (not exported with `--argmax`).
    pub smooth: f32,
    /// Most frames one engine run takes (default 1: each session runs one frame at a
    /// time). Above 1, the frames waiting from sources added with
    /// `segtool_live_add_source` run together, at most one per source, the source served
    /// longest ago first: many cameras batched on one model. Added last: a program built
    /// against an older header must be rebuilt.
    pub max_batch: u32,
}

/// The counters of a live stream. `submitted == answered + failed + replaced + expired
/// + rejected + pending` at every moment; `pending` is 0 once the stream is drained.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct segtool_live_counts {
    /// Accepted `segtool_live_submit` calls (invalid arguments are not frames).
    pub submitted: u64,
    /// Frames whose class map `segtool_live_next` returns (or returned).
    pub answered: u64,
    /// Frames that ran and failed: `segtool_live_next` reports their status.
    pub failed: u64,
    /// Frames a newer `segtool_live_submit` pushed out of the slot before they started.
    pub replaced: u64,
    /// Frames not started within `deadline_ms`.
    pub expired: u64,
    /// `segtool_live_submit` calls refused because the internal queue was full.
    pub rejected: u64,
    /// Frames in the slot or running now: `segtool_live_next` has more to return.
    pub pending: u64,
}

/// Arrival-to-answer latency of one source's answered frames (the last 4096), as
/// `segtool_live_source_stats` reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct segtool_live_latency {
    /// Answered frames the percentiles are over (0: both are 0).
    pub samples: u64,
    /// Median, milliseconds.
    pub p50_ms: f64,
    /// 99th percentile (nearest rank), milliseconds.
    pub p99_ms: f64,
}

/// A newest-frame stream over one model (opaque).
pub struct segtool_live {
    // Declared before the server: dropped first, taking back their waiting frames.
    stream: LatestStream,
    /// The sources added by `segtool_live_add_source` (ids 1, 2, ...).
    cameras: MultiStream,
    server: BatchServer,
    smoother: Option<Mutex<TemporalSmoother>>,
    /// `segtool_options.logits`: results carry their logits.
    logits: bool,
    /// `segtool_live_options.smooth`: each added source smooths its own frames.
    smooth: f32,
    /// The added sources, id `i + 1` at `i`.
    sources: Mutex<Vec<Source>>,
    /// Which of the stream and the sources `segtool_live_next_source` looks at first.
    turn: AtomicUsize,
}

/// One source added by `segtool_live_add_source`.
struct Source {
    name: String,
    slot: usize,
    smoother: Option<Mutex<TemporalSmoother>>,
}

/// Frames the sources added to one handle may keep waiting, all their slots together.
const SOURCE_SLOTS: usize = 256;

/// The default live options: slot 1, no deadline, one session, no smoothing.
#[no_mangle]
pub extern "C" fn segtool_live_options_default() -> segtool_live_options {
    segtool_live_options {
        slot: 1,
        deadline_ms: 0,
        sessions: 1,
        smooth: 0.0,
        max_batch: 1,
    }
}

fn live_ref<'a>(live: *const segtool_live) -> Result<&'a segtool_live, Error> {
    // SAFETY: a non-null handle comes from `segtool_live_open` and is not closed yet.
    unsafe { live.as_ref() }.ok_or_else(|| Error::null("live"))
}

impl From<BatchError> for Error {
    fn from(e: BatchError) -> Self {
        match e {
            BatchError::Runtime(e) => e.into(),
            BatchError::EnginePanicked(m) => {
                Error::new(SEGTOOL_ERR_INFERENCE, format!("engine panicked: {m}"))
            }
            other => Error::new(SEGTOOL_ERR_INFERENCE, other.to_string()),
        }
    }
}

fn open_live(
    path: &std::path::Path,
    opts: &segtool_options,
    live: &segtool_live_options,
) -> Result<segtool_live, Error> {
    if !(0.0..1.0).contains(&live.smooth) {
        return Err(Error::invalid(format!(
            "smooth {} is not in [0, 1) (the weight of the history; 0 is off)",
            live.smooth
        )));
    }
    let sessions = live.sessions.max(1) as usize;
    let mut segmenters = Vec::with_capacity(sessions);
    for _ in 0..sessions {
        let seg = builder(path, opts)?.open()?;
        if live.smooth > 0.0 && seg.contract().output == OutputKind::Mask {
            return Err(Error::invalid(format!(
                "smooth: {} outputs a class map (exported with --argmax), and smoothing \
                 needs logits; export without --argmax, or set smooth to 0",
                path.display()
            )));
        }
        segmenters.push(seg);
    }
    // Room in the queue for the sources' slots too (the stream alone never queues more
    // than its slot).
    let config = BatchConfig::live(live.slot as usize, sessions)
        .with_max_batch(live.max_batch.max(1) as usize)
        .with_queue_capacity(live.slot.max(1) as usize + sessions + SOURCE_SLOTS)
        .with_logits(live.smooth > 0.0 || opts.logits);
    let server = BatchServer::from_segmenters(config, segmenters)?;
    let stream = server.latest_stream(live.slot.max(1) as usize);
    let cameras = server.multi_stream();
    if live.deadline_ms > 0 {
        stream.set_deadline(Some(Duration::from_millis(u64::from(live.deadline_ms))));
    }
    let smoother = (live.smooth > 0.0)
        .then(|| TemporalSmoother::new(live.smooth).map(Mutex::new))
        .transpose()
        .map_err(|e| Error::invalid(e.to_string()))?;
    Ok(segtool_live {
        stream,
        cameras,
        server,
        smoother,
        logits: opts.logits,
        smooth: live.smooth,
        sources: Mutex::new(Vec::new()),
        turn: AtomicUsize::new(0),
    })
}

/// Opens a newest-frame stream: loads the model at `model_path` with `opts` (NULL:
/// defaults; as for `segtool_open`) once per session of `live_opts` (NULL: defaults).
/// On success `*out` receives a handle to free with `segtool_live_close`; on failure
/// NULL.
///
/// # Safety
/// As for `segtool_open`; `live_opts` is NULL or points to a valid
/// `segtool_live_options`.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_open(
    model_path: *const std::ffi::c_char,
    opts: *const segtool_options,
    live_opts: *const segtool_live_options,
    out: *mut *mut segtool_live,
) -> segtool_status {
    status_guard(|| {
        // SAFETY: `out` is NULL or writable (contract).
        unsafe { clear_out(out) }?;
        // SAFETY: contract above.
        let path = unsafe { path_arg(model_path, "model_path") }?;
        // SAFETY: NULL or valid (contract).
        let opts = unsafe { opts.as_ref() }
            .copied()
            .unwrap_or_else(|| segtool_options_default());
        // SAFETY: NULL or valid (contract).
        let live = unsafe { live_opts.as_ref() }
            .copied()
            .unwrap_or_else(|| segtool_live_options_default());
        let handle = open_live(&path, &opts, &live)?;
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(handle)) };
        Ok(())
    })
}

/// Submits one packed 8-bit RGB frame (as for `segtool_segment`; the pixels are copied
/// before it returns). Never waits for the model: it only copies the frame and takes two
/// short locks, so it can run in a camera callback. `*frame_index` (if not NULL)
/// receives the frame's index (0, 1, 2, ... in submission order), which
/// `segtool_live_next` reports with its class map.
///
/// # Safety
/// `live` is NULL or a live handle; `rgb` as for `segtool_segment`; `frame_index` is
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_submit(
    live: *const segtool_live,
    rgb: *const u8,
    width: u32,
    height: u32,
    stride_bytes: u32,
    frame_index: *mut u64,
) -> segtool_status {
    // SAFETY: the same contract; source 0 is the handle's own stream.
    unsafe { segtool_live_submit_source(live, 0, rgb, width, height, stride_bytes, frame_index) }
}

/// Waits up to `timeout_ms` milliseconds for the next answered frame (frames come in
/// submission order; dropped ones are skipped and only counted). On `SEGTOOL_OK`,
/// `*out` receives its class map (free it with `segtool_result_free`) and
/// `*frame_index` (if not NULL) its index. `SEGTOOL_TIMEOUT`: no frame was answered in
/// time. `SEGTOOL_END`: `segtool_live_finish` was called and every frame is out. A frame
/// that failed returns its error status with `*frame_index` set and `*out` NULL; the
/// next call goes on with the next frame. Call it from one thread (temporal smoothing
/// follows the order of the calls).
///
/// # Safety
/// `live` is NULL or a live handle; `frame_index` is NULL or writable; `out` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_next(
    live: *const segtool_live,
    timeout_ms: u32,
    frame_index: *mut u64,
    out: *mut *mut segtool_result,
) -> segtool_status {
    status_guard(|| {
        // SAFETY: `out` is NULL or writable (contract).
        unsafe { clear_out(out) }?;
        let live = live_ref(live)?;
        let until = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Some(frame) = live.stream.next_timeout(left) else {
                return Err(if live.stream.is_drained() {
                    Error::new(SEGTOOL_END, "the stream is finished and drained")
                } else {
                    Error::new(
                        SEGTOOL_TIMEOUT,
                        format!("no frame answered within {timeout_ms} ms"),
                    )
                });
            };
            // SAFETY: NULL or writable (contract).
            unsafe { write_if_asked(frame_index, frame.frame) };
            let Some(result) = live.answer(frame, live.smoother.as_ref(), "")? else {
                continue;
            };
            // SAFETY: as above.
            unsafe { *out = Box::into_raw(Box::new(result)) };
            return Ok(());
        }
    })
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl segtool_live {
    /// A frame's class map (smoothed by `smoother` when given); `None` for a dropped
    /// frame; a failed frame's error, naming the frame (and `source`, unless empty).
    fn answer(
        &self,
        frame: LiveFrame,
        smoother: Option<&Mutex<TemporalSmoother>>,
        source: &str,
    ) -> Result<Option<segtool_result>, Error> {
        let out_map = match frame.outcome {
            LiveOutcome::Dropped(_) => return Ok(None),
            LiveOutcome::Failed(e) => {
                let mut err = Error::from(e);
                err.message = match source {
                    "" => format!("frame {}: {}", frame.frame, err.message),
                    s => format!("source {s:?} frame {}: {}", frame.frame, err.message),
                };
                return Err(err);
            }
            LiveOutcome::Answered(o) => o,
        };
        let (height, width) = out_map.mask.dim();
        let mask = match (smoother, &out_map.logits) {
            (Some(smoother), Some(logits)) => lock(smoother).mask(logits.view(), height, width),
            _ => out_map.mask,
        };
        // Logits for smoothing alone stay inside.
        let logits = out_map
            .logits
            .filter(|_| self.logits)
            .map(|l| Logits::new(l.dim(), l.iter().copied().collect()));
        Ok(Some(segtool_result::new(mask, logits)))
    }

    /// The id of the added source named `name`.
    fn source_id(&self, name: &str) -> u32 {
        lock(&self.sources)
            .iter()
            .position(|s| s.name == name)
            .map_or(0, |i| i as u32 + 1)
    }

    /// Source `id`'s name (`None` for 0, the handle's own stream), or an error naming
    /// the sources there are.
    fn source_name(&self, id: u32) -> Result<Option<String>, Error> {
        if id == 0 {
            return Ok(None);
        }
        let sources = lock(&self.sources);
        match sources.get(id as usize - 1) {
            Some(s) => Ok(Some(s.name.clone())),
            None => {
                let known: Vec<String> = std::iter::once("0 (segtool_live_submit's)".to_owned())
                    .chain(
                        sources
                            .iter()
                            .enumerate()
                            .map(|(i, s)| format!("{} {:?}", i + 1, s.name)),
                    )
                    .collect();
                Err(Error::invalid(format!(
                    "no source {id} on this live stream (sources: {})",
                    known.join(", ")
                )))
            }
        }
    }
}

/// No more frames will be submitted, to the handle's own stream nor to any added
/// source: once every frame is out, `segtool_live_next` (and `segtool_live_next_source`)
/// return `SEGTOOL_END` instead of waiting.
///
/// # Safety
/// `live` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_finish(live: *const segtool_live) -> segtool_status {
    status_guard(|| {
        let live = live_ref(live)?;
        live.stream.finish();
        live.cameras.finish();
        Ok(())
    })
}

/// Copies the counters into `*out`.
///
/// # Safety
/// `live` is NULL or a live handle; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_stats(
    live: *const segtool_live,
    out: *mut segtool_live_counts,
) -> segtool_status {
    status_guard(|| {
        if out.is_null() {
            return Err(Error::null("out"));
        }
        let stats = counts_of(live_ref(live)?.stream.stats());
        // SAFETY: non-null and writable (contract).
        unsafe { *out = stats };
        Ok(())
    })
}

/// Frees a live stream: frames still waiting are dropped, a frame running finishes, the
/// session threads are joined. NULL is a no-op. No other thread may be using it.
///
/// # Safety
/// `live` is NULL or a handle from `segtool_live_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_close(live: *mut segtool_live) {
    status_guard(|| {
        if !live.is_null() {
            // SAFETY: from `Box::into_raw` in `segtool_live_open`, closed once (contract).
            let live = unsafe { Box::from_raw(live) };
            let segtool_live {
                stream,
                cameras,
                server,
                ..
            } = *live;
            drop(stream);
            drop(cameras);
            server.shutdown();
        }
        Ok(())
    });
}

// Many cameras on the one handle.
mod sources;
pub use sources::{
    segtool_live_add_source, segtool_live_finish_source, segtool_live_next_source,
    segtool_live_source_stats, segtool_live_submit_source,
};

fn counts_of(s: LatestStats) -> segtool_live_counts {
    segtool_live_counts {
        submitted: s.submitted,
        answered: s.answered,
        failed: s.failed,
        replaced: s.replaced,
        expired: s.expired,
        rejected: s.rejected,
        pending: s.pending,
    }
}
