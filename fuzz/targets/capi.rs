//! The C ABI (libsegtool, capi/): the input is a program of up to 24 calls, each an opcode
//! byte and its arguments (sizes, strides, indices, strings, option fields) from the bytes
//! that follow.
//!
//! Calls the `extern "C"` functions themselves, as a C caller would: `segtool_segment` and
//! `segtool_live_submit` with any width, height and stride, the per-class accessors with
//! any index, `segtool_open` / `segtool_live_open` with any options (engine value,
//! provider list, threads, fixed size, a card file with fuzzed TOML, NULLs), the live
//! stream's next / stats / finish / close, and NULL for every pointer argument the
//! contract allows to be NULL. Every status must be a `segtool_status`, every returned
//! string NUL-terminated, every result as large as it says and its classes in range.
//!
//! Refuses what the contract forbids the caller: an `rgb` buffer shorter than
//! `stride * (height - 1) + width * 3` for a size the library must accept (it is then
//! given that many bytes, up to 256 KiB, or the call is skipped); a too-short buffer is
//! passed only where the call must fail before reading (zero or over-large sizes, short
//! strides), so ASan sees any read. ONNX Runtime is never loaded: the static segmenter and
//! every tract request run on tract, and `AUTO`/`ORT` requests get an `ort_library` that
//! does not exist (open fails or falls back to tract, as without the library). Live
//! streams open without a card file, and a card whose input tensor is legitimately large
//! (see `support::too_big_to_fuzz`) is opened but not segmented.

use std::ffi::{c_char, CStr, CString};
use std::ptr;
use std::sync::OnceLock;

use segtool::*;

const MAX_BUFFER: u64 = 256 << 10;
const NO_ORT: &CStr = c"/nonexistent/segtool-fuzz/libonnxruntime.so";

struct Handle(*mut segtool_segmenter);
// The handle is documented as usable from any thread.
unsafe impl Send for Handle {}
unsafe impl Sync for Handle {}

/// The tiny model opened once on tract (what most calls use).
fn segmenter() -> *mut segtool_segmenter {
    static SEG: OnceLock<Handle> = OnceLock::new();
    SEG.get_or_init(|| {
        let path = CString::new(super::support::tiny_model().to_str().unwrap()).unwrap();
        let mut opts = segtool_options_default();
        opts.engine = SEGTOOL_ENGINE_TRACT;
        opts.threads = 1;
        let mut seg = ptr::null_mut();
        let status = unsafe { segtool_open(path.as_ptr(), &opts, &mut seg) };
        assert!(
            status == segtool_status::SEGTOOL_OK && !seg.is_null(),
            "opening the tiny model"
        );
        Handle(seg)
    })
    .0
}

/// A status of a call that must not panic inside: anything but `SEGTOOL_ERR_PANIC`.
fn status(st: segtool_status) -> segtool_status {
    assert_ne!(
        st,
        segtool_status::SEGTOOL_ERR_PANIC,
        "a call panicked: {:?}",
        unsafe { CStr::from_ptr(segtool_last_error()) }
    );
    st
}

fn check_str(p: *const c_char) {
    if !p.is_null() {
        let _ = unsafe { CStr::from_ptr(p) }.to_bytes().len();
    }
}

/// Checks and frees a result: its class map is `width * height` classes below `classes`.
fn take_result(res: *mut segtool_result, w: u32, h: u32, classes: u32) {
    if res.is_null() {
        return;
    }
    unsafe {
        let (rw, rh) = (segtool_result_width(res), segtool_result_height(res));
        if w != 0 {
            assert_eq!((rw, rh), (w, h), "result size");
        }
        let map =
            std::slice::from_raw_parts(segtool_result_class_map(res), rw as usize * rh as usize);
        assert!(
            map.iter().all(|&c| u32::from(c) < classes),
            "class out of range"
        );
        segtool_result_free(res);
    }
}

