//! The model behind the element: opened from the properties, run in the streaming
//! thread (`live=false`: every frame, in order) or through the runtime's newest-frame
//! [`LatestStream`] (`live=true`), with optional temporal smoothing and accuracy mode.
//! With `model-instance-id` the model is shared ([`super::shared`]): the element is one
//! source of the shared model's [`MultiStream`](segtool_runtime::batching::MultiStream).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchServer};
use segtool_runtime::batching::{LatestStream, LiveFrame};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{ClassMap, Segmentation};
use segtool_runtime::{Segmenter, TemporalSmoother};

use super::props::Settings;
use super::shared::{self, JoinError, ModelInfo, SharedModel};

/// An open model and what opening it found.
pub struct Opened {
    pub runner: Runner,
    pub spec: ModelSpec,
    /// The shared model's id and the element that opened it (None: the element's own).
    pub shared: Option<(String, String)>,
    /// `engine/provider`, e.g. `ort/cpu`.
    pub provider: String,
    /// Each fallback taken while opening, as a sentence.
    pub fallbacks: Vec<String>,
    /// Which engine `engine=auto` chose and why (None: the engine was named).
    pub engine_choice: Option<String>,
    /// What it was opened with: the runtime's options as JSON.
    pub options: String,
    /// The model's fixed input size `(width, height)`, when its graph has one (the
    /// runtime resizes frames to it and brings masks back to the frame's size).
    pub fixed: Option<(u32, u32)>,
}

/// How frames reach the engine.
pub enum Runner {
    /// Every frame, in order, in the streaming thread.
    Sync(Box<SyncRunner>),
    /// Newest frame wins: a worker thread runs the model.
    Live(LiveRunner),
    /// A model shared with other elements (`model-instance-id`): this element is one
    /// source of its multi-camera stream, newest frame (`live`) or ordered.
    Shared(SharedRunner),
}

impl Runner {
    /// Frames may be dropped and wait for a busy engine (the latency reported is p99).
    pub fn is_live(&self) -> bool {
        match self {
            Runner::Sync(_) => false,
            Runner::Live(_) => true,
            Runner::Shared(s) => !s.ordered,
        }
    }
}

pub struct SyncRunner {
    seg: Segmenter,
    smoother: Option<TemporalSmoother>,
    /// The `logits` option: answers carry them.
    logits: bool,
}

pub struct LiveRunner {
    server: BatchServer,
    pub stream: LatestStream,
    smoother: Option<TemporalSmoother>,
    deadline: Option<Duration>,
    logits: bool,
}

/// One frame's answer: its class map at the frame's size (smoothed when asked), and its
/// logits when the `logits` option asks for them.
pub type Answer = Segmentation;

/// Why the model could not be opened.
pub struct OpenError {
    /// The model file (or folder) is not there.
    pub missing: bool,
    /// The element's properties disagree with the shared model's.
    pub conflict: bool,
    pub message: String,
}

fn err(missing: bool, message: String) -> OpenError {
    OpenError {
        missing,
        conflict: false,
        message,
    }
}

