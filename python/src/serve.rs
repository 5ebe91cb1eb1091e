//! `BatchServer` (many callers, one or more segmenters, future-like `Pending` handles),
//! `LiveStream` (the newest-frame stream with deadlines) and `MultiStream` (many cameras,
//! one model), over the runtime's `BatchServer`, `LatestStream` and `MultiStream`. The
//! Python segmenters stay usable: each worker runs its segmenter's engine under the same
//! lock as `Segmenter.segment`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use segtool_runtime::batching::{
    BatchConfig, BatchError, Handle, LatestStream, LiveOutcome, SourceConfig, SourceError,
};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{
    expert::{Engine, EngineInput, EngineOutput},
    IoContract, OutputKind, TemporalSmoother,
};

use crate::errors;
use crate::pixels::{self, Color};
use crate::segmenter::{lock, segmentation, Model, Segmentation, Segmenter, SIGNAL_POLL};

/// A worker's engine: the segmenter's own, borrowed under its lock for each run.
struct SharedEngine {
    model: Arc<Model>,
    name: String,
    provider: String,
}

impl Engine for SharedEngine {
    fn name(&self) -> &str {
        &self.name
    }
    fn provider(&self) -> &str {
        &self.provider
    }
    fn run(&mut self, input: EngineInput<'_>) -> segtool_runtime::Result<EngineOutput> {
        lock(&self.model.seg).engine_mut().run(input)
    }
    fn io_contract(&self) -> Option<IoContract> {
        Some(self.model.contract)
    }
}

