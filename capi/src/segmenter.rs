//! The segmenter handle: the opaque [`segtool_segmenter`], built from a model path and
//! `segtool_options` (read as the runtime's `SegmenterOptions`) through the runtime's
//! `SegmenterBuilder` (engine choice, fallbacks and `strict` are the builder's), `segtool_open`,
//! `segtool_close` and `segtool_segment` with the validation and copy of the caller's RGB
//! buffer. The per-model accessors live in `info.rs`, the class map in `result.rs`.

use std::ffi::{c_char, CString};
use std::path::Path;
use std::sync::Mutex;

use image::RgbImage;
use segtool_model_spec::ModelSpec;
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{Frame, PixelFormat, Segmenter, SegmenterBuilder};

use crate::options::{segtool_options, segtool_options_default};
use crate::result::{segtool_result, Logits};
use crate::status::segtool_status::{self, *};
use crate::status::{clear_out, opt_str, path_arg, status_guard, Error};

/// A loaded model with its engine (opaque).
pub struct segtool_segmenter {
    pub(crate) inner: Mutex<Segmenter>,
    pub(crate) class_names: Vec<CString>,
    pub(crate) palette: Vec<[u8; 3]>,
    pub(crate) engine_name: CString,
    pub(crate) provider: CString,
    pub(crate) fallback: Option<CString>,
    pub(crate) engine_choice: Option<CString>,
    /// What it was opened with, as JSON (`segtool_options_json`).
    pub(crate) options: CString,
}

/// Largest image accepted by `segtool_segment`, in pixels (a guard against garbage sizes;
/// 16384 x 16384).
pub const SEGTOOL_MAX_PIXELS: u64 = 1 << 28;

pub(crate) fn segmenter_ref<'a>(
    seg: *const segtool_segmenter,
) -> Result<&'a segtool_segmenter, Error> {
    // SAFETY: a non-null handle comes from `segtool_open` and is not closed yet (contract).
    unsafe { seg.as_ref() }.ok_or_else(|| Error::null("segmenter"))
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NUL bytes were removed")
}

/// The builder `opts` describe: the runtime's options, and where ONNX Runtime's library
/// is (not an option); the C ABI adds no logic of its own.
pub(crate) fn builder(path: &Path, opts: &segtool_options) -> Result<SegmenterBuilder, Error> {
    // SAFETY: the caller's contract for `segtool_options` strings.
    let options = unsafe { opts.runtime_options() }?;
    let mut builder = Segmenter::builder(path).options(&options)?;
    // SAFETY: as above.
    if let Some(lib) =
        unsafe { opt_str(opts.ort_library, "ort_library") }?.filter(|p| !p.is_empty())
    {
        builder = builder.ort_library(lib);
    }
    Ok(builder)
}

pub(crate) fn open(path: &Path, opts: &segtool_options) -> Result<segtool_segmenter, Error> {
    let segmenter = builder(path, opts)?.open()?;
    let engine = segmenter.engine();
    let fallback = segmenter.fallback_summary();
    let spec: &ModelSpec = segmenter.spec();
    let options = serde_json::to_string(segmenter.options())
        .map_err(|e| Error::new(SEGTOOL_ERR_INFERENCE, format!("the options as JSON: {e}")))?;
    Ok(segtool_segmenter {
        class_names: spec.classes.iter().map(|c| c_string(c)).collect(),
        palette: spec.palette.clone(),
        engine_name: c_string(engine.name()),
        provider: c_string(engine.provider()),
        fallback: fallback.as_deref().map(c_string),
        engine_choice: segmenter.engine_choice().map(c_string),
        options: c_string(&options),
        inner: Mutex::new(segmenter),
    })
}

/// Loads the model at `model_path` (an ONNX file written by `segtool export`) and builds
/// its engine. `opts` may be NULL (defaults). On success `*out` receives a handle to free
/// with `segtool_close`; on failure `*out` is set to NULL.
///
/// # Safety
/// `model_path` is NULL or a NUL-terminated string; `opts` is NULL or points to a valid
/// `segtool_options` whose strings are NULL or NUL-terminated; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_open(
    model_path: *const c_char,
    opts: *const segtool_options,
    out: *mut *mut segtool_segmenter,
) -> segtool_status {
    status_guard(|| {
        // SAFETY: `out` is NULL or writable (contract).
        unsafe { clear_out(out) }?;
        // SAFETY: contract above.
        let path = unsafe { path_arg(model_path, "model_path") }?;
        let opts = if opts.is_null() {
            segtool_options_default()
        } else {
            // SAFETY: non-null and valid (contract).
            unsafe { *opts }
        };
        let seg = open(&path, &opts)?;
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(seg)) };
        Ok(())
    })
}