/// Opens the model the settings name; `element` (the element's name) names its source
/// of a shared model.
pub fn open(settings: &Settings, element: &str) -> Result<Opened, OpenError> {
    let path = match settings.model.as_deref() {
        Some(p) if !p.is_empty() => p.to_string(),
        _ => {
            return Err(err(
                true,
                "no model: set the model property to a file written by `segtool export`, or a \
                 model from elsewhere with its card"
                    .into(),
            ))
        }
    };
    // A file, or a folder (mmdeploy SDK, Hugging Face) that names one: the runtime reads it.
    if !Path::new(&path).exists() {
        return Err(err(true, format!("model {path}: no such file or folder")));
    }
    // The runtime's errors name the file already; others get it in front.
    let bad = |what: String| match what.contains(&path) {
        true => err(false, what),
        false => err(false, format!("model {path}: {what}")),
    };
    let options = settings.options().map_err(|e| bad(e.to_string()))?;
    let accuracy = settings.accuracy().map_err(bad)?;
    let smooth = settings.smooth as f32;
    let smoother = if smooth > 0.0 {
        Some(TemporalSmoother::new(smooth).map_err(|w| bad(format!("smooth {}: {w:?}", w.0)))?)
    } else {
        None
    };
    if settings.live && accuracy.is_some() {
        return Err(bad(
            "accuracy mode (protocol) runs frame by frame: set live=false".into(),
        ));
    }
    let keep_logits = smoother.is_some() || options.logits;
    if let Some(id) = settings.shared_id() {
        if accuracy.is_some() {
            return Err(bad(format!(
                "accuracy mode (protocol) runs frame by frame on a model of its own: \
                 unset model-instance-id ({id})"
            )));
        }
        let model = shared::join(id, element, settings, keep_logits, || {
            let seg = Segmenter::builder(&path)
                .options(&options)
                .and_then(|b| b.open())
                .map_err(|e| bad(e.to_string()))?;
            check_smoothing(&seg, smoother.is_some(), false).map_err(bad)?;
            let info = ModelInfo::of(&seg).map_err(bad)?;
            Ok((seg, info))
        })
        .map_err(|e| match e {
            JoinError::Open(e) => e,
            JoinError::Conflict(message) => OpenError {
                missing: false,
                conflict: true,
                message,
            },
            JoinError::Server(message) => err(false, message),
        })?;
        let info = model.info.clone();
        let runner =
            SharedRunner::new(model, element, settings, smoother, options.logits).map_err(bad)?;
        return Ok(Opened {
            shared: Some((runner.model.id.clone(), runner.model.opened_by.clone())),
            runner: Runner::Shared(runner),
            spec: info.spec,
            provider: info.provider,
            fallbacks: info.fallbacks,
            engine_choice: info.engine_choice,
            options: info.options,
            fixed: info.fixed,
        });
    }
    let mut seg = Segmenter::builder(&path)
        .options(&options)
        .and_then(|b| b.open())
        .map_err(|e| bad(e.to_string()))?;
    let accuracy_mode = accuracy.is_some();
    if let Some(opts) = accuracy {
        seg = seg.with_accuracy(opts).map_err(|e| bad(e.to_string()))?;
    }
    let info = ModelInfo::of(&seg).map_err(bad)?;
    check_smoothing(&seg, smoother.is_some(), accuracy_mode).map_err(bad)?;
    let runner = if settings.live {
        let config = BatchConfig::live(1, 1).with_logits(keep_logits);
        let server =
            BatchServer::from_segmenters(config, vec![seg]).map_err(|e| bad(e.to_string()))?;
        let deadline =
            (settings.deadline_ms > 0).then(|| Duration::from_millis(settings.deadline_ms as u64));
        let stream = new_stream(&server, deadline);
        Runner::Live(LiveRunner {
            server,
            stream,
            smoother,
            deadline,
            logits: options.logits,
        })
    } else {
        Runner::Sync(Box::new(SyncRunner {
            seg: seg.with_logits(keep_logits),
            smoother,
            logits: options.logits,
        }))
    };
    Ok(Opened {
        runner,
        shared: None,
        spec: info.spec,
        provider: info.provider,
        fallbacks: info.fallbacks,
        engine_choice: info.engine_choice,
        options: info.options,
        fixed: info.fixed,
    })
}

/// Smoothing averages logits: an export that answers class maps cannot be smoothed.
fn check_smoothing(seg: &Segmenter, smoothing: bool, accuracy: bool) -> Result<(), String> {
    if smoothing && !seg.contract().is_plain() && !accuracy {
        let c = seg.contract();
        if c.output != segtool_runtime::OutputKind::Logits {
            return Err("smoothing needs logits: export without --argmax".into());
        }
    }
    Ok(())
}

fn new_stream(server: &BatchServer, deadline: Option<Duration>) -> LatestStream {
    let stream = server.latest_stream(1);
    stream.set_deadline(deadline);
    stream
}

impl SyncRunner {
    /// One frame's answer, its class map at the input's size.
    pub fn run(&mut self, img: &RgbImage) -> Result<Answer, String> {
        let (w, h) = (img.width() as usize, img.height() as usize);
        let out = self.seg.segment(img).map_err(|e| e.to_string())?;
        let mask = match (&mut self.smoother, &out.logits) {
            (Some(sm), Some(logits)) => sm.mask(logits.view(), h, w),
            _ => out.mask,
        };
        let logits = out.logits.filter(|_| self.logits);
        Ok(Segmentation::new(mask, logits))
    }

    /// Forgets the smoothing history.
    pub fn reset(&mut self) {
        if let Some(sm) = &mut self.smoother {
            sm.reset();
        }
    }
}

/// An answered frame's class map, smoothed when `smoother` is set, and its logits when
/// `logits`.
fn answer(smoother: &mut Option<TemporalSmoother>, logits: bool, out: &mut Segmentation) -> Answer {
    let (h, w) = out.mask.dim();
    let raw = out.logits.take();
    let mask = match (smoother, &raw) {
        (Some(sm), Some(l)) => sm.mask(l.view(), h, w),
        _ => std::mem::replace(&mut out.mask, ClassMap::U8(Default::default())),
    };
    Segmentation::new(mask, raw.filter(|_| logits))
}

impl LiveRunner {
    /// Submits a frame (never waits for the model); returns its index.
    pub fn submit(&self, img: RgbImage) -> u64 {
        self.stream.submit(img)
    }

    /// Sets the deadline of later frames.
    pub fn set_deadline(&mut self, deadline: Option<Duration>) {
        self.deadline = deadline;
        self.stream.set_deadline(deadline);
    }

