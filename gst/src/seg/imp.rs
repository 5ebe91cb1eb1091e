//! The element's GStreamer side: properties, caps, the frames' way through
//! `submit_input_buffer`/`generate_output`, events, queries and bus messages.
//!
//! Frames are taken in `submit_input_buffer` and their results queued; `generate_output`
//! hands the queued results to the base class, which pushes them. Without `live` each
//! frame runs at once in the streaming thread (one result per frame, in order). With
//! `live` frames go to the runtime's newest-frame stream: a frame arriving while the
//! engine is busy replaces the waiting one, which is dropped and counted, so the element
//! keeps up with a live source at the engine's rate. With `model-instance-id` frames go
//! to the element's source of a model shared with other elements (newest frame with
//! `live`, else ordered: each frame answered before the next is taken), batched with
//! theirs. EOS waits for the frames in flight and pushes their results; a flush
//! discards them; new caps push the frames in flight before the size changes.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gst::glib;
use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_base::subclass::base_transform::GenerateOutputSuccess;
use gst_base::subclass::prelude::*;
use gst_video::{VideoFrameRef, VideoInfo};
use image::RgbImage;

use super::caps;
use super::engine::{self, Opened, Runner};
use super::props::{self, OutputMode, Settings};
use super::stats::Stats;

pub(super) static CAT: LazyLock<gst::DebugCategory> = LazyLock::new(|| {
    gst::DebugCategory::new(
        "segtoolseg",
        gst::DebugColorFlags::empty(),
        Some("segtool segmentation"),
    )
});

/// Drops are reported on the bus at most this often (and at EOS).
pub(super) const DROP_REPORT_EVERY: Duration = Duration::from_secs(1);

/// Freed memory goes back to the system at most this often, process-wide.
const TRIM_EVERY: Duration = Duration::from_secs(30);

pub(super) struct State {
    pub(super) opened: Opened,
    pub(super) model: String,
    pub(super) in_info: Option<VideoInfo>,
    pub(super) out_info: Option<VideoInfo>,
    /// Results ready to push, oldest first.
    pub(super) ready: VecDeque<gst::Buffer>,
    /// Live mode: each frame in flight, by its stream index: its frame index, the input
    /// buffer and its RGB.
    pub(super) in_flight: HashMap<u64, (u64, gst::Buffer, RgbImage, Instant)>,
    /// Index of the next input frame (the meta's `frame`).
    pub(super) next_frame: u64,
    /// The engine's latency measured on a warm-up frame at the negotiated size.
    pub(super) warmup: Option<Duration>,
    pub(super) last_drop_report: Option<Instant>,
}

#[derive(Default)]
pub struct SegtoolSeg {
    pub(super) settings: Mutex<Settings>,
    pub(super) state: Mutex<Option<State>>,
    pub(super) stats: Mutex<Stats>,
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[glib::object_subclass]
impl ObjectSubclass for SegtoolSeg {
    const NAME: &'static str = "GstSegtoolSeg";
    type Type = super::SegtoolSeg;
    type ParentType = gst_base::BaseTransform;
}

impl ObjectImpl for SegtoolSeg {
    fn properties() -> &'static [glib::ParamSpec] {
        static PROPS: LazyLock<Vec<glib::ParamSpec>> = LazyLock::new(props::specs);
        PROPS.as_ref()
    }

    fn set_property(&self, _id: usize, value: &glib::Value, pspec: &glib::ParamSpec) {
        let deadline_ms = {
            let mut settings = lock(&self.settings);
            props::set(&mut settings, pspec.name(), value);
            settings.deadline_ms
        };
        // The settings' lock is released first: the streaming thread takes the state's
        // lock, then the settings'.
        if pspec.name() == "deadline-ms" {
            let deadline = (deadline_ms > 0).then(|| Duration::from_millis(deadline_ms as u64));
            if let Some(state) = &mut *lock(&self.state) {
                match &mut state.opened.runner {
                    Runner::Live(live) => live.set_deadline(deadline),
                    Runner::Shared(shared) => shared.set_deadline(deadline),
                    Runner::Sync(_) => {}
                }
            }
        }
    }

