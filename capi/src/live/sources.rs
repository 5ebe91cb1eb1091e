//! Many cameras on one live handle: sources added with `segtool_live_add_source` (a
//! `MultiStream` on the handle's server), fed by `segtool_live_submit_source`, read by
//! `segtool_live_next_source` (the handle's own stream is source 0), finished one at a
//! time and counted by `segtool_live_source_stats`.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use segtool_runtime::batching::SourceConfig;
use segtool_runtime::TemporalSmoother;

use super::{
    counts_of, live_ref, lock, segtool_live, segtool_live_counts, segtool_live_latency, Source,
    SOURCE_SLOTS,
};
use crate::result::segtool_result;
use crate::segmenter::copy_image;
use crate::status::segtool_status::{self, *};
use crate::status::{clear_out, opt_str, status_guard, write_if_asked, Error};

/// How often `segtool_live_next_source` looks again at the handle's own stream while it
/// waits on the added sources (their answers wake it at once).
const SOURCE_POLL: Duration = Duration::from_millis(2);

/// Adds a source (a camera) named `name` to the live stream: it shares the handle's
/// model and sessions, with a newest-frame slot of its own (`slot` frames wait
/// unstarted, at least 1; a newer frame replaces the oldest), its own deadline
/// (`deadline_ms`, 0: none), frame numbering, counters and latency, and its own temporal
/// smoothing when `segtool_live_options.smooth` is on. `*source` receives its id (1, 2,
/// ... in the order sources are added; 0 is the handle's own stream, the one
/// `segtool_live_submit` feeds). The sessions take the waiting frames of every source in
/// turn, the one served longest ago first. The slots of all added sources together hold
/// at most 256 frames. A name already added is an error.
///
/// # Safety
/// `live` is NULL or a live handle; `name` is NULL or a NUL-terminated string; `source`
/// is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_add_source(
    live: *const segtool_live,
    name: *const std::ffi::c_char,
    slot: u32,
    deadline_ms: u32,
    source: *mut u32,
) -> segtool_status {
    status_guard(|| {
        let live = live_ref(live)?;
        if source.is_null() {
            return Err(Error::null("source"));
        }
        // SAFETY: NULL or NUL-terminated (contract).
        let name = unsafe { opt_str(name, "name") }?.ok_or_else(|| Error::null("name"))?;
        if name.is_empty() {
            return Err(Error::invalid("name is empty"));
        }
        let slot = slot.max(1) as usize;
        let mut sources = lock(&live.sources);
        let held: usize = sources.iter().map(|s| s.slot).sum();
        if held + slot > SOURCE_SLOTS {
            return Err(Error::invalid(format!(
                "slot {slot}: the sources' slots would hold {} frames, more than {SOURCE_SLOTS}",
                held + slot
            )));
        }
        let mut config = SourceConfig::newest();
        config.slot = slot;
        if deadline_ms > 0 {
            config = config.with_deadline(Duration::from_millis(u64::from(deadline_ms)));
        }
        let smoother = (live.smooth > 0.0)
            .then(|| TemporalSmoother::new(live.smooth).map(Mutex::new))
            .transpose()
            .map_err(|e| Error::invalid(e.to_string()))?;
        live.cameras
            .add_source(name, config)
            .map_err(|e| Error::invalid(e.to_string()))?;
        sources.push(Source {
            name: name.to_owned(),
            slot,
            smoother,
        });
        let id = sources.len() as u32;
        // SAFETY: non-null and writable (contract).
        unsafe { *source = id };
        Ok(())
    })
}

/// `segtool_live_submit` for source `source` (0: the handle's own stream, else an id
/// from `segtool_live_add_source`). `*frame_index` receives the frame's index in that
/// source's own numbering (0, 1, 2, ...). A source that was never added, or one that
/// was finished, is an error (`SEGTOOL_ERR_INVALID_ARGUMENT`, the message naming it).
///
/// # Safety
/// As for `segtool_live_submit`.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_submit_source(
    live: *const segtool_live,
    source: u32,
    rgb: *const u8,
    width: u32,
    height: u32,
    stride_bytes: u32,
    frame_index: *mut u64,
) -> segtool_status {
    status_guard(|| {
        let live = live_ref(live)?;
        let name = live.source_name(source)?;
        if rgb.is_null() {
            return Err(Error::null("rgb"));
        }
        let image = copy_image(rgb, width, height, stride_bytes)?;
        let index = match name {
            None => live.stream.submit(image),
            Some(name) => live
                .cameras
                .submit(&name, image)
                .map_err(|e| Error::invalid(format!("source {source}: {e}")))?,
        };
        // SAFETY: NULL or writable (contract).
        unsafe { write_if_asked(frame_index, index) };
        Ok(())
    })
}