/// Frees a segmenter. NULL is a no-op. No other thread may be using it.
///
/// # Safety
/// `seg` is NULL or a handle from `segtool_open` not yet closed.
#[no_mangle]
pub unsafe extern "C" fn segtool_close(seg: *mut segtool_segmenter) {
    status_guard(|| {
        if !seg.is_null() {
            // SAFETY: from `Box::into_raw` in `segtool_open`, closed once (contract).
            drop(unsafe { Box::from_raw(seg) });
        }
        Ok(())
    });
}

// ---------------------------------------------------------------------------------------
// Segmenting.

/// Segments one packed 8-bit RGB image (`rgb8`: R, G, B per pixel, rows top to bottom).
/// `stride_bytes` is the distance between rows (ROS `step`); 0 means `width * 3`.
/// Normalisation, inference and argmax are those of `segtool_runtime::Segmenter`. On
/// success `*out` receives a result to free with `segtool_result_free`; on failure NULL.
///
/// # Safety
/// `seg` is NULL or a live handle; `rgb` is NULL or points to at least
/// `stride * (height - 1) + width * 3` readable bytes; `out` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn segtool_segment(
    seg: *mut segtool_segmenter,
    rgb: *const u8,
    width: u32,
    height: u32,
    stride_bytes: u32,
    out: *mut *mut segtool_result,
) -> segtool_status {
    status_guard(|| {
        // SAFETY: `out` is NULL or writable (contract).
        unsafe { clear_out(out) }?;
        let seg = segmenter_ref(seg)?;
        if rgb.is_null() {
            return Err(Error::null("rgb"));
        }
        let image = copy_image(rgb, width, height, stride_bytes)?;
        let segmented = {
            // A panic while running leaves the engine usable for the next image (tract and
            // ONNX Runtime keep no half-updated state we rely on), so ignore poisoning.
            let mut inner = seg.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.segment(&image)?
        };
        let mask = segmented.mask;
        if mask.dim() != (height as usize, width as usize) {
            return Err(Error::new(
                SEGTOOL_ERR_INFERENCE,
                format!(
                    "class map is {:?}, expected ({height}, {width})",
                    mask.dim()
                ),
            ));
        }
        // `iter` walks the array in logical (row-major) order, whatever its strides.
        let logits = segmented
            .logits
            .map(|l| Logits::new(l.dim(), l.iter().copied().collect()));
        let result = segtool_result::new(mask, logits);
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(result)) };
        Ok(())
    })
}

/// Validates the sizes and copies the (possibly padded) rows into a packed image.
pub(crate) fn copy_image(
    rgb: *const u8,
    width: u32,
    height: u32,
    stride: u32,
) -> Result<RgbImage, Error> {
    if width == 0 || height == 0 {
        return Err(Error::invalid(format!(
            "image size {width}x{height}: width and height must be positive"
        )));
    }
    let pixels = u64::from(width) * u64::from(height);
    if pixels > SEGTOOL_MAX_PIXELS {
        return Err(Error::invalid(format!(
            "image {width}x{height} has {pixels} pixels, more than the {SEGTOOL_MAX_PIXELS} \
             accepted"
        )));
    }
    let row = u64::from(width) * 3;
    let stride = if stride == 0 { row } else { u64::from(stride) };
    if stride < row {
        return Err(Error::invalid(format!(
            "stride_bytes {stride} is shorter than one row of {width} RGB pixels ({row} bytes)"
        )));
    }
    let total = usize::try_from(stride * u64::from(height - 1) + row)
        .map_err(|_| Error::invalid("image too large"))?;
    // SAFETY: the caller guarantees `total` readable bytes at `rgb` (non-null, checked).
    let src = unsafe { std::slice::from_raw_parts(rgb, total) };
    let frame = Frame::new(src, width, height, stride as usize, PixelFormat::Rgb8)
        .map_err(|e| Error::invalid(e.to_string()))?;
    Ok(frame.to_rgb())
}
