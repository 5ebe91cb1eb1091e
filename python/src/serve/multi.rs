//! `MultiStream`: many cameras, one model, over the runtime's `MultiStream`.

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use segtool_runtime::batching::{LiveFrame, SourceConfig, SourceError};
use segtool_runtime::TemporalSmoother;

use super::live::{live_result, smooth_arg, smoother, LiveResult};
use super::{batch_config, counts_dict, deadline_arg, rgb_frame, server_over, wait_for, Look};
use crate::errors;
use crate::segmenter::{lock, Segmenter};

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
    /// The history's weight of every camera's smoothing (None: off).
    smooth: Option<f32>,
    /// Each camera's smoother, when smoothing is on.
    smoothers: Mutex<HashMap<String, Mutex<TemporalSmoother>>>,
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
    #[pyo3(signature = (segmenter, max_batch = 4, max_delay_ms = 2.0, smooth = None))]
    fn new(
        segmenter: PyRef<'_, Segmenter>,
        max_batch: usize,
        max_delay_ms: f64,
        smooth: Option<f32>,
    ) -> PyResult<Self> {
        let smooth = smooth_arg(&segmenter, smooth)?;
        let config =
            batch_config(max_batch, max_delay_ms, MULTI_QUEUE)?.with_logits(smooth.is_some());
        let server = server_over(&[segmenter], config)?;
        Ok(Self {
            stream: server.multi_stream(),
            server,
            indices: Mutex::new(HashMap::new()),
            finished: Mutex::new(false),
            smooth,
            smoothers: Mutex::new(HashMap::new()),
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
        if let Some(deadline) = deadline_arg(deadline_ms)? {
            config = config.with_deadline(deadline);
        }
        self.stream.add_source(name, config).map_err(source_error)?;
        if let Some(w) = self.smooth {
            lock(&self.smoothers).insert(name.to_owned(), smoother(w)?);
        }
        Ok(())
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
        let rgb = rgb_frame(frame, color)?;
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
        let stream = &self.stream;
        wait_for(py, timeout, |step| {
            // Counts first: finished with nothing pending, and then no known frame,
            // is the end (an answer landing in between is found by `next_timeout`).
            let done =
                *lock(&self.finished) && stream.stats().iter().all(|s| s.counts.pending == 0);
            Ok(match py.detach(|| stream.next_timeout(step)) {
                Some(f) => Look::Found(self.result(py, f.source, f.frame)?),
                None if done => Look::Over,
                None => Look::NotYet,
            })
        })
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
        let stream = &self.stream;
        wait_for(py, timeout, |step| {
            // Counts first: a finished camera with nothing pending whose next frame is
            // not known now has nothing more to give.
            let done = stream
                .stats()
                .into_iter()
                .find(|s| s.name == source)
                .is_some_and(|s| s.finished && s.counts.pending == 0);
            let found = py
                .detach(|| stream.next_from_timeout(source, step))
                .map_err(source_error)?;
            Ok(match found {
                Some(frame) => Look::Found(self.result(py, source.to_owned(), frame)?),
                None if done => Look::Over,
                None => Look::NotYet,
            })
        })
    }

    /// Per camera (in the order they were added): submitted, answered, dropped, failed,
    /// replaced, expired, rejected, pending, p50_ms, p99_ms, latency_samples, finished.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        for s in self.stream.stats() {
            let d = counts_dict(py, &s.counts)?;
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

impl MultiStream {
    fn result(&self, py: Python<'_>, source: String, frame: LiveFrame) -> PyResult<LiveResult> {
        let index = lock(&self.indices)
            .remove(&(source.clone(), frame.frame))
            .unwrap_or(frame.frame);
        let smoothers = lock(&self.smoothers);
        let mut r = live_result(py, frame, index, smoothers.get(&source))?;
        r.source = Some(source);
        Ok(r)
    }
}
