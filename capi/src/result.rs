//! The result handle: the opaque [`segtool_result`] (one class map, independent of the
//! segmenter that produced it) and its accessors `segtool_result_width`,
//! `segtool_result_height`, `segtool_result_class_map` and `segtool_result_free`.

use std::ptr;

use crate::status::{status_guard, value_guard, Error};

/// The class map of one image (opaque).
pub struct segtool_result {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) class_map: Vec<u8>,
}

fn result_ref<'a>(res: *const segtool_result) -> Result<&'a segtool_result, Error> {
    // SAFETY: a non-null handle comes from `segtool_segment` and is not freed yet.
    unsafe { res.as_ref() }.ok_or_else(|| Error::null("result"))
}

/// Width of the class map in pixels (the input image's width); 0 if `res` is NULL.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_width(res: *const segtool_result) -> u32 {
    value_guard(0, || Ok(result_ref(res)?.width))
}

/// Height of the class map in pixels; 0 if `res` is NULL.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_height(res: *const segtool_result) -> u32 {
    value_guard(0, || Ok(result_ref(res)?.height))
}

/// The class index of every pixel: `width * height` bytes, row-major with no padding
/// (pixel `(x, y)` at `y * width + x`). Owned by the result; NULL if `res` is NULL.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_class_map(res: *const segtool_result) -> *const u8 {
    value_guard(ptr::null(), || Ok(result_ref(res)?.class_map.as_ptr()))
}

/// Frees a result. NULL is a no-op.
///
/// # Safety
/// `res` is NULL or a result from `segtool_segment` not yet freed.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_free(res: *mut segtool_result) {
    status_guard(|| {
        if !res.is_null() {
            // SAFETY: from `Box::into_raw` in `segtool_segment`, freed once (contract).
            drop(unsafe { Box::from_raw(res) });
        }
        Ok(())
    });
}
