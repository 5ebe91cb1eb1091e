//! `LiveStream`: the newest-frame stream over one segmenter, and `LiveResult`, what
//! became of one frame (of a `LiveStream` or of a `MultiStream`'s camera).

use std::collections::HashMap;
use std::sync::Mutex;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use segtool_runtime::batching::{BatchConfig, LatestStream, LiveFrame, LiveOutcome};
use segtool_runtime::{OutputKind, TemporalSmoother};

use super::{counts_dict, deadline_arg, rgb_frame, server_over, wait_for, Look};
use crate::errors;
use crate::segmenter::{lock, segmentation, Segmentation, Segmenter};

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
        let smooth = smooth_arg(&segmenter, smooth)?;
        let config = BatchConfig::live(slot, 1).with_logits(smooth.is_some());
        let server = server_over(&[segmenter], config)?;
        let stream = server.latest_stream(slot);
        stream.set_deadline(deadline_arg(deadline_ms)?);
        let smoother = smooth.map(smoother).transpose()?;
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
        let n = self.stream.submit(rgb_frame(frame, color)?);
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
        let stream = &self.stream;
        wait_for(py, timeout, |step| {
            Ok(match py.detach(|| stream.next_timeout(step)) {
                Some(frame) => Look::Found(self.result(py, frame)?),
                None if stream.is_drained() => Look::Over,
                None => Look::NotYet,
            })
        })
    }

    /// Counters: submitted, answered, dropped, failed, replaced, expired, rejected, pending.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        counts_dict(py, &self.stream.stats())
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
    fn result(&self, py: Python<'_>, frame: LiveFrame) -> PyResult<LiveResult> {
        let index = lock(&self.indices)
            .remove(&frame.frame)
            .unwrap_or(frame.frame);
        live_result(py, frame, index, self.smoother.as_ref())
    }
}

/// One frame's fate as Python sees it, its mask smoothed when a smoother is given.
pub(super) fn live_result(
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
        LiveOutcome::Failed(e) => ("failed", Some(e.to_string()), None),
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

/// `smooth` checked against the model: None or 0 is off, else a weight in [0, 1) for a
/// model that outputs logits.
pub(super) fn smooth_arg(segmenter: &Segmenter, smooth: Option<f32>) -> PyResult<Option<f32>> {
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
    Ok(smooth)
}

/// A smoother of weight `w` (checked by [`smooth_arg`]).
pub(super) fn smoother(w: f32) -> PyResult<Mutex<TemporalSmoother>> {
    TemporalSmoother::new(w)
        .map(Mutex::new)
        .map_err(|e| errors::input("smooth in [0, 1)", e.to_string()))
}
