//! The element's own steps, called from its BaseTransform methods (`imp`): rendering a
//! result into an output buffer, collecting the live stream's results, draining at EOS,
//! discarding at a flush, and the bus reports.

use std::time::{Duration, Instant};

use gst::prelude::*;
use gst::subclass::prelude::*;
use gst_base::prelude::*;
use gst_video::VideoFrameRef;
use image::RgbImage;

use super::caps;
use super::engine::{Answer, Runner};
use super::imp::{lock, SegtoolSeg, State, CAT, DROP_REPORT_EVERY};
use super::props::OutputMode;
use crate::meta::{ClassMap, Logits};

impl SegtoolSeg {
    pub(super) fn post(&self, s: gst::Structure) {
        let _ = self
            .obj()
            .post_message(gst::message::Element::builder(s).src(&*self.obj()).build());
    }

    /// What the element adds to the pipeline's latency: in live mode the measured p99
    /// (frames wait for a free engine), else the median, before any frame the warm-up.
    pub(super) fn latency(&self) -> Duration {
        let (live, warmup) = match &*lock(&self.state) {
            Some(s) => (s.opened.runner.is_live(), s.warmup),
            None => (false, None),
        };
        let stats = lock(&self.stats);
        let measured = stats.percentile(if live { 99.0 } else { 50.0 });
        measured.or(warmup).unwrap_or(Duration::ZERO)
    }

    /// The output buffer of one frame: its timestamps, the rendered output, the meta.
    pub(super) fn render(
        &self,
        state: &State,
        index: u64,
        inbuf: &gst::Buffer,
        rgb: &RgbImage,
        answer: Answer,
    ) -> Result<gst::Buffer, gst::FlowError> {
        let Answer { mask, logits, .. } = answer;
        let (in_info, out_info) = match (&state.in_info, &state.out_info) {
            (Some(i), Some(o)) => (i.clone(), o.clone()),
            _ => return Err(gst::FlowError::NotNegotiated),
        };
        let (w, h) = (in_info.width() as usize, in_info.height() as usize);
        let output = lock(&self.settings).output;
        let alpha = lock(&self.settings).alpha as f32;
        let mut out = gst::Buffer::with_size(out_info.size()).map_err(|_| gst::FlowError::Error)?;
        {
            let outbuf = out.get_mut().expect("new buffer");
            inbuf
                .copy_into(
                    outbuf,
                    gst::BufferCopyFlags::TIMESTAMPS | gst::BufferCopyFlags::FLAGS,
                    ..,
                )
                .map_err(|_| gst::FlowError::Error)?;
            let written = {
                let input = VideoFrameRef::from_buffer_ref_readable(inbuf.as_ref(), &in_info)
                    .map_err(|_| gst::FlowError::Error)?;
                let mut frame = VideoFrameRef::from_buffer_ref_writable(outbuf, &out_info)
                    .map_err(|_| gst::FlowError::Error)?;
                let palette = &state.opened.spec.palette;
                match output {
                    OutputMode::Mask => caps::write_mask(&mask, &mut frame),
                    OutputMode::Color => caps::write_rgb(
                        &segtool_runtime::colorize(&mask, palette),
                        Some(&input),
                        &mut frame,
                    ),
                    OutputMode::Overlay => caps::write_rgb(
                        &segtool_runtime::overlay(rgb, &mask, palette, alpha),
                        Some(&input),
                        &mut frame,
                    ),
                }
            };
            written.map_err(|e| {
                gst::element_imp_error!(
                    self,
                    gst::StreamError::Failed,
                    ("writing the output: {e}")
                );
                gst::FlowError::Error
            })?;
            let classes = state.opened.spec.num_classes() as u32;
            let map = ClassMap::new(w as u32, h as u32, classes, mask, index);
            #[cfg(feature = "analytics")]
            super::analytics::attach(outbuf, &map.ids, classes).map_err(|e| {
                gst::element_imp_error!(self, gst::StreamError::Failed, ("{e}"));
                gst::FlowError::Error
            })?;
            map.attach(outbuf).map_err(|_| gst::FlowError::Error)?;
            if let Some(logits) = logits {
                Logits::new(logits)
                    .attach(outbuf)
                    .map_err(|_| gst::FlowError::Error)?;
            }
        }
        Ok(out)
    }