    fn property(&self, _id: usize, pspec: &glib::ParamSpec) -> glib::Value {
        if pspec.name() == "stats" {
            return lock(&self.stats).to_structure().to_value();
        }
        props::get(&lock(&self.settings), pspec.name()).expect("every property but stats")
    }
}

impl GstObjectImpl for SegtoolSeg {}

impl ElementImpl for SegtoolSeg {
    fn metadata() -> Option<&'static gst::subclass::ElementMetadata> {
        static META: LazyLock<gst::subclass::ElementMetadata> = LazyLock::new(|| {
            gst::subclass::ElementMetadata::new(
                "segtool semantic segmentation",
                "Filter/Analyzer/Video",
                "Segments each frame with an exported segtool DANet model (ONNX Runtime or \
                 tract): the frame with the mask blended, the colour mask, or the class ids; \
                 every buffer carries the class map and per-class pixel counts as a meta",
                "segtool developers",
            )
        });
        Some(&*META)
    }

    fn pad_templates() -> &'static [gst::PadTemplate] {
        static TEMPLATES: LazyLock<Vec<gst::PadTemplate>> =
            LazyLock::new(|| vec![caps::src_template(), caps::sink_template()]);
        TEMPLATES.as_ref()
    }
}

impl BaseTransformImpl for SegtoolSeg {
    const MODE: gst_base::subclass::BaseTransformMode =
        gst_base::subclass::BaseTransformMode::NeverInPlace;
    const PASSTHROUGH_ON_SAME_CAPS: bool = false;
    const TRANSFORM_IP_ON_PASSTHROUGH: bool = false;

    fn start(&self) -> Result<(), gst::ErrorMessage> {
        let settings = lock(&self.settings).clone();
        let model = settings.model.clone().unwrap_or_default();
        let name = self.obj().name();
        let opened = engine::open(&settings, &name).map_err(|e| {
            if e.missing {
                gst::error_msg!(gst::ResourceError::NotFound, ("{}", e.message))
            } else if e.conflict {
                gst::error_msg!(gst::ResourceError::Settings, ("{}", e.message))
            } else {
                gst::error_msg!(gst::ResourceError::OpenRead, ("{}", e.message))
            }
        })?;
        gst::info!(CAT, imp = self, "model {model} on {}", opened.provider);
        let fixed = opened
            .fixed
            .map_or_else(String::new, |(w, h)| format!("{w}x{h}"));
        let (shared_id, opened_by) = opened.shared.clone().unwrap_or_default();
        self.post(
            gst::Structure::builder("segtool-engine")
                .field("model", &model)
                .field("model-instance-id", shared_id)
                .field("model-opened-by", opened_by)
                .field("provider", &opened.provider)
                .field("classes", opened.spec.num_classes() as u32)
                .field("fixed-size", fixed)
                .field("live", settings.live)
                .field(
                    "engine-choice",
                    opened.engine_choice.as_deref().unwrap_or("named"),
                )
                .field("options", &opened.options)
                .build(),
        );
        for reason in &opened.fallbacks {
            gst::warning!(CAT, imp = self, "fallback: {reason}");
            self.post(
                gst::Structure::builder("segtool-fallback")
                    .field("reason", reason)
                    .build(),
            );
        }
        let mut stats = Stats::new(opened.provider.clone());
        if let Runner::Shared(shared) = &opened.runner {
            stats.shared = Some((Arc::downgrade(&shared.model), shared.source.clone()));
        }
        *lock(&self.stats) = stats;
        *lock(&self.state) = Some(State {
            opened,
            model,
            in_info: None,
            out_info: None,
            ready: VecDeque::new(),
            in_flight: HashMap::new(),
            next_frame: 0,
            warmup: None,
            last_drop_report: None,
        });
        Ok(())
    }

