//! Model information on an open segmenter: class count and names, palette colours,
//! which engine and execution provider actually run (with the fallback reason), and the
//! options it was opened with. These
//! accessors only read data copied out at open time, so they never wait on the
//! segmenter's inference mutex.

use std::ffi::c_char;
use std::ptr;

use crate::segmenter::{segmenter_ref, segtool_segmenter};
use crate::status::segtool_status;
use crate::status::{status_guard, value_guard, Error};

/// Number of classes of the model (at least 1); 0 if `seg` is NULL.
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_num_classes(seg: *const segtool_segmenter) -> u32 {
    value_guard(0, || Ok(segmenter_ref(seg)?.class_names.len() as u32))
}

fn class_index(seg: &segtool_segmenter, index: u32) -> Result<usize, Error> {
    let n = seg.class_names.len();
    let i = index as usize;
    if i < n {
        Ok(i)
    } else {
        Err(Error::invalid(format!(
            "class index {index} out of range: the model has {n} classes"
        )))
    }
}

/// Name of class `index` (from the model's spec); valid while the segmenter lives. NULL
/// if `seg` is NULL or `index >= segtool_num_classes(seg)`.
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_class_name(
    seg: *const segtool_segmenter,
    index: u32,
) -> *const c_char {
    value_guard(ptr::null(), || {
        let seg = segmenter_ref(seg)?;
        Ok(seg.class_names[class_index(seg, index)?].as_ptr())
    })
}

/// Writes the RGB display colour of class `index` to `rgb[0..3]`.
///
/// # Safety
/// `seg` is NULL or a live handle; `rgb` is NULL or points to 3 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn segtool_palette(
    seg: *const segtool_segmenter,
    index: u32,
    rgb: *mut u8,
) -> segtool_status {
    status_guard(|| {
        let seg = segmenter_ref(seg)?;
        if rgb.is_null() {
            return Err(Error::null("rgb"));
        }
        let colour = seg.palette[class_index(seg, index)?];
        // SAFETY: 3 writable bytes (contract).
        unsafe { ptr::copy_nonoverlapping(colour.as_ptr(), rgb, 3) };
        Ok(())
    })
}

/// The execution provider actually in use: `"cpu"`, `"cuda:0"`, `"tensorrt:0"`, ... It
/// may differ from the requested one unless `strict` was set: see
/// `segtool_fallback_reason`. NULL if `seg` is NULL.
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_provider(seg: *const segtool_segmenter) -> *const c_char {
    value_guard(ptr::null(), || Ok(segmenter_ref(seg)?.provider.as_ptr()))
}

/// The engine in use: `"onnxruntime"`, `"openvino"` or `"tract"`. NULL if `seg` is NULL.
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_engine_name(seg: *const segtool_segmenter) -> *const c_char {
    value_guard(ptr::null(), || Ok(segmenter_ref(seg)?.engine_name.as_ptr()))
}

/// Why the segmenter runs on another provider or engine than the first one requested
/// (e.g. CUDA failed to register, or ONNX Runtime was not found and tract is used); NULL
/// when it runs as requested (or `seg` is NULL: check `segtool_last_error`).
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_fallback_reason(seg: *const segtool_segmenter) -> *const c_char {
    value_guard(ptr::null(), || {
        Ok(segmenter_ref(seg)?
            .fallback
            .as_ref()
            .map_or(ptr::null(), |r| r.as_ptr()))
    })
}

/// Why `SEGTOOL_ENGINE_AUTO` chose the engine it did (`"auto chose openvino: the fastest
/// when timed on this machine at 512x512, 2 threads: ..."`); NULL when an engine was named
/// (or `seg` is NULL).
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_engine_choice(seg: *const segtool_segmenter) -> *const c_char {
    value_guard(ptr::null(), || {
        Ok(segmenter_ref(seg)?
            .engine_choice
            .as_ref()
            .map_or(ptr::null(), |r| r.as_ptr()))
    })
}

/// What the segmenter was opened with, as JSON keyed by the option names every front end
/// uses (`segtool_options`' fields, `fixed_size` as `[height, width]`): `{"engine":
/// "openvino", "providers": ["cpu"], "device": "CPU", "precision": "bf16", "hint":
/// "throughput", "streams": 2, "threads": 1, "card": null, "strict": true, "fixed_size":
/// null, "logits": false}`. The defaults are filled in; `streams` and `threads` are `null`
/// for the hint's and the engine's own (0 in the struct). Owned by the segmenter, valid
/// until `segtool_close`; NULL if `seg` is NULL.
///
/// # Safety
/// `seg` is NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn segtool_options_json(seg: *const segtool_segmenter) -> *const c_char {
    value_guard(ptr::null(), || Ok(segmenter_ref(seg)?.options.as_ptr()))
}