fn server_over(
    segmenters: &[PyRef<'_, Segmenter>],
    config: BatchConfig,
) -> PyResult<segtool_runtime::batching::BatchServer> {
    let first = segmenters
        .first()
        .ok_or_else(|| errors::input("at least one Segmenter", "an empty list"))?;
    let spec = first.model.spec.clone();
    let engines = segmenters
        .iter()
        .map(|s| {
            Box::new(SharedEngine {
                model: s.model.clone(),
                name: s.engine.clone(),
                provider: s.provider.clone(),
            }) as Box<dyn Engine>
        })
        .collect();
    if let Some(i) = segmenters.iter().position(|s| s.model.spec != spec) {
        return Err(errors::input(
            "segmenters of one model (the same spec)",
            format!("segmenter {i} has another model spec than segmenter 0"),
        ));
    }
    // The workers run the pipeline as the segmenters do (their card, the graph's fixed
    // batch): every segmenter must serve the same model.
    let card = lock(&first.model.seg).card().card.clone();
    if let Some(i) = segmenters
        .iter()
        .position(|s| lock(&s.model.seg).card().card != card)
    {
        return Err(errors::input(
            "segmenters of one model (the same model card)",
            format!("segmenter {i} has another model card than segmenter 0"),
        ));
    }
    if segmenters
        .iter()
        .any(|s| lock(&s.model.seg).accuracy().is_some())
    {
        return Err(errors::input(
            "segmenters without accuracy mode (it runs image by image: segment_batch)",
            "a segmenter opened with protocol=",
        ));
    }
    let preparer = lock(&first.model.seg).preparer();
    segtool_runtime::batching::BatchServer::with_preparer(config, preparer, engines)
        .map_err(errors::batch)
}

fn output_segmentation(
    py: Python<'_>,
    out: segtool_runtime::Segmentation,
    scores: bool,
) -> PyResult<Py<Segmentation>> {
    let logits = if scores { out.logits } else { None };
    segmentation(py, out.mask, logits, None)
}

/// One submitted image's result, future-like: `result(timeout=None)`, `done()`.
#[pyclass(module = "segtool._segtool")]
pub struct Pending {
    handle: Option<Handle>,
    outcome: Option<PyResult<Py<Segmentation>>>,
    scores: bool,
}

#[pymethods]
impl Pending {
    /// Whether `result()` would return at once.
    fn done(&self) -> bool {
        self.outcome.is_some() || self.handle.as_ref().is_some_and(Handle::is_ready)
    }

    /// The result, waiting up to `timeout` seconds (None: as long as it takes); raises
    /// the request's error, or `TimeoutError`.
    #[pyo3(signature = (timeout = None))]
    fn result(&mut self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Py<Segmentation>> {
        let until = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        while self.outcome.is_none() {
            let handle = self.handle.take().expect("a handle until answered");
            let step = until.map_or(SIGNAL_POLL, |u| {
                u.saturating_duration_since(Instant::now()).min(SIGNAL_POLL)
            });
            match py.detach(|| handle.wait_timeout(step)) {
                Ok(r) => {
                    self.outcome = Some(
                        r.map_err(errors::batch)
                            .and_then(|o| output_segmentation(py, o, self.scores)),
                    )
                }
                Err(handle) => {
                    self.handle = Some(handle);
                    if let Err(e) = py.check_signals() {
                        return Err(e);
                    }
                    if until.is_some_and(|u| Instant::now() >= u) {
                        return Err(pyo3::exceptions::PyTimeoutError::new_err(
                            "the request is not answered yet",
                        ));
                    }
                }
            }
        }
        match self.outcome.as_ref().expect("answered") {
            Ok(seg) => Ok(seg.clone_ref(py)),
            Err(e) => Err(e.clone_ref(py)),
        }
    }
}

/// Dynamic batching over one or more segmenters.
#[pyclass(module = "segtool._segtool", frozen)]
pub struct BatchServer {
    // Taken out by `close`; the lock is only held to clone or take the Arc (never while
    // waiting), so a thread holding the GIL never waits for one that needs it.
    server: Mutex<Option<Arc<segtool_runtime::batching::BatchServer>>>,
    scores: bool,
}

#[pymethods]
impl BatchServer {
    #[new]
    #[pyo3(signature = (segmenters, max_batch = 8, max_delay_ms = 2.0, queue_capacity = 64, scores = false))]
    fn new(
        segmenters: Vec<PyRef<'_, Segmenter>>,
        max_batch: usize,
        max_delay_ms: f64,
        queue_capacity: usize,
        scores: bool,
    ) -> PyResult<Self> {
        if !(max_delay_ms >= 0.0 && max_delay_ms.is_finite()) {
            return Err(errors::input(
                "max_delay_ms >= 0",
                format!("{max_delay_ms}"),
            ));
        }
        let config = BatchConfig::new()
            .with_max_batch(max_batch)
            .with_max_wait(Duration::from_secs_f64(max_delay_ms / 1e3))
            .with_queue_capacity(queue_capacity)
            .with_logits(scores);
        if scores
            && segmenters
                .iter()
                .any(|s| s.model.contract.output == OutputKind::Mask)
        {
            return Err(errors::input(
                "scores=False with models exported with --argmax",
                "scores=True",
            ));
        }
        Ok(Self {
            server: Mutex::new(Some(Arc::new(server_over(&segmenters, config)?))),
            scores,
        })
    }

    /// Queues one image (copied; blocks while the queue is full, without the GIL) and
    /// returns its `Pending` result.
    #[pyo3(signature = (img, color = "rgb"))]
    fn submit(&self, py: Python<'_>, img: &Bound<'_, PyAny>, color: &str) -> PyResult<Pending> {
        let color = Color::parse(color)?;
        let arr = pixels::image_arg(img)?;
        let rgb = pixels::to_rgb_image(arr.as_array(), color);
        let server = lock(&self.server)
            .clone()
            .ok_or_else(|| errors::StreamClosedError::new_err("the batch server is closed"))?;
        let handle = py.detach(|| server.submit(rgb));
        Ok(Pending {
            handle: Some(handle),
            outcome: None,
            scores: self.scores,
        })
    }

    /// Counters: submitted, requests, batches, mean_batch_size, queued.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        let server = lock(&self.server).clone();
        if let Some(s) = server.map(|s| s.stats()) {
            d.set_item("submitted", s.submitted)?;
            d.set_item("requests", s.requests())?;
            d.set_item("batches", s.batches())?;
            d.set_item("mean_batch_size", s.mean_batch_size())?;
            d.set_item("queued", s.queued)?;
        }
        Ok(d)
    }

    /// Answers queued requests with `StreamClosedError`, finishes running batches and
    /// stops the workers. Idempotent.
    fn close(&self, py: Python<'_>) {
        let server = lock(&self.server).take();
        if let Some(server) = server {
            // Submits in flight hold clones; shutdown answers what they queued.
            py.detach(move || server.shutdown());
        }
    }
}

/// What became of one frame of a `LiveStream`.
#[pyclass(module = "segtool._segtool", frozen, get_all)]
pub struct LiveResult {
    /// The frame's index: the one given to `submit`, else its submission number.
    pub index: u64,
    /// "answered", "dropped" or "failed".
    pub status: &'static str,
    /// Why it was dropped or failed (None when answered).
    pub reason: Option<String>,
    /// The result when answered, else None.
    pub segmentation: Option<Py<Segmentation>>,
    /// Seconds from `submit` to the fate being known.
    pub latency: f64,
    /// The camera it came from (a `MultiStream`'s source name; None for a `LiveStream`).
    pub source: Option<String>,
}

#[pymethods]
impl LiveResult {
    #[getter]
    fn mask(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.segmentation
            .as_ref()
            .map(|s| Ok(s.bind(py).get().mask.clone_ref(py).into_any()))
            .transpose()
    }

    fn __repr__(&self) -> String {
        match &self.source {
            Some(source) => format!(
                "LiveResult(source={source:?}, index={}, status={:?}, reason={:?})",
                self.index, self.status, self.reason
            ),
            None => format!(
                "LiveResult(index={}, status={:?}, reason={:?})",
                self.index, self.status, self.reason
            ),
        }
    }
}

/// A newest-frame stream over one segmenter.
#[pyclass(module = "segtool._segtool", frozen)]
pub struct LiveStream {
    // Declared before the server: dropped first, taking back its waiting frames.
    stream: LatestStream,
    server: segtool_runtime::batching::BatchServer,
    smoother: Option<Mutex<TemporalSmoother>>,
    /// Stream frame number -> the index the caller gave.
    indices: Mutex<HashMap<u64, u64>>,
    closed: Mutex<bool>,
}

#[pymethods]
impl LiveStream {
    #[new]
    #[pyo3(signature = (segmenter, slot = 1, deadline_ms = None, smooth = None))]
    fn new(
        segmenter: PyRef<'_, Segmenter>,
        slot: usize,
        deadline_ms: Option<f64>,
        smooth: Option<f32>,
    ) -> PyResult<Self> {
        if slot == 0 {
            return Err(errors::input("slot >= 1", "0"));
        }
        let smooth = smooth.filter(|&w| w != 0.0);
        if let Some(w) = smooth {
            if !(0.0..1.0).contains(&w) {
                return Err(errors::input(
                    "smooth in [0, 1) (the weight of the history; None or 0 is off)",
                    format!("{w}"),
                ));
            }
            if segmenter.model.contract.output == OutputKind::Mask {
                return Err(errors::input(
                    "a model that outputs logits for smoothing (export without --argmax)",
                    "a model that outputs class maps",
                ));
            }
        }
        let config = BatchConfig::live(slot, 1).with_logits(smooth.is_some());
        let server = server_over(&[segmenter], config)?;
        let stream = server.latest_stream(slot);
        match deadline_ms {
            Some(ms) if ms > 0.0 && ms.is_finite() => {
                stream.set_deadline(Some(Duration::from_secs_f64(ms / 1e3)))
            }
            Some(ms) => return Err(errors::input("deadline_ms > 0 or None", format!("{ms}"))),
            None => {}
        }
        let smoother = smooth
            .map(|w| TemporalSmoother::new(w).map(Mutex::new))
            .transpose()
            .map_err(|e| errors::input("smooth in [0, 1)", e.to_string()))?;
        Ok(Self {
            stream,
            server,
            smoother,
            indices: Mutex::new(HashMap::new()),
            closed: Mutex::new(false),
        })
    }

    /// Submits a frame (copied) and returns its index. Never waits for the model.
    #[pyo3(signature = (frame, index = None, color = "rgb"))]
    fn submit(&self, frame: &Bound<'_, PyAny>, index: Option<u64>, color: &str) -> PyResult<u64> {
        if *lock(&self.closed) {
            return Err(errors::StreamClosedError::new_err(
                "submit on a closed LiveStream",
            ));
        }
        let color = Color::parse(color)?;
        let arr = pixels::image_arg(frame)?;
        let rgb = pixels::to_rgb_image(arr.as_array(), color);
        let n = self.stream.submit(rgb);
        if let Some(i) = index {
            lock(&self.indices).insert(n, i);
        }
        Ok(index.unwrap_or(n))
    }

    /// The oldest frame's fate (frames come in submission order), waiting up to
    /// `timeout` seconds (None: until one is known); None on timeout, or once the stream
    /// is closed and every frame is out.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<LiveResult>> {
        let until = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        loop {
            let step = until.map_or(SIGNAL_POLL, |u| {
                u.saturating_duration_since(Instant::now()).min(SIGNAL_POLL)
            });
            let stream = &self.stream;
            if let Some(frame) = py.detach(|| stream.next_timeout(step)) {
                return self.result(py, frame).map(Some);
            }
            if self.stream.is_drained() || until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// Counters: submitted, answered, dropped, failed, replaced, expired, rejected, pending.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.stream.stats();
        let d = PyDict::new(py);
        d.set_item("submitted", s.submitted)?;
        d.set_item("answered", s.answered)?;
        d.set_item("dropped", s.dropped())?;
        d.set_item("failed", s.failed)?;
        d.set_item("replaced", s.replaced)?;
        d.set_item("expired", s.expired)?;
        d.set_item("rejected", s.rejected)?;
        d.set_item("pending", s.pending)?;
        Ok(d)
    }

    /// No more frames: `submit` raises from now on; the frames already submitted still
    /// come out of `next` (which then returns None). Idempotent.
    fn close(&self) {
        *lock(&self.closed) = true;
        self.stream.finish();
    }

    /// Closes, drops the frames still waiting and stops the worker.
    fn shutdown(&self, py: Python<'_>) {
        self.close();
        let server = &self.server;
        py.detach(|| server.shutdown());
    }
}

impl LiveStream {
    fn result(
        &self,
        py: Python<'_>,
        frame: segtool_runtime::batching::LiveFrame,
    ) -> PyResult<LiveResult> {
        let index = lock(&self.indices)
            .remove(&frame.frame)
            .unwrap_or(frame.frame);
        live_result(py, frame, index, self.smoother.as_ref())
    }
}

/// One frame's fate as Python sees it, its mask smoothed when a smoother is given.
fn live_result(
    py: Python<'_>,
    frame: segtool_runtime::batching::LiveFrame,
    index: u64,
    smoother: Option<&Mutex<TemporalSmoother>>,
) -> PyResult<LiveResult> {
    let latency = frame.submitted.elapsed().as_secs_f64();
    let (status, reason, segmentation) = match frame.outcome {
        LiveOutcome::Answered(out) => {
            let (h, w) = out.mask.dim();
            let mask = match (smoother, &out.logits) {
                (Some(s), Some(logits)) => lock(s).mask(logits.view(), h, w),
                _ => out.mask,
            };
            ("answered", None, Some(segmentation(py, mask, None, None)?))
        }
        LiveOutcome::Dropped(why) => ("dropped", Some(why.to_string()), None),
        LiveOutcome::Failed(e) => ("failed", Some(failure(e)), None),
    };
    Ok(LiveResult {
        index,
        status,
        reason,
        segmentation,
        latency,
        source: None,
    })
}

fn failure(e: BatchError) -> String {
    e.to_string()
}

/// Many cameras, one model: named sources over one segmenter's model, batched across
/// the cameras (at most one frame of each per engine run).
#[pyclass(module = "segtool._segtool", frozen)]
pub struct MultiStream {
    // Declared before the server: dropped first, taking back its waiting frames.
    stream: segtool_runtime::batching::MultiStream,
    server: segtool_runtime::batching::BatchServer,
    /// (source, stream frame number) -> the index the caller gave.
    indices: Mutex<HashMap<(String, u64), u64>>,
    /// `finish` was called.
    finished: Mutex<bool>,
}

/// Frames waiting in the server's queue, all cameras together: beyond it a frame is
/// dropped and counted as rejected. Each camera's own slot bounds what it keeps waiting.
const MULTI_QUEUE: usize = 4096;

fn source_error(e: SourceError) -> PyErr {
    match e {
        SourceError::Finished(_) => errors::StreamClosedError::new_err(e.to_string()),
        SourceError::Unknown { .. } | SourceError::Duplicate(_) => {
            errors::InputError::new_err(e.to_string())
        }
    }
}

#[pymethods]
impl MultiStream {
    #[new]
    #[pyo3(signature = (segmenter, max_batch = 4, max_delay_ms = 2.0))]
    fn new(segmenter: PyRef<'_, Segmenter>, max_batch: usize, max_delay_ms: f64) -> PyResult<Self> {
        if max_batch == 0 {
            return Err(errors::input("max_batch >= 1", "0"));
        }
        if !(max_delay_ms >= 0.0 && max_delay_ms.is_finite()) {
            return Err(errors::input(
                "max_delay_ms >= 0",
                format!("{max_delay_ms}"),
            ));
        }
        let config = BatchConfig::new()
            .with_max_batch(max_batch)
            .with_max_wait(Duration::from_secs_f64(max_delay_ms / 1e3))
            .with_queue_capacity(MULTI_QUEUE);
        let server = server_over(&[segmenter], config)?;
        Ok(Self {
            stream: server.multi_stream(),
            server,
            indices: Mutex::new(HashMap::new()),
            finished: Mutex::new(false),
        })
    }

    /// Opens a camera: `backlog` "newest" (a full slot drops its oldest frame) or
    /// "ordered" (a full slot makes `submit` wait: every frame runs); frames not started
    /// within `deadline_ms` are dropped.
    #[pyo3(signature = (name, slot = 1, backlog = "newest", deadline_ms = None))]
    fn add_source(
        &self,
        name: &str,
        slot: usize,
        backlog: &str,
        deadline_ms: Option<f64>,
    ) -> PyResult<()> {
        if slot == 0 {
            return Err(errors::input("slot >= 1", "0"));
        }
        let mut config = match backlog {
            "newest" => SourceConfig::newest(),
            "ordered" => SourceConfig::ordered(slot),
            other => {
                return Err(errors::input(
                    "backlog \"newest\" or \"ordered\"",
                    format!("{other:?}"),
                ))
            }
        };
        config.slot = slot;
        match deadline_ms {
            Some(ms) if ms > 0.0 && ms.is_finite() => {
                config = config.with_deadline(Duration::from_secs_f64(ms / 1e3))
            }
            Some(ms) => return Err(errors::input("deadline_ms > 0 or None", format!("{ms}"))),
            None => {}
        }
        self.stream.add_source(name, config).map_err(source_error)
    }

    /// The cameras' names, in the order they were added.
    #[getter]
    fn sources(&self) -> Vec<String> {
        self.stream.sources()
    }

    /// Submits camera `source`'s next frame (copied) and returns its index (`index` if
    /// given, else its number in that camera's stream). Never waits for the model (an
    /// ordered camera with a full slot waits for room, without the GIL).
    #[pyo3(signature = (source, frame, index = None, color = "rgb"))]
    fn submit(
        &self,
        py: Python<'_>,
        source: &str,
        frame: &Bound<'_, PyAny>,
        index: Option<u64>,
        color: &str,
    ) -> PyResult<u64> {
        let color = Color::parse(color)?;
        let arr = pixels::image_arg(frame)?;
        let rgb = pixels::to_rgb_image(arr.as_array(), color);
        let stream = &self.stream;
        let n = py
            .detach(|| stream.submit(source, rgb))
            .map_err(source_error)?;
        if let Some(i) = index {
            lock(&self.indices).insert((source.to_owned(), n), i);
        }
        Ok(index.unwrap_or(n))
    }

    /// The next known fate of any camera's frame (cameras taken in turn, each camera's
    /// frames in its own order), waiting up to `timeout` seconds (None: until one is
    /// known); None on timeout, or once `finish` was called and every frame is out.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<LiveResult>> {
        let until = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        loop {
            let step = until.map_or(SIGNAL_POLL, |u| {
                u.saturating_duration_since(Instant::now()).min(SIGNAL_POLL)
            });
            // Counts first: finished with nothing pending, and then no known frame,
            // is the end (an answer landing in between is found by `next_timeout`).
            let done =
                *lock(&self.finished) && self.stream.stats().iter().all(|s| s.counts.pending == 0);
            let stream = &self.stream;
            if let Some(f) = py.detach(|| stream.next_timeout(step)) {
                return self.result(py, f.source, f.frame).map(Some);
            }
            if done || until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
            py.check_signals()?;
        }
    }

    /// Camera `source`'s next frame's fate, waiting up to `timeout` seconds (None: until
    /// it is known); None on timeout, or once that camera is finished and every one of
    /// its frames is out.
    #[pyo3(signature = (source, timeout = None))]
    fn next_from(
        &self,
        py: Python<'_>,
        source: &str,
        timeout: Option<f64>,
    ) -> PyResult<Option<LiveResult>> {
        let until = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
        loop {
            // Counts first: a finished camera with nothing pending whose next frame is
            // not known now has nothing more to give.
            let done = self
                .stream
                .stats()
                .into_iter()
                .find(|s| s.name == source)
                .is_some_and(|s| s.finished && s.counts.pending == 0);
            if let Some(frame) = self.stream.try_next_from(source).map_err(source_error)? {
                return self.result(py, source.to_owned(), frame).map(Some);
            }
            if done || until.is_some_and(|u| Instant::now() >= u) {
                return Ok(None);
            }
            let wait = until.map_or(MULTI_POLL, |u| {
                u.saturating_duration_since(Instant::now()).min(MULTI_POLL)
            });
            py.detach(|| std::thread::sleep(wait));
            py.check_signals()?;
        }
    }

    /// Per camera (in the order they were added): submitted, answered, dropped, failed,
    /// replaced, expired, rejected, pending, p50_ms, p99_ms, latency_samples, finished.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for s in self.stream.stats() {
            let d = PyDict::new(py);
            let c = s.counts;
            d.set_item("submitted", c.submitted)?;
            d.set_item("answered", c.answered)?;
            d.set_item("dropped", c.dropped())?;
            d.set_item("failed", c.failed)?;
            d.set_item("replaced", c.replaced)?;
            d.set_item("expired", c.expired)?;
            d.set_item("rejected", c.rejected)?;
            d.set_item("pending", c.pending)?;
            d.set_item("p50_ms", s.latency.p50_ms)?;
            d.set_item("p99_ms", s.latency.p99_ms)?;
            d.set_item("latency_samples", s.latency.samples)?;
            d.set_item("finished", s.finished)?;
            out.set_item(s.name, d)?;
        }
        Ok(out)
    }

    /// Camera `source` sends no more frames (`submit` to it raises from now on); the
    /// others go on.
    fn finish_source(&self, source: &str) -> PyResult<()> {
        self.stream.finish_source(source).map_err(source_error)
    }

    /// No camera sends more frames: `submit` raises from now on; the frames already
    /// submitted still come out of `next` (which then returns None). Idempotent.
    fn finish(&self) {
        *lock(&self.finished) = true;
        self.stream.finish();
    }

    /// Finishes, drops the frames still waiting and stops the worker.
    fn shutdown(&self, py: Python<'_>) {
        self.finish();
        let server = &self.server;
        py.detach(|| server.shutdown());
    }
}

/// How often `next_from` looks again while it waits (a camera's own answers do not wake
/// it; the stream's `next` is woken at once).
const MULTI_POLL: Duration = Duration::from_millis(5);

impl MultiStream {
    fn result(
        &self,
        py: Python<'_>,
        source: String,
        frame: segtool_runtime::batching::LiveFrame,
    ) -> PyResult<LiveResult> {
        let index = lock(&self.indices)
            .remove(&(source.clone(), frame.frame))
            .unwrap_or(frame.frame);
        let mut r = live_result(py, frame, index, None)?;
        r.source = Some(source);
        Ok(r)
    }
}
