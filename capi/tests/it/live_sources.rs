//! Many cameras on one live handle, from Rust in-process: sources added with
//! `segtool_live_add_source`, fed by `segtool_live_submit_source`, read by
//! `segtool_live_next_source` (which names each frame's source), counted per source by
//! `segtool_live_source_stats`; class maps equal to the single-camera path; a source id
//! never added is an error naming the sources; a handle without sources works as before.

use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::ptr;

use image::{Rgb, RgbImage};
use segtool::*;
use segtool_runtime::{EngineKind, Segmenter};
use segtool_testkit::{tiny_model_bytes, tiny_spec};

fn last_error() -> String {
    unsafe { CStr::from_ptr(segtool_last_error()) }
        .to_str()
        .unwrap()
        .to_owned()
}

struct Live {
    _dir: tempfile::TempDir,
    path: String,
    live: *mut segtool_live,
}

impl Drop for Live {
    fn drop(&mut self) {
        unsafe { segtool_live_close(self.live) };
    }
}

/// A live handle on the identity 1x1-conv model (class = dominant channel), tract.
fn open(slot: u32) -> Live {
    open_batching(slot, 1)
}

/// [`open`] with engine runs of up to `max_batch` frames (one per source).
fn open_batching(slot: u32, max_batch: u32) -> Live {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rgb.onnx");
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &identity, &[0.0; 3])).unwrap();
    let c_path = CString::new(path.to_str().unwrap()).unwrap();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    let mut lo = segtool_live_options_default();
    lo.slot = slot;
    lo.max_batch = max_batch;
    let mut live = ptr::null_mut();
    let st = unsafe { segtool_live_open(c_path.as_ptr(), &opts, &lo, &mut live) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    Live {
        path: path.to_str().unwrap().to_owned(),
        _dir: dir,
        live,
    }
}

