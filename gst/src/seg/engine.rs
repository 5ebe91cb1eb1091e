//! The model behind the element: opened from the properties, run in the streaming
//! thread (`live=false`: every frame, in order) or through the runtime's newest-frame
//! [`LatestStream`] (`live=true`), with optional temporal smoothing and accuracy mode.

use std::path::Path;
use std::time::{Duration, Instant};

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_runtime::batching::{BatchConfig, BatchServer};
use segtool_runtime::batching::{LatestStream, LiveFrame};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{ClassMap, Segmentation};
use segtool_runtime::{Segmenter, TemporalSmoother};

use super::props::Settings;

/// An open model and what opening it found.
pub struct Opened {
    pub runner: Runner,
    pub spec: ModelSpec,
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
    Sync(SyncRunner),
    /// Newest frame wins: a worker thread runs the model.
    Live(LiveRunner),
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

/// Why the model could not be opened: (is it a missing file, message).
pub struct OpenError {
    pub missing: bool,
    pub message: String,
}

fn err(missing: bool, message: String) -> OpenError {
    OpenError { missing, message }
}

/// Opens the model the settings name.
pub fn open(settings: &Settings) -> Result<Opened, OpenError> {
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
    let mut seg = Segmenter::builder(&path)
        .options(&options)
        .and_then(|b| b.open())
        .map_err(|e| bad(e.to_string()))?;
    let accuracy_mode = accuracy.is_some();
    if let Some(opts) = accuracy {
        seg = seg.with_accuracy(opts).map_err(|e| bad(e.to_string()))?;
    }
    let spec = seg.spec().clone();
    let provider = format!("{}/{}", seg.engine().name(), seg.engine().provider());
    let fallbacks = seg.fallbacks().iter().map(ToString::to_string).collect();
    let engine_choice = seg.engine_choice().map(str::to_string);
    let json = serde_json::to_string(seg.options())
        .map_err(|e| bad(format!("the options as JSON: {e}")))?;
    let fixed = seg.graph_size().map(|(h, w)| (w as u32, h as u32));
    if smoother.is_some() && !seg.contract().is_plain() && !accuracy_mode {
        let c = seg.contract();
        if c.output != segtool_runtime::OutputKind::Logits {
            return Err(bad("smoothing needs logits: export without --argmax".into()));
        }
    }
    let runner = if settings.live {
        let config = BatchConfig::live(1, 1).with_logits(smoother.is_some() || options.logits);
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
        Runner::Sync(SyncRunner {
            seg: seg.with_logits(smoother.is_some() || options.logits),
            smoother,
            logits: options.logits,
        })
    };
    Ok(Opened {
        runner,
        spec,
        provider,
        fallbacks,
        engine_choice,
        options: json,
        fixed,
    })
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
