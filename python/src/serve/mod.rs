//! `BatchServer` (many callers, one or more segmenters, future-like `Pending` handles),
//! `LiveStream` (the newest-frame stream with deadlines: `live`) and `MultiStream` (many
//! cameras, one model: `multi`), over the runtime's `BatchServer`, `LatestStream` and
//! `MultiStream`. The Python segmenters stay usable: each worker runs its segmenter's
//! engine under the same lock as `Segmenter.segment`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use image::RgbImage;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use segtool_runtime::batching::{BatchConfig, Handle, LatestStats};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{
    expert::{Engine, EngineInput, EngineOutput},
    IoContract, OutputKind,
};

use crate::errors;
use crate::pixels::{self, Color};
use crate::segmenter::{lock, segmentation, Model, Segmentation, Segmenter, SIGNAL_POLL};

mod live;
mod multi;

pub use live::{LiveResult, LiveStream};
pub use multi::MultiStream;

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
        if self.outcome.is_none() {
            let answer = wait_for(py, timeout, |step| {
                let handle = self.handle.take().expect("a handle until answered");
                Ok(match py.detach(|| handle.wait_timeout(step)) {
                    Ok(answer) => Look::Found(answer),
                    Err(handle) => {
                        self.handle = Some(handle);
                        Look::NotYet
                    }
                })
            })?
            .ok_or_else(|| {
                pyo3::exceptions::PyTimeoutError::new_err("the request is not answered yet")
            })?;
            self.outcome = Some(
                answer
                    .map_err(errors::batch)
                    .and_then(|o| output_segmentation(py, o, self.scores)),
            );
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
        let config = batch_config(max_batch, max_delay_ms, queue_capacity)?.with_logits(scores);
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
        let rgb = rgb_frame(img, color)?;
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

/// A frame argument as the model's RGB image: `color` names its channel order.
fn rgb_frame(frame: &Bound<'_, PyAny>, color: &str) -> PyResult<RgbImage> {
    let color = Color::parse(color)?;
    let arr = pixels::image_arg(frame)?;
    Ok(pixels::to_rgb_image(arr.as_array(), color))
}

/// A stream's or a camera's counters as a dict: submitted, answered, dropped, failed,
/// replaced, expired, rejected, pending.
fn counts_dict<'py>(py: Python<'py>, c: &LatestStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("submitted", c.submitted)?;
    d.set_item("answered", c.answered)?;
    d.set_item("dropped", c.dropped())?;
    d.set_item("failed", c.failed)?;
    d.set_item("replaced", c.replaced)?;
    d.set_item("expired", c.expired)?;
    d.set_item("rejected", c.rejected)?;
    d.set_item("pending", c.pending)?;
    Ok(d)
}

/// A batching server's configuration: at most `max_batch` images a run (at least 1), a
/// batch waits at most `max_delay_ms` for more (finite, not negative), `queue` wait.
fn batch_config(max_batch: usize, max_delay_ms: f64, queue: usize) -> PyResult<BatchConfig> {
    if max_batch == 0 {
        return Err(errors::input("max_batch >= 1", "0"));
    }
    if !(max_delay_ms >= 0.0 && max_delay_ms.is_finite()) {
        return Err(errors::input(
            "max_delay_ms >= 0",
            format!("{max_delay_ms}"),
        ));
    }
    Ok(BatchConfig::new()
        .with_max_batch(max_batch)
        .with_max_wait(Duration::from_secs_f64(max_delay_ms / 1e3))
        .with_queue_capacity(queue))
}

/// `deadline_ms` as a duration: None is none; a positive finite number of milliseconds.
fn deadline_arg(deadline_ms: Option<f64>) -> PyResult<Option<Duration>> {
    match deadline_ms {
        Some(ms) if ms > 0.0 && ms.is_finite() => Ok(Some(Duration::from_secs_f64(ms / 1e3))),
        Some(ms) => Err(errors::input("deadline_ms > 0 or None", format!("{ms}"))),
        None => Ok(None),
    }
}

/// What one look at a stream found.
enum Look<T> {
    Found(T),
    /// Nothing more can come.
    Over,
    NotYet,
}

/// Looks until something is found, nothing more can come, or `timeout` seconds pass
/// (None: no limit). `look` is given how long it may wait, at most [`SIGNAL_POLL`], so
/// a Ctrl-C is seen between looks.
fn wait_for<T>(
    py: Python<'_>,
    timeout: Option<f64>,
    mut look: impl FnMut(Duration) -> PyResult<Look<T>>,
) -> PyResult<Option<T>> {
    let until = timeout.map(|t| Instant::now() + Duration::from_secs_f64(t.max(0.0)));
    loop {
        let step = until.map_or(SIGNAL_POLL, |u| {
            u.saturating_duration_since(Instant::now()).min(SIGNAL_POLL)
        });
        match look(step)? {
            Look::Found(found) => return Ok(Some(found)),
            Look::Over => return Ok(None),
            Look::NotYet if until.is_some_and(|u| Instant::now() >= u) => return Ok(None),
            Look::NotYet => py.check_signals()?,
        }
    }
}