fn add(live: &Live, name: &str, slot: u32) -> u32 {
    let name = CString::new(name).unwrap();
    let mut id = 99;
    let st = unsafe { segtool_live_add_source(live.live, name.as_ptr(), slot, 0, &mut id) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    id
}

/// Camera `camera`'s frame `i`: blocks of the three colours in a pattern of its own.
fn frame(camera: u32, i: u32) -> RgbImage {
    RgbImage::from_fn(24, 16, |x, y| {
        let mut p = [20u8; 3];
        p[((x / 4 + y / 4 + camera + i) % 3) as usize] = 230;
        Rgb(p)
    })
}

fn submit(live: &Live, source: u32, img: &RgbImage) -> Result<u64, segtool_status> {
    let mut index = u64::MAX;
    let st = unsafe {
        segtool_live_submit_source(
            live.live,
            source,
            img.as_raw().as_ptr(),
            img.width(),
            img.height(),
            0,
            &mut index,
        )
    };
    match st {
        segtool_status::SEGTOOL_OK => Ok(index),
        st => Err(st),
    }
}

/// `segtool_live_next_source`: (source, frame index, class map) or the status.
fn next(live: &Live, timeout_ms: u32) -> Result<(u32, u64, Vec<u8>), segtool_status> {
    let (mut source, mut index, mut res) = (u32::MAX, u64::MAX, ptr::null_mut());
    let st = unsafe {
        segtool_live_next_source(live.live, timeout_ms, &mut source, &mut index, &mut res)
    };
    if st != segtool_status::SEGTOOL_OK {
        assert!(res.is_null());
        return Err(st);
    }
    let map = unsafe {
        let n = (segtool_result_width(res) * segtool_result_height(res)) as usize;
        let map = std::slice::from_raw_parts(segtool_result_class_map(res), n).to_vec();
        segtool_result_free(res);
        map
    };
    Ok((source, index, map))
}

fn stats(live: &Live, source: u32) -> (segtool_live_counts, segtool_live_latency) {
    let mut c = segtool_live_counts::default();
    let mut l = segtool_live_latency::default();
    let st = unsafe { segtool_live_source_stats(live.live, source, &mut c, &mut l) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    (c, l)
}

fn single_camera(path: &str, img: &RgbImage) -> Vec<u8> {
    Segmenter::builder(path)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .segment(img)
        .unwrap()
        .mask
        .to_le_bytes()
}

#[test]
fn two_sources_exact_counts_and_the_single_camera_masks() {
    // One frame per run, and runs batched across the sources: the same masks and counts.
    for max_batch in [1, 4] {
        two_sources(max_batch);
    }
}

fn two_sources(max_batch: u32) {
    let live = open_batching(1, max_batch);
    let front = add(&live, "front", 8);
    let rear = add(&live, "rear", 8);
    assert_eq!((front, rear), (1, 2));
    const FRAMES: u32 = 5;
    for i in 0..FRAMES {
        // Slots of 8: nothing is replaced, every frame is answered.
        assert_eq!(submit(&live, front, &frame(front, i)), Ok(u64::from(i)));
        assert_eq!(submit(&live, rear, &frame(rear, i)), Ok(u64::from(i)));
    }
    assert_eq!(
        unsafe { segtool_live_finish(live.live) },
        segtool_status::SEGTOOL_OK
    );
    let mut seen: HashMap<u32, Vec<u64>> = HashMap::new();
    loop {
        match next(&live, 20_000) {
            Ok((source, index, map)) => {
                let want = single_camera(&live.path, &frame(source, index as u32));
                assert_eq!(map, want, "source {source} frame {index}");
                seen.entry(source).or_default().push(index);
            }
            Err(st) => {
                assert_eq!(st, segtool_status::SEGTOOL_END, "{}", last_error());
                break;
            }
        }
    }
    // Each source's frames in its own order; nothing of source 0.
    let all: Vec<u64> = (0..u64::from(FRAMES)).collect();
    assert_eq!(seen.get(&front), Some(&all));
    assert_eq!(seen.get(&rear), Some(&all));
    assert_eq!(seen.len(), 2);
    for source in [front, rear] {
        let (c, l) = stats(&live, source);
        assert_eq!(
            (
                c.submitted,
                c.answered,
                c.failed,
                c.replaced,
                c.expired,
                c.rejected,
                c.pending
            ),
            (5, 5, 0, 0, 0, 0, 0),
            "source {source}"
        );
        assert_eq!(l.samples, 5);
        assert!(l.p50_ms > 0.0 && l.p50_ms <= l.p99_ms, "{l:?}");
    }
    let (own, _) = stats(&live, 0);
    assert_eq!(own.submitted, 0);
    // After the end, it keeps saying so.
    assert_eq!(next(&live, 0), Err(segtool_status::SEGTOOL_END));
}

#[test]
fn a_source_never_added_is_an_error_naming_the_sources() {
    let live = open(1);
    add(&live, "front", 1);
    let img = frame(0, 0);
    assert_eq!(
        submit(&live, 7, &img),
        Err(segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT)
    );
    let msg = last_error();
    assert!(
        msg.contains("no source 7") && msg.contains("1 \"front\""),
        "{msg}"
    );
    let mut c = segtool_live_counts::default();
    let st = unsafe { segtool_live_source_stats(live.live, 2, &mut c, ptr::null_mut()) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("no source 2"), "{}", last_error());
    let st = unsafe { segtool_live_finish_source(live.live, 3) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    // The same name twice, and NULL arguments.
    let name = CString::new("front").unwrap();
    let mut id = 0;
    let st = unsafe { segtool_live_add_source(live.live, name.as_ptr(), 1, 0, &mut id) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("already open"), "{}", last_error());
    let st = unsafe { segtool_live_add_source(live.live, ptr::null(), 1, 0, &mut id) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_NULL_ARGUMENT);
    let st = unsafe { segtool_live_add_source(live.live, name.as_ptr(), 1, 0, ptr::null_mut()) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_NULL_ARGUMENT);
    let st = unsafe { segtool_live_source_stats(live.live, 1, ptr::null_mut(), ptr::null_mut()) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_NULL_ARGUMENT);
    // Slots beyond what the handle holds for its sources.
    let big = CString::new("big").unwrap();
    let st = unsafe { segtool_live_add_source(live.live, big.as_ptr(), 1000, 0, &mut id) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    // Nothing refused was counted.
    assert_eq!(stats(&live, 1).0.submitted, 0);
}

#[test]
fn one_source_finishes_while_the_other_and_source_zero_go_on() {
    let live = open(4);
    let front = add(&live, "front", 4);
    let rear = add(&live, "rear", 4);
    for i in 0..2 {
        submit(&live, rear, &frame(rear, i)).unwrap();
    }
    assert_eq!(
        unsafe { segtool_live_finish_source(live.live, rear) },
        segtool_status::SEGTOOL_OK
    );
    assert_eq!(
        submit(&live, rear, &frame(rear, 2)),
        Err(segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT)
    );
    assert!(last_error().contains("finished"), "{}", last_error());
    // The front camera and the handle's own stream (source 0, `segtool_live_submit`'s
    // too) go on.
    for i in 0..3 {
        submit(&live, front, &frame(front, i)).unwrap();
    }
    let own = frame(0, 9);
    let mut index = u64::MAX;
    let st =
        unsafe { segtool_live_submit(live.live, own.as_raw().as_ptr(), 24, 16, 0, &mut index) };
    assert_eq!((st, index), (segtool_status::SEGTOOL_OK, 0));
    submit(&live, 0, &own).unwrap();
    assert_eq!(
        unsafe { segtool_live_finish(live.live) },
        segtool_status::SEGTOOL_OK
    );
    let mut got: HashMap<u32, Vec<u64>> = HashMap::new();
    while let Ok((source, index, map)) = next(&live, 20_000) {
        let img = if source == 0 {
            own.clone()
        } else {
            frame(source, index as u32)
        };
        assert_eq!(map, single_camera(&live.path, &img));
        got.entry(source).or_default().push(index);
    }
    assert_eq!(got[&rear], vec![0, 1]);
    assert_eq!(got[&front], vec![0, 1, 2]);
    assert_eq!(got[&0], vec![0, 1]);
    for (source, n) in [(0, 2), (front, 3), (rear, 2)] {
        let (c, _) = stats(&live, source);
        assert_eq!(
            (c.submitted, c.answered, c.pending),
            (n, n, 0),
            "source {source}"
        );
    }
}

#[test]
fn a_handle_without_sources_answers_next_source_as_source_zero() {
    let live = open(1);
    let img = frame(0, 1);
    let mut index = u64::MAX;
    let st =
        unsafe { segtool_live_submit(live.live, img.as_raw().as_ptr(), 24, 16, 0, &mut index) };
    assert_eq!(st, segtool_status::SEGTOOL_OK);
    assert_eq!(
        next(&live, 20_000),
        Ok((0, 0, single_camera(&live.path, &img)))
    );
    assert_eq!(next(&live, 10), Err(segtool_status::SEGTOOL_TIMEOUT));
    unsafe { segtool_live_finish(live.live) };
    assert_eq!(next(&live, 10), Err(segtool_status::SEGTOOL_END));
}
