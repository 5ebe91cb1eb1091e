//! The result handle: the opaque [`segtool_result`] (one class map, and the logits when
//! asked for; independent of the segmenter that produced it) and its accessors
//! `segtool_result_width`, `segtool_result_height`, `segtool_result_class_map`,
//! `segtool_result_logits` and `segtool_result_free`.

use std::ptr;

use crate::status::{status_guard, value_guard, Error};

/// The class map of one image (opaque).
pub struct segtool_result {
    pub(crate) width: u32,
    pub(crate) height: u32,
    pub(crate) class_map: Vec<u8>,
    /// With the `logits` option.
    pub(crate) logits: Option<Logits>,
}

/// One image's logits, `classes x height x width` floats, row-major.
pub(crate) struct Logits {
    dims: [u32; 3],
    values: Vec<f32>,
}

impl Logits {
    /// `values` in row-major order, of `(classes, height, width)`.
    pub(crate) fn new((c, h, w): (usize, usize, usize), values: Vec<f32>) -> Self {
        debug_assert_eq!(values.len(), c * h * w);
        Self {
            dims: [c as u32, h as u32, w as u32],
            values,
        }
    }
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

/// The image's logits, `classes * height * width` floats, row-major (class `c` at row
/// `y`, column `x` is at `(c * height + y) * width + x`), at the size the model outputs
/// them, which may be smaller than the image's. Writes the three sizes to those of
/// `classes`, `height` and `width` that are not NULL. Owned by the result. NULL when the
/// segmenter was opened without `segtool_options.logits` or the model outputs class
/// maps (`--argmax`), the sizes then 0, or when `res` is NULL.
///
/// # Safety
/// `res` is NULL or a live result; `classes`, `height` and `width` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_logits(
    res: *const segtool_result,
    classes: *mut u32,
    height: *mut u32,
    width: *mut u32,
) -> *const f32 {
    value_guard(ptr::null(), || {
        let logits = result_ref(res)?.logits.as_ref();
        let dims = logits.map_or([0; 3], |l| l.dims);
        for (out, value) in [classes, height, width].into_iter().zip(dims) {
            // SAFETY: NULL or writable (contract).
            if let Some(out) = unsafe { out.as_mut() } {
                *out = value;
            }
        }
        Ok(logits.map_or(ptr::null(), |l| l.values.as_ptr()))
    })
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