/// An image argument: the buffer to pass (`None`: skip the call) for `w x h` at `stride`.
fn image_arg(b: &mut super::support::Bytes, w: u32, h: u32, stride: u32) -> Option<Vec<u8>> {
    let row = u64::from(w) * 3;
    let invalid = w == 0
        || h == 0
        || u64::from(w) * u64::from(h) > SEGTOOL_MAX_PIXELS
        || (stride != 0 && u64::from(stride) < row);
    if invalid {
        return Some(vec![0; 3]); // must be refused before any read
    }
    let stride = if stride == 0 { row } else { u64::from(stride) };
    let need = stride * u64::from(h - 1) + row;
    if need > MAX_BUFFER {
        return None;
    }
    let fill = b.take(64);
    let fill = if fill.is_empty() { &[128u8][..] } else { fill };
    Some((0..need as usize).map(|i| fill[i % fill.len()]).collect())
}

/// Sizes: mostly small, sometimes anything.
fn dims(b: &mut super::support::Bytes) -> (u32, u32, u32) {
    match b.u8() % 4 {
        0 => (b.u32(), b.u32(), b.u32()),
        1 => (u32::from(b.u8()), u32::from(b.u8()), u32::from(b.u16())),
        _ => (u32::from(b.u8() % 48), u32::from(b.u8() % 48), 0),
    }
}

/// A NUL-terminated string from the input (up to its next NUL), kept alive by `keep`.
fn c_str(b: &mut super::support::Bytes, keep: &mut Vec<CString>) -> *const c_char {
    let s = CString::new(b.until_nul()).expect("no NUL before the terminator");
    keep.push(s);
    keep.last().unwrap().as_ptr()
}

/// Options with fuzzed fields (strings kept alive by `keep`), or NULL.
fn options(b: &mut super::support::Bytes, keep: &mut Vec<CString>) -> Option<segtool_options> {
    let flags = b.u8();
    if flags & 1 == 0 {
        return None;
    }
    let mut o = segtool_options_default();
    o.engine = i32::from(b.u8()) % 4 - (i32::from(flags >> 7)); // -1..=3, mostly 0..=2
    o.providers = if flags & 2 != 0 {
        c_str(b, keep)
    } else {
        ptr::null()
    };
    o.threads = u32::from(b.u8() % 3);
    o.strict = flags & 4 != 0;
    if flags & 8 != 0 {
        (o.fixed_height, o.fixed_width) = (u32::from(b.u8()), u32::from(b.u8()));
    }
    if flags & 16 != 0 {
        let card = super::support::write("card.segtool.toml", b.until_nul());
        keep.push(CString::new(card.to_str().unwrap()).unwrap());
        o.card = keep.last().unwrap().as_ptr();
    }
    if o.engine != SEGTOOL_ENGINE_TRACT {
        o.ort_library = NO_ORT.as_ptr();
    }
    Some(o)
}

/// The model path of an open call: the tiny model, a missing file, a folder, a foreign
/// graph (whose card, if any, is the options'), empty, or NULL.
fn model_path(b: &mut super::support::Bytes, keep: &mut Vec<CString>) -> *const c_char {
    let path = match b.u8() % 6 {
        0 => return ptr::null(),
        1 => String::new(),
        2 => "/nonexistent/segtool-fuzz/model.onnx".into(),
        3 => super::support::scratch().to_str().unwrap().into(),
        4 => super::support::write("foreign.onnx", super::support::foreign_model_bytes())
            .to_str()
            .unwrap()
            .into(),
        _ => super::support::tiny_model().to_str().unwrap().into(),
    };
    keep.push(CString::new(path).unwrap());
    keep.last().unwrap().as_ptr()
}