    fn stop(&self) -> Result<(), gst::ErrorMessage> {
        *lock(&self.state) = None;
        Ok(())
    }

    fn transform_caps(
        &self,
        direction: gst::PadDirection,
        caps: &gst::Caps,
        filter: Option<&gst::Caps>,
    ) -> Option<gst::Caps> {
        let output = lock(&self.settings).output;
        let classes = lock(&self.state)
            .as_ref()
            .map(|s| s.opened.spec.num_classes());
        Some(caps::transform(direction, caps, output, classes, filter))
    }

    fn set_caps(&self, incaps: &gst::Caps, outcaps: &gst::Caps) -> Result<(), gst::LoggableError> {
        let in_info = VideoInfo::from_caps(incaps)
            .map_err(|_| gst::loggable_error!(CAT, "bad input caps {incaps}"))?;
        let out_info = VideoInfo::from_caps(outcaps)
            .map_err(|_| gst::loggable_error!(CAT, "bad output caps {outcaps}"))?;
        // New caps mid-stream (a camera changing its size): the frames in flight are
        // answered and pushed first, under the caps they came with.
        self.settle()
            .map_err(|flow| gst::loggable_error!(CAT, "pushing the frames in flight: {flow:?}"))?;
        let mut guard = lock(&self.state);
        let state = guard
            .as_mut()
            .ok_or_else(|| gst::loggable_error!(CAT, "caps before start"))?;
        let output = lock(&self.settings).output;
        let expected = match output {
            OutputMode::Mask => caps::mask_formats(Some(state.opened.spec.num_classes())),
            _ => vec![in_info.format()],
        };
        if !expected.contains(&out_info.format())
            || (in_info.width(), in_info.height()) != (out_info.width(), out_info.height())
        {
            gst::element_imp_error!(
                self,
                gst::CoreError::Negotiation,
                (
                    "model {}: output={output:?} of {} cannot be {}",
                    state.model,
                    caps::describe(&in_info),
                    caps::describe(&out_info)
                )
            );
            return Err(gst::loggable_error!(
                CAT,
                "output caps {outcaps} do not fit"
            ));
        }
        // The engine's latency at this size, for the latency query.
        let probe = RgbImage::new(in_info.width(), in_info.height());
        let t0 = Instant::now();
        let warm = match &mut state.opened.runner {
            Runner::Sync(sync) => {
                let r = sync.run(&probe).map(|_| t0.elapsed());
                sync.reset();
                r
            }
            Runner::Live(live) => live.run_once(probe),
            Runner::Shared(shared) => shared.run_once(probe),
        };
        match warm {
            Ok(latency) => state.warmup = Some(latency),
            Err(e) => {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Failed,
                    (
                        "model {}: cannot run on {} frames: {e}",
                        state.model,
                        caps::describe(&in_info)
                    )
                );
                return Err(gst::loggable_error!(CAT, "model cannot take {incaps}"));
            }
        }
        gst::info!(
            CAT,
            imp = self,
            "{} -> {}, engine latency {:?}",
            caps::describe(&in_info),
            caps::describe(&out_info),
            state.warmup
        );
        state.in_info = Some(in_info);
        state.out_info = Some(out_info);
        drop(guard);
        let _ = self
            .obj()
            .post_message(gst::message::Latency::builder().src(&*self.obj()).build());
        Ok(())
    }

    fn query(&self, direction: gst::PadDirection, query: &mut gst::QueryRef) -> bool {
        if direction == gst::PadDirection::Src {
            if let gst::QueryViewMut::Latency(q) = query.view_mut() {
                let mut upstream = gst::query::Latency::new();
                if !self.obj().sink_pad().peer_query(&mut upstream) {
                    return false;
                }
                let (live, min, max) = upstream.result();
                let ours = gst::ClockTime::from_nseconds(self.latency().as_nanos() as u64);
                q.set(live, min + ours, max.map(|m| m + ours));
                return true;
            }
        }
        BaseTransformImplExt::parent_query(self, direction, query)
    }

    fn sink_event(&self, event: gst::Event) -> bool {
        match event.view() {
            gst::EventView::Eos(_) => {
                if let Err(flow) = self.drain() {
                    gst::warning!(CAT, imp = self, "draining at EOS: {flow:?}");
                }
                self.report_drops(true);
                // The final counts and latencies (`gst-launch-1.0 -m` prints them).
                let stats = lock(&self.stats).to_structure();
                self.post(stats);
            }
            gst::EventView::FlushStop(_) => self.discard(),
            _ => {}
        }
        self.parent_sink_event(event)
    }

    fn submit_input_buffer(
        &self,
        _is_discont: bool,
        inbuf: gst::Buffer,
    ) -> Result<gst::FlowSuccess, gst::FlowError> {
        lock(&self.stats).frames_in += 1;
        let mut guard = lock(&self.state);
        let state = guard.as_mut().ok_or(gst::FlowError::Flushing)?;
        let in_info = state.in_info.clone().ok_or(gst::FlowError::NotNegotiated)?;
        let rgb = {
            let frame = VideoFrameRef::from_buffer_ref_readable(inbuf.as_ref(), &in_info).map_err(
                |_| {
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Format,
                        ("cannot map a {} frame", caps::describe(&in_info))
                    );
                    gst::FlowError::Error
                },
            )?;
            caps::to_rgb(&frame).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Format, ("{e}"));
                gst::FlowError::Error
            })?
        };
        let input = rgb.clone();
        let index = state.next_frame;
        state.next_frame += 1;
        let t0 = Instant::now();
        match &mut state.opened.runner {
            Runner::Sync(sync) => {
                let answer = sync.run(&input).map_err(|e| {
                    lock(&self.stats).failed += 1;
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Failed,
                        ("model {}: frame {index}: {e}", state.model)
                    );
                    gst::FlowError::Error
                })?;
                let out = self.render(state, index, &inbuf, &rgb, answer)?;
                state.ready.push_back(out);
                lock(&self.stats).answered(t0.elapsed());
            }
            Runner::Live(live) => {
                let id = live.submit(input);
                state.in_flight.insert(id, (index, inbuf, rgb, t0));
                self.collect(state, false)?;
            }
            Runner::Shared(shared) => {
                let id = shared.submit(input).map_err(|e| {
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Failed,
                        ("model {}: frame {index}: {e}", state.model)
                    );
                    gst::FlowError::Error
                })?;
                let (source, ordered) = (shared.source.clone(), shared.ordered);
                if let Some((_, name)) = &mut lock(&self.stats).shared {
                    if *name != source {
                        *name = source;
                    }
                }
                state.in_flight.insert(id, (index, inbuf, rgb, t0));
                // Ordered: this frame is answered (batched with the other elements'
                // frames) before the next is taken, as without a shared model.
                self.collect(state, ordered)?;
            }
        }
        drop(guard);
        self.report_drops(false);
        // A pipeline runs for days: freed frame buffers go back to the system every
        // TRIM_EVERY, not kept at the worst burst's level (segtool_runtime::expert::memory).
        segtool_runtime::expert::memory::release_freed_heap_every(TRIM_EVERY);
        Ok(gst::FlowSuccess::Ok)
    }

    fn generate_output(&self) -> Result<GenerateOutputSuccess, gst::FlowError> {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return Ok(GenerateOutputSuccess::NoOutput);
        };
        match state.opened.runner {
            Runner::Live(_) | Runner::Shared(_) => self.collect(state, false)?,
            Runner::Sync(_) => {}
        }
        Ok(match state.ready.pop_front() {
            Some(buf) => GenerateOutputSuccess::Buffer(buf),
            None => GenerateOutputSuccess::NoOutput,
        })
    }
}