    /// Live mode and a shared model: takes the fates the stream knows (waiting for every
    /// frame in flight when `settle`), queues the answered frames' results and counts the
    /// dropped ones.
    pub(super) fn collect(&self, state: &mut State, settle: bool) -> Result<(), gst::FlowError> {
        loop {
            if settle && state.in_flight.is_empty() {
                return Ok(());
            }
            let (next, answer) = match &mut state.opened.runner {
                Runner::Sync(_) => return Ok(()),
                Runner::Live(live) => {
                    let next = match settle {
                        true => live.stream.next(),
                        false => live.stream.try_next(),
                    };
                    let Some(mut frame) = next else {
                        return Ok(());
                    };
                    let answer = live.answer_of(&mut frame);
                    (frame, answer)
                }
                Runner::Shared(shared) => {
                    let next = match settle {
                        true => shared.next(),
                        false => shared.try_next(),
                    };
                    let Some(mut frame) = next else {
                        return Ok(());
                    };
                    let answer = shared.answer_of(&mut frame);
                    (frame, answer)
                }
            };
            let frame = next;
            let Some((index, inbuf, rgb, _)) = state.in_flight.remove(&frame.frame) else {
                continue;
            };
            match (answer, frame.outcome) {
                (Some(answer), _) => {
                    let out = self.render(state, index, &inbuf, &rgb, answer)?;
                    state.ready.push_back(out);
                    lock(&self.stats).answered(frame.submitted.elapsed());
                }
                (None, segtool_runtime::batching::LiveOutcome::Dropped(reason)) => {
                    gst::debug!(CAT, imp = self, "frame {} dropped: {reason}", frame.frame);
                    lock(&self.stats).dropped += 1;
                }
                (None, segtool_runtime::batching::LiveOutcome::Failed(e)) => {
                    lock(&self.stats).failed += 1;
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Failed,
                        ("model {}: frame {index}: {e}", state.model)
                    );
                    return Err(gst::FlowError::Error);
                }
                (None, segtool_runtime::batching::LiveOutcome::Answered(_)) => {
                    unreachable!("answered frames have a mask")
                }
            }
        }
    }

    /// EOS: waits for the frames in flight and pushes their results.
    pub(super) fn drain(&self) -> Result<(), gst::FlowError> {
        let ready: Vec<gst::Buffer> = {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return Ok(());
            };
            let drained = match &mut state.opened.runner {
                Runner::Live(live) => {
                    live.stream.finish();
                    self.collect(state, true)
                }
                // The element's source ends; the other elements' go on. A later frame
                // (a seek back after EOS) opens a fresh source.
                Runner::Shared(shared) => {
                    shared.finish();
                    self.collect(state, true)
                }
                Runner::Sync(_) => Ok(()),
            };
            // A finished stream takes no more frames: a fresh one for what may follow
            // (a seek back after EOS).
            match &mut state.opened.runner {
                Runner::Live(live) => live.reset(),
                Runner::Shared(_) | Runner::Sync(_) => {}
            }
            drained?;
            state.ready.drain(..).collect()
        };
        for buf in ready {
            self.obj().src_pad().push(buf)?;
        }
        Ok(())
    }

    /// New caps on a running stream: waits for the frames in flight and pushes their
    /// results (they render at the size they came with).
    pub(super) fn settle(&self) -> Result<(), gst::FlowError> {
        let ready: Vec<gst::Buffer> = {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return Ok(());
            };
            self.collect(state, true)?;
            state.ready.drain(..).collect()
        };
        for buf in ready {
            self.obj().src_pad().push(buf)?;
        }
        Ok(())
    }

    /// A flush: forgets the frames in flight and the queued results.
    pub(super) fn discard(&self) {
        let mut guard = lock(&self.state);
        let Some(state) = guard.as_mut() else {
            return;
        };
        let lost = (state.in_flight.len() + state.ready.len()) as u64;
        state.in_flight.clear();
        state.ready.clear();
        match &mut state.opened.runner {
            Runner::Live(live) => live.reset(),
            Runner::Sync(sync) => sync.reset(),
            Runner::Shared(shared) => {
                if let Err(e) = shared.reset() {
                    gst::element_imp_error!(
                        self,
                        gst::StreamError::Failed,
                        ("model {}: after a flush: {e}", state.model)
                    );
                }
                if let Some((_, name)) = &mut lock(&self.stats).shared {
                    *name = shared.source.clone();
                }
            }
        }
        lock(&self.stats).flushed += lost;
    }

    /// Posts `segtool-drops` when frames were dropped since the last report (at most once
    /// a second, and always when `last`).
    pub(super) fn report_drops(&self, last: bool) {
        let now = Instant::now();
        {
            let mut guard = lock(&self.state);
            let Some(state) = guard.as_mut() else {
                return;
            };
            if !last
                && state
                    .last_drop_report
                    .is_some_and(|t| now - t < DROP_REPORT_EVERY)
            {
                return;
            }
            let stats = lock(&self.stats);
            if stats.dropped == stats.dropped_reported && !last {
                return;
            }
            state.last_drop_report = Some(now);
        }
        let s = {
            let mut stats = lock(&self.stats);
            stats.dropped_reported = stats.dropped;
            gst::Structure::builder("segtool-drops")
                .field("dropped", stats.dropped)
                .field("answered", stats.answered)
                .field("frames-in", stats.frames_in)
                .build()
        };
        self.post(s);
    }
}