    /// The answer of an answered frame (its class map smoothed when asked, at the
    /// frame's size).
    pub fn answer_of(&mut self, frame: &mut LiveFrame) -> Option<Answer> {
        match &mut frame.outcome {
            segtool_runtime::batching::LiveOutcome::Answered(out) => {
                Some(answer(&mut self.smoother, self.logits, out))
            }
            _ => None,
        }
    }

    /// Drops every frame not answered yet (a flush) and starts a fresh stream.
    pub fn reset(&mut self) {
        self.stream = new_stream(&self.server, self.deadline);
        if let Some(sm) = &mut self.smoother {
            sm.reset();
        }
    }

    /// Runs one frame outside the stream, waiting for it (the warm-up).
    pub fn run_once(&self, img: RgbImage) -> Result<Duration, String> {
        let t0 = Instant::now();
        self.server.submit(img).wait().map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    }
}

/// One element's side of a shared model: its source of the model's multi-camera stream.
pub struct SharedRunner {
    pub model: Arc<SharedModel>,
    /// The element's name: its sources are named after it.
    element: String,
    /// Its source now (a flush or an EOS finishes one and a later frame opens the next).
    pub source: String,
    /// Its source was finished (EOS): the next frame opens a fresh one.
    finished: bool,
    /// `live=false`: every frame, in order, answered before the next is taken.
    pub ordered: bool,
    deadline: Option<Duration>,
    smoother: Option<TemporalSmoother>,
    logits: bool,
}

impl SharedRunner {
    fn new(
        model: Arc<SharedModel>,
        element: &str,
        settings: &Settings,
        smoother: Option<TemporalSmoother>,
        logits: bool,
    ) -> Result<Self, String> {
        let ordered = !settings.live;
        let source = model.add_source(element, ordered)?;
        model.enter();
        Ok(Self {
            model,
            element: element.to_string(),
            source,
            finished: false,
            ordered,
            deadline: (settings.live && settings.deadline_ms > 0)
                .then(|| Duration::from_millis(settings.deadline_ms as u64)),
            smoother,
            logits,
        })
    }

    /// Submits a frame to the element's source (never waits for the model, but an
    /// ordered source waits for room); returns its index in the source.
    pub fn submit(&mut self, img: RgbImage) -> Result<u64, String> {
        if self.finished {
            self.reopen()?;
        }
        let deadline = self.deadline.map(|d| Instant::now() + d);
        self.model
            .cameras
            .submit_by(&self.source, img, deadline)
            .map_err(|e| e.to_string())
    }

    /// Sets the deadline of later frames (live mode).
    pub fn set_deadline(&mut self, deadline: Option<Duration>) {
        if !self.ordered {
            self.deadline = deadline;
        }
    }

    /// The source's next outcome if it is known now.
    pub fn try_next(&self) -> Option<LiveFrame> {
        self.model
            .cameras
            .try_next_from(&self.source)
            .ok()
            .flatten()
    }

    /// The source's next outcome, waiting for it: call only with a frame in flight
    /// (every submitted frame has one outcome).
    pub fn next(&self) -> Option<LiveFrame> {
        loop {
            match self
                .model
                .cameras
                .next_from_timeout(&self.source, Duration::from_secs(1))
            {
                Ok(Some(frame)) => return Some(frame),
                // Not answered within the second: still in flight, wait on.
                Ok(None) if !self.finished => continue,
                _ => return None,
            }
        }
    }

    /// The element's stream ended: its source takes no more frames.
    pub fn finish(&mut self) {
        let _ = self.model.cameras.finish_source(&self.source);
        self.finished = true;
    }

    /// The answer of an answered frame (smoothed when asked, at the frame's size).
    pub fn answer_of(&mut self, frame: &mut LiveFrame) -> Option<Answer> {
        match &mut frame.outcome {
            segtool_runtime::batching::LiveOutcome::Answered(out) => {
                Some(answer(&mut self.smoother, self.logits, out))
            }
            _ => None,
        }
    }

    /// Drops every frame not answered yet (a flush): the source is finished and a fresh
    /// one opened.
    pub fn reset(&mut self) -> Result<(), String> {
        if let Some(sm) = &mut self.smoother {
            sm.reset();
        }
        self.reopen()
    }

    fn reopen(&mut self) -> Result<(), String> {
        // Its waiting frames leave the queue and its name is free again.
        let _ = self.model.cameras.remove_source(&self.source);
        self.source = self.model.add_source(&self.element, self.ordered)?;
        self.finished = false;
        Ok(())
    }

    /// Runs one frame outside the element's source, waiting for it (the warm-up).
    pub fn run_once(&self, img: RgbImage) -> Result<Duration, String> {
        let t0 = Instant::now();
        self.model
            .server
            .submit(img)
            .wait()
            .map_err(|e| e.to_string())?;
        Ok(t0.elapsed())
    }
}

impl Drop for SharedRunner {
    /// A stopped element's source ends; the others go on.
    fn drop(&mut self) {
        let _ = self.model.cameras.remove_source(&self.source);
        self.model.leave();
    }
}
