//! The result handle: the opaque [`segtool_result`] (one class map, and the logits when
//! asked for; independent of the segmenter that produced it) and its accessors
//! `segtool_result_width`, `segtool_result_height`, `segtool_result_bits`,
//! `segtool_result_class_map`, `segtool_result_class_map16`, `segtool_result_logits` and
//! `segtool_result_free`.

use std::ptr;
use std::sync::OnceLock;

use segtool_runtime::ClassMap;

use crate::status::{status_guard, value_guard, Error};

/// The class map of one image (opaque).
pub struct segtool_result {
    pub(crate) width: u32,
    pub(crate) height: u32,
    /// The runtime's ids, row-major: `u8` for a model of at most 256 classes, `u16` above.
    class_map: ClassMap,
    /// The `u8` ids widened, made on the first `segtool_result_class_map16`.
    widened: OnceLock<Vec<u16>>,
    /// With the `logits` option.
    pub(crate) logits: Option<Logits>,
}

impl segtool_result {
    /// A result holding `mask` (in standard layout: its rows are handed out as they are).
    pub(crate) fn new(mask: ClassMap, logits: Option<Logits>) -> Self {
        let (height, width) = mask.dim();
        let class_map = match mask {
            ClassMap::U8(m) => ClassMap::U8(m.as_standard_layout().into_owned()),
            ClassMap::U16(m) => ClassMap::U16(m.as_standard_layout().into_owned()),
        };
        Self {
            width: width as u32,
            height: height as u32,
            class_map,
            widened: OnceLock::new(),
            logits,
        }
    }
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

/// Bits per class index of the result: 8 for a model of at most 256 classes (read them
/// with `segtool_result_class_map`), 16 above (`segtool_result_class_map16`); 0 if `res`
/// is NULL.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_bits(res: *const segtool_result) -> u32 {
    value_guard(0, || Ok(result_ref(res)?.class_map.bits()))
}

/// The class index of every pixel: `width * height` bytes, row-major with no padding
/// (pixel `(x, y)` at `y * width + x`). Owned by the result. NULL if `res` is NULL, or
/// when the model has more than 256 classes (`segtool_result_bits` is 16): then read
/// `segtool_result_class_map16`.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_class_map(res: *const segtool_result) -> *const u8 {
    value_guard(ptr::null(), || {
        let res = result_ref(res)?;
        Ok(res.class_map.as_u8().map_or(ptr::null(), |m| m.as_ptr()))
    })
}

/// The class index of every pixel as 16 bits: `width * height` `uint16_t`, row-major with
/// no padding (pixel `(x, y)` at `y * width + x`), whatever the model's class count (the
/// indices of a model of at most 256 classes are widened on the first call). Owned by
/// the result; NULL if `res` is NULL.
///
/// # Safety
/// `res` is NULL or a live result.
#[no_mangle]
pub unsafe extern "C" fn segtool_result_class_map16(res: *const segtool_result) -> *const u16 {
    value_guard(ptr::null(), || {
        let res = result_ref(res)?;
        Ok(match &res.class_map {
            ClassMap::U16(m) => m.as_ptr(),
            ClassMap::U8(m) => res
                .widened
                .get_or_init(|| m.iter().map(|&c| u16::from(c)).collect())
                .as_ptr(),
        })
    })
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