/// A foreign model's card (from the options) makes a legitimately large input for a
/// `(h, w)` image (see `support::too_big_to_fuzz`): not segmented.
fn card_too_big(path: *const c_char, opts: Option<&segtool_options>, hw: (u32, u32)) -> bool {
    use segtool_runtime::card::{resolve, CardRequest};
    let (Some(o), false) = (opts, path.is_null()) else {
        return false;
    };
    if o.card.is_null() {
        return false;
    }
    let to_path = |p: *const c_char| {
        std::path::PathBuf::from(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
    };
    let request = CardRequest::new().card_file(to_path(o.card));
    resolve(&to_path(path), &request)
        .is_ok_and(|r| super::support::too_big_to_fuzz(&r.card, (hw.0 as usize, hw.1 as usize)))
}

/// Opens a model (path and options from the input), segments one image with it when it
/// opened, closes it. `with_out`: a real handle pointer, else NULL.
fn open_and_segment(b: &mut super::support::Bytes, keep: &mut Vec<CString>, with_out: bool) {
    unsafe {
        let path = model_path(b, keep);
        let opts = options(b, keep);
        let opts_ptr = opts.as_ref().map_or(ptr::null(), |o| o as *const _);
        let mut other = ptr::null_mut();
        let out = if with_out {
            &mut other as *mut _
        } else {
            ptr::null_mut()
        };
        let st = status(segtool_open(path, opts_ptr, out));
        if st == segtool_status::SEGTOOL_OK {
            check_str(segtool_fallback_reason(other));
            let (w, h) = match opts {
                Some(o) if o.fixed_height > 0 => (o.fixed_width, o.fixed_height),
                _ => (17, 11),
            };
            if card_too_big(path, opts.as_ref(), (h, w)) {
                segtool_close(other);
                return;
            }
            if let Some(buf) = image_arg(b, w, h, 0) {
                let mut res = ptr::null_mut();
                if status(segtool_segment(other, buf.as_ptr(), w, h, 0, &mut res))
                    == segtool_status::SEGTOOL_OK
                {
                    take_result(res, w, h, segtool_num_classes(other).max(256));
                }
            }
            segtool_close(other);
        } else {
            assert!(other.is_null(), "a failed open left a handle");
        }
    }
}

/// Opens a live session (tract, one thread, no card file); NULL when it did not open.
fn open_live(b: &mut super::support::Bytes, keep: &mut Vec<CString>) -> *mut segtool_live {
    unsafe {
        let path = model_path(b, keep);
        let mut o = options(b, keep).unwrap_or_else(|| segtool_options_default());
        // Each live session builds its own engine: tract, one thread; no card file
        // (frames of any size would be prepared under it on the server's thread,
        // where a legitimately large card cannot be skipped).
        (o.engine, o.threads, o.card) = (SEGTOOL_ENGINE_TRACT, 1, ptr::null());
        let mut lo = segtool_live_options_default();
        lo.slot = u32::from(b.u8() % 4);
        lo.deadline_ms = u32::from(b.u8() % 4);
        lo.sessions = u32::from(b.u8() % 3);
        lo.smooth = match b.u8() % 4 {
            0 => f32::from_bits(b.u32()),
            1 => 0.5,
            _ => 0.0,
        };
        let mut live = ptr::null_mut();
        let st = status(segtool_live_open(path, &o, &lo, &mut live));
        assert!(st == segtool_status::SEGTOOL_OK || live.is_null());
        live
    }
}

/// Every query of a handle (names, palette, provider, errors, version).
fn query_everything(s: *mut segtool_segmenter, b: &mut super::support::Bytes, op: u8) {
    unsafe {
        let index = if op & 1 == 0 {
            u32::from(b.u8() % 8)
        } else {
            b.u32()
        };
        check_str(segtool_class_name(s, index));
        let mut rgb = [0u8; 3];
        let out = if op & 2 == 0 {
            rgb.as_mut_ptr()
        } else {
            ptr::null_mut()
        };
        status(segtool_palette(s, index, out));
        let _ = segtool_num_classes(s);
        check_str(segtool_provider(s));
        check_str(segtool_engine_name(s));
        check_str(segtool_fallback_reason(s));
        check_str(segtool_last_error());
        check_str(segtool_version());
    }
}

/// The live counters add up. `with_out`: a real counts pointer, else NULL.
fn check_live_counts(live: *mut segtool_live, with_out: bool) {
    unsafe {
        let mut counts = segtool_live_counts::default();
        let out = if with_out {
            &mut counts as *mut _
        } else {
            ptr::null_mut()
        };
        if status(segtool_live_stats(live, out)) == segtool_status::SEGTOOL_OK {
            let c = counts;
            assert_eq!(
                c.submitted,
                c.answered + c.failed + c.replaced + c.expired + c.rejected + c.pending,
                "live counters: {c:?}"
            );
        }
    }
}

/// NULL handles everywhere: refused or ignored, never dereferenced.
fn null_handles_everywhere() {
    unsafe {
        segtool_close(ptr::null_mut());
        segtool_result_free(ptr::null_mut());
        segtool_live_close(ptr::null_mut());
        let _ = segtool_live_finish(ptr::null());
        let _ = segtool_live_next(ptr::null(), 0, ptr::null_mut(), ptr::null_mut());
        let _ = segtool_result_width(ptr::null());
        check_str(segtool_last_error());
    }
}

pub fn run(data: &[u8]) {
    let seg = segmenter();
    let mut b = super::support::Bytes::new(data);
    let mut keep: Vec<CString> = Vec::new();
    let mut live: *mut segtool_live = ptr::null_mut();
    // Opening builds an engine (tens of milliseconds under ASan): two opens a program.
    let mut opens = 0;
    for _ in 0..24 {
        if b.is_empty() {
            break;
        }
        let op = b.u8();
        let null_seg = op & 0x80 != 0;
        let s = if null_seg { ptr::null_mut() } else { seg };
        match op & 0x7f {
            0..=15 => unsafe {
                let (w, h, stride) = dims(&mut b);
                let Some(buf) = image_arg(&mut b, w, h, stride) else {
                    continue;
                };
                let mut res = ptr::null_mut();
                let st = status(segtool_segment(s, buf.as_ptr(), w, h, stride, &mut res));
                if st == segtool_status::SEGTOOL_OK {
                    take_result(res, w, h, segtool_num_classes(s));
                } else {
                    assert!(res.is_null(), "a failed segment left a result");
                    check_str(segtool_last_error());
                }
            },
            16..=19 => unsafe {
                // NULL rgb or NULL out.
                let mut res = ptr::null_mut();
                let rgb = [0u8; 3];
                status(segtool_segment(s, ptr::null(), 1, 1, 0, &mut res));
                status(segtool_segment(s, rgb.as_ptr(), 1, 1, 0, ptr::null_mut()));
                assert!(res.is_null());
            },
            20..=29 => query_everything(s, &mut b, op),
            30..=39 if opens < 2 => {
                opens += 1;
                open_and_segment(&mut b, &mut keep, op & 1 == 0);
            }
            40..=44 if live.is_null() && opens < 2 => {
                opens += 1;
                live = open_live(&mut b, &mut keep);
            }
            45..=54 => unsafe {
                let (w, h, stride) = dims(&mut b);
                let Some(buf) = image_arg(&mut b, w, h, stride) else {
                    continue;
                };
                let mut index = 0u64;
                status(segtool_live_submit(
                    live,
                    buf.as_ptr(),
                    w,
                    h,
                    stride,
                    &mut index,
                ));
            },
            55..=60 => unsafe {
                let mut res = ptr::null_mut();
                let mut index = 0u64;
                status(segtool_live_next(
                    live,
                    u32::from(b.u8() % 20),
                    &mut index,
                    &mut res,
                ));
                take_result(res, 0, 0, 256);
            },
            61..=63 => check_live_counts(live, op & 1 == 0),
            64..=66 => unsafe {
                status(segtool_live_finish(live));
            },
            67..=69 => unsafe {
                segtool_live_close(live);
                live = ptr::null_mut();
            },
            _ => null_handles_everywhere(),
        }
    }
    unsafe { segtool_live_close(live) };
}