/// `segtool_live_next` over every source: waits up to `timeout_ms` milliseconds for the
/// next answered frame of the handle's own stream (source 0) or of any added source,
/// taking them in turn (each source's frames in its own order). On `SEGTOOL_OK`, `*out`
/// receives its class map, `*source` (if not NULL) the source's id and `*frame_index`
/// (if not NULL) its index in that source. `SEGTOOL_TIMEOUT`: none in time.
/// `SEGTOOL_END`: every source is finished (`segtool_live_finish`, or
/// `segtool_live_finish_source` for each) and every frame is out. A frame that failed
/// returns its error status with `*source` and `*frame_index` set and `*out` NULL.
/// (`segtool_live_next` returns the frames of source 0 only.) Call it from one thread.
///
/// # Safety
/// `live` is NULL or a live handle; `source`, `frame_index` and `out` are NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_next_source(
    live: *const segtool_live,
    timeout_ms: u32,
    source: *mut u32,
    frame_index: *mut u64,
    out: *mut *mut segtool_result,
) -> segtool_status {
    status_guard(|| {
        // SAFETY: `out` is NULL or writable (contract).
        unsafe { clear_out(out) }?;
        let live = live_ref(live)?;
        let until = Instant::now() + Duration::from_millis(u64::from(timeout_ms));
        loop {
            // What is settled before looking: with nothing pending anywhere, finding no
            // known frame below means every source is drained.
            let cameras_settled = live
                .cameras
                .stats()
                .iter()
                .all(|s| s.finished && s.counts.pending == 0);
            let own_drained = live.stream.is_drained();
            let has_sources = !lock(&live.sources).is_empty();
            let own_first = !has_sources || live.turn.fetch_add(1, Ordering::Relaxed) % 2 == 0;
            let take_own = || live.stream.try_next().map(|f| (0u32, f));
            let take_cameras = || {
                live.cameras
                    .next_timeout(Duration::ZERO)
                    .map(|f| (live.source_id(&f.source), f.frame))
            };
            let mut found = match own_first {
                true => take_own().or_else(take_cameras),
                false => take_cameras().or_else(take_own),
            };
            if found.is_none() {
                if own_drained && cameras_settled {
                    return Err(Error::new(
                        SEGTOOL_END,
                        "every source is finished and drained",
                    ));
                }
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Err(Error::new(
                        SEGTOOL_TIMEOUT,
                        format!("no frame answered within {timeout_ms} ms"),
                    ));
                }
                found = match has_sources {
                    true => live
                        .cameras
                        .next_timeout(left.min(SOURCE_POLL))
                        .map(|f| (live.source_id(&f.source), f.frame)),
                    false => live.stream.next_timeout(left).map(|f| (0, f)),
                };
            }
            let Some((id, frame)) = found else { continue };
            // SAFETY: NULL or writable (contract).
            unsafe { write_if_asked(source, id) };
            // SAFETY: NULL or writable (contract).
            unsafe { write_if_asked(frame_index, frame.frame) };
            let result = match id {
                0 => live.answer(frame, live.smoother.as_ref(), "")?,
                id => {
                    let sources = lock(&live.sources);
                    let s = &sources[id as usize - 1];
                    live.answer(frame, s.smoother.as_ref(), &s.name)?
                }
            };
            if let Some(result) = result {
                // SAFETY: as above.
                unsafe { *out = Box::into_raw(Box::new(result)) };
                return Ok(());
            }
        }
    })
}

/// Source `source` sends no more frames (0: the handle's own stream); the others go on.
/// Its remaining frames still come out of `segtool_live_next_source`.
///
/// # Safety
/// `live` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_finish_source(
    live: *const segtool_live,
    source: u32,
) -> segtool_status {
    status_guard(|| {
        let live = live_ref(live)?;
        match live.source_name(source)? {
            None => live.stream.finish(),
            Some(name) => live
                .cameras
                .finish_source(&name)
                .map_err(|e| Error::invalid(e.to_string()))?,
        }
        Ok(())
    })
}

/// Copies source `source`'s counters into `*counts` (the sum is exact per source, as
/// for `segtool_live_stats`) and, if `latency` is not NULL, its arrival-to-answer
/// latency into `*latency`. Source 0 is the handle's own stream (`segtool_live_stats`'
/// counters). A source that was never added is an error naming the sources there are.
///
/// # Safety
/// `live` is NULL or a live handle; `counts` is NULL or writable; `latency` is NULL or
/// writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_live_source_stats(
    live: *const segtool_live,
    source: u32,
    counts: *mut segtool_live_counts,
    latency: *mut segtool_live_latency,
) -> segtool_status {
    status_guard(|| {
        if counts.is_null() {
            return Err(Error::null("counts"));
        }
        let live = live_ref(live)?;
        let (s, l) = match live.source_name(source)? {
            None => (live.stream.stats(), live.stream.latency()),
            Some(name) => {
                let st = live
                    .cameras
                    .stats()
                    .into_iter()
                    .find(|s| s.name == name)
                    .expect("every added source has stats");
                (st.counts, st.latency)
            }
        };
        // SAFETY: non-null and writable (contract).
        unsafe { *counts = counts_of(s) };
        if !latency.is_null() {
            // SAFETY: non-null and writable (contract).
            unsafe {
                *latency = segtool_live_latency {
                    samples: l.samples as u64,
                    p50_ms: l.p50_ms,
                    p99_ms: l.p99_ms,
                }
            };
        }
        Ok(())
    })
}
