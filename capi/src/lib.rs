//! C ABI for segtool: `libsegtool.so` plus `include/segtool.h`, so that C, C++ and ROS
//! nodes can run exported segtool (DANet) ONNX models through ONNX Runtime (CPU, CUDA,
//! TensorRT) or tract (pure Rust, CPU), with the same pre/post-processing as
//! `segtool_runtime::Segmenter`.
//!
//! The header is generated from this file by cbindgen (`capi/cbindgen.toml`); the test
//! `tests/header.rs` fails when the checked-in copy is stale and rewrites it with
//! `SEGTOOL_BLESS=1 cargo test -p segtool-capi --test header`.
//!
//! # Conventions
//!
//! - Handles are opaque: [`segtool_segmenter`] (one loaded model) and [`segtool_result`]
//!   (one class map). Free them with [`segtool_close`] and [`segtool_result_free`]; both
//!   accept `NULL`.
//! - Fallible calls return a [`segtool_status`]; `SEGTOOL_OK` (0) is success. On failure
//!   [`segtool_last_error`] gives a message for humans (it names the file, the expected
//!   and actual sizes, the ONNX Runtime paths tried, ...). The message is thread-local and
//!   valid until the next `segtool_*` call on the same thread; every call except
//!   `segtool_last_error` and `segtool_version` first clears it.
//! - Accessors that return a value return `0` / `NULL` on bad arguments (and set the
//!   message).
//! - Null pointers, zero or inconsistent sizes and out-of-range indices are reported as
//!   errors, never as crashes. No Rust panic crosses the boundary: every entry point runs
//!   under `catch_unwind` and turns a panic into `SEGTOOL_ERR_PANIC`.
//! - Strings returned by the library are UTF-8, NUL-terminated and owned by the library.
//!
//! # Example (C)
//!
//! ```c
//! #include <stdio.h>
//! #include <segtool.h>
//!
//! int run(const char *model, const uint8_t *rgb, uint32_t w, uint32_t h, uint32_t step) {
//!     segtool_options opts = segtool_options_default();
//!     opts.engine = SEGTOOL_ENGINE_AUTO;   /* ONNX Runtime if its library loads, else tract */
//!     opts.providers = "cuda,cpu";         /* ONNX Runtime providers, in preference order */
//!     opts.intra_threads = 4;
//!
//!     segtool_segmenter *seg = NULL;
//!     if (segtool_open(model, &opts, &seg) != SEGTOOL_OK) {
//!         fprintf(stderr, "segtool_open: %s\n", segtool_last_error());
//!         return 1;
//!     }
//!     printf("segtool %s on %s/%s, %u classes\n", segtool_version(),
//!            segtool_engine_name(seg), segtool_provider(seg), segtool_num_classes(seg));
//!
//!     segtool_result *res = NULL;
//!     if (segtool_segment(seg, rgb, w, h, step, &res) != SEGTOOL_OK) {
//!         fprintf(stderr, "segtool_segment: %s\n", segtool_last_error());
//!         segtool_close(seg);
//!         return 1;
//!     }
//!     const uint8_t *classes = segtool_result_class_map(res); /* w * h bytes, row-major */
//!     uint8_t colour[3];
//!     segtool_palette(seg, classes[0], colour);
//!     printf("pixel (0,0): %s\n", segtool_class_name(seg, classes[0]));
//!
//!     segtool_result_free(res);
//!     segtool_close(seg);
//!     return 0;
//! }
//! ```
//!
//! Build: `cargo build --release -p segtool-capi`, then
//! `cc app.c -I capi/include -L target/release -lsegtool -Wl,-rpath,$PWD/target/release`.
//!
//! # ROS / C++ users
//!
//! - Link: `-lsegtool` (`target_link_libraries(node segtool)` with the library directory
//!   in `link_directories` or an `IMPORTED` target) and add `capi/include` to the include
//!   path. The header has `extern "C"` guards, so it is included as is from C++.
//!   `libsegtool.so` has no link-time dependency on ONNX Runtime: it is opened at run time
//!   from `segtool_options.ort_library`, `ORT_DYLIB_PATH`, the path recorded at build time
//!   or the system library path, in that order. With `SEGTOOL_ENGINE_AUTO` a machine
//!   without ONNX Runtime falls back to tract (see [`segtool_fallback_reason`]).
//! - `sensor_msgs/Image`: pass `msg.data.data()`, `msg.width`, `msg.height` and
//!   `msg.step` as `stride_bytes`; the encoding must be `rgb8` (convert `bgr8` first, e.g.
//!   with cv_bridge). The class map is `width * height` bytes, one row after the other
//!   (`mono8`-compatible, `step = width`).
//! - Threads: **every function is thread-safe.** Calls to [`segtool_segment`] on the same
//!   segmenter are serialised by an internal mutex (the engines need exclusive access
//!   while running), so for parallel inference open one segmenter per thread (e.g. one
//!   per callback group / worker); the accessors (`segtool_num_classes`,
//!   `segtool_class_name`, `segtool_palette`, `segtool_provider`, ...) never wait on that
//!   mutex. A segmenter may be opened on one thread and used on others; it must not be
//!   closed while another thread still uses it. A result belongs to whoever holds it and
//!   is independent of its segmenter (it stays valid after `segtool_close`).
//! - The error message is per thread: read it on the thread whose call failed.

#![allow(non_camel_case_types)]
#![deny(unsafe_op_in_unsafe_fn)]

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Mutex;

use image::RgbImage;
use segtool_core::ModelSpec;
use segtool_runtime::{Backend, OrtOptions, Provider, RuntimeError, Segmenter};

/// Status code of every fallible call. `SEGTOOL_OK` (0) is success; for anything else
/// `segtool_last_error()` says what went wrong.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum segtool_status {
    /// Success.
    SEGTOOL_OK = 0,
    /// A required pointer argument was NULL.
    SEGTOOL_ERR_NULL_ARGUMENT = 1,
    /// An argument is out of range or inconsistent (zero size, stride shorter than a row,
    /// class index too large, unknown engine, unparsable provider list, non-UTF-8 string).
    SEGTOOL_ERR_INVALID_ARGUMENT = 2,
    /// The model file does not exist.
    SEGTOOL_ERR_MODEL_NOT_FOUND = 3,
    /// The model file exists but could not be read.
    SEGTOOL_ERR_IO = 4,
    /// The file is not a loadable segtool ONNX model (garbage, truncated, no or bad spec).
    SEGTOOL_ERR_INVALID_MODEL = 5,
    /// The requested engine is not available (ONNX Runtime library not found).
    SEGTOOL_ERR_BACKEND_UNAVAILABLE = 6,
    /// `strict` was set and the first requested execution provider could not be used.
    SEGTOOL_ERR_PROVIDER_UNAVAILABLE = 7,
    /// The engine failed while running the model, or the model's output is malformed.
    SEGTOOL_ERR_INFERENCE = 8,
    /// An internal error (a caught Rust panic). The handle involved should be closed.
    SEGTOOL_ERR_PANIC = 9,
}

use segtool_status::*;

/// Which inference engine `segtool_open` builds (one of the `SEGTOOL_ENGINE_*` values).
pub type segtool_engine = i32;
/// ONNX Runtime when its library can be loaded, tract otherwise (the default).
pub const SEGTOOL_ENGINE_AUTO: segtool_engine = 0;
/// ONNX Runtime (CPU, CUDA, TensorRT); fails if `libonnxruntime` cannot be loaded.
pub const SEGTOOL_ENGINE_ORT: segtool_engine = 1;
/// tract: pure Rust, CPU only, no native dependency.
pub const SEGTOOL_ENGINE_TRACT: segtool_engine = 2;

/// Options for `segtool_open`. Start from `segtool_options_default()` and change fields;
/// passing NULL to `segtool_open` means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct segtool_options {
    /// `SEGTOOL_ENGINE_AUTO` (default), `SEGTOOL_ENGINE_ORT` or `SEGTOOL_ENGINE_TRACT`.
    pub engine: segtool_engine,
    /// ONNX Runtime execution providers in preference order, comma separated:
    /// `"cuda,cpu"`, `"cuda:1"`, `"tensorrt-fp16:0,cuda:0"`. CPU is always the last
    /// resort. NULL or `""` means CPU only. tract always runs on the CPU.
    pub providers: *const c_char,
    /// Threads inside one ONNX Runtime operator; 0 (default) lets ONNX Runtime decide.
    /// Ignored by tract.
    pub intra_threads: u32,
    /// Fail with `SEGTOOL_ERR_PROVIDER_UNAVAILABLE` instead of falling back when the first
    /// requested provider cannot be used (another ONNX Runtime provider, or tract with
    /// `SEGTOOL_ENGINE_AUTO`). Default false: fall back and report it through
    /// `segtool_fallback_reason`.
    pub strict: bool,
    /// Full path of `libonnxruntime.so`; NULL (default) searches `ORT_DYLIB_PATH`, the
    /// path recorded at build time, then the system library path. ONNX Runtime is loaded
    /// once per process: the first segmenter that loads it decides which library is used.
    pub ort_library: *const c_char,
}

/// A loaded model with its engine (opaque).
pub struct segtool_segmenter {
    inner: Mutex<Segmenter>,
    class_names: Vec<CString>,
    palette: Vec<[u8; 3]>,
    engine_name: CString,
    provider: CString,
    fallback: Option<CString>,
}

/// The class map of one image (opaque).
pub struct segtool_result {
    width: u32,
    height: u32,
    class_map: Vec<u8>,
}

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<segtool_segmenter>();
    shareable::<segtool_result>();
};

/// Largest image accepted by `segtool_segment`, in pixels (a guard against garbage sizes;
/// 16384 x 16384).
pub const SEGTOOL_MAX_PIXELS: u64 = 1 << 28;

// ---------------------------------------------------------------------------------------
// Errors and the FFI guard.

struct Error {
    status: segtool_status,
    message: String,
}

impl Error {
    fn new(status: segtool_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    fn null(name: &str) -> Self {
        Self::new(
            SEGTOOL_ERR_NULL_ARGUMENT,
            format!("{name} must not be NULL"),
        )
    }

    fn invalid(message: impl Into<String>) -> Self {
        Self::new(SEGTOOL_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        // The trailing `_` arm is deliberate: variants added to RuntimeError later map to a
        // generic inference error instead of breaking this crate's build.
        #[allow(unreachable_patterns)]
        let status = match &e {
            RuntimeError::ModelNotFound { .. } => SEGTOOL_ERR_MODEL_NOT_FOUND,
            RuntimeError::Io { .. } => SEGTOOL_ERR_IO,
            RuntimeError::InvalidModel { .. }
            | RuntimeError::MissingSpec { .. }
            | RuntimeError::InvalidSpec { .. } => SEGTOOL_ERR_INVALID_MODEL,
            RuntimeError::InputShape { .. } => SEGTOOL_ERR_INVALID_ARGUMENT,
            RuntimeError::OrtLibraryNotFound { .. } | RuntimeError::BackendUnavailable(_) => {
                SEGTOOL_ERR_BACKEND_UNAVAILABLE
            }
            RuntimeError::OutputShape { .. } | RuntimeError::Ort(_) | RuntimeError::Tract(_) => {
                SEGTOOL_ERR_INFERENCE
            }
            _ => SEGTOOL_ERR_INFERENCE,
        };
        Error::new(status, e.to_string())
    }
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: Option<String>) {
    let message =
        message.map(|m| CString::new(m.replace('\0', "\\0")).expect("NUL bytes were replaced"));
    // `try_with`: during thread teardown the slot may already be gone; drop the message.
    let _ = LAST_ERROR.try_with(|slot| {
        if let Ok(mut slot) = slot.try_borrow_mut() {
            *slot = message;
        }
    });
}

fn panic_message(payload: &(dyn Any + Send)) -> String {
    let what = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("unknown panic payload");
    format!("internal error (panic): {what}")
}

/// Runs one entry point: clears the last error, catches panics, records failures.
fn guard<T>(on_error: T, f: impl FnOnce() -> Result<T, Error>) -> (T, segtool_status) {
    set_last_error(None);
    let outcome = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let message = panic_message(payload.as_ref());
        // Dropping a payload can itself panic; leak it rather than unwind into C.
        std::mem::forget(payload);
        Err(Error::new(SEGTOOL_ERR_PANIC, message))
    });
    match outcome {
        Ok(v) => (v, SEGTOOL_OK),
        Err(e) => {
            set_last_error(Some(e.message));
            (on_error, e.status)
        }
    }
}

fn status_guard(f: impl FnOnce() -> Result<(), Error>) -> segtool_status {
    guard((), f).1
}

fn value_guard<T>(on_error: T, f: impl FnOnce() -> Result<T, Error>) -> T {
    guard(on_error, f).0
}

/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn opt_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::invalid(format!("{name} is not valid UTF-8")))
}

/// Paths are taken as raw bytes on Unix, so non-UTF-8 file names work.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
unsafe fn path_arg(p: *const c_char, name: &str) -> Result<PathBuf, Error> {
    if p.is_null() {
        return Err(Error::null(name));
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() {
        return Err(Error::invalid(format!("{name} is empty")));
    }
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        Ok(PathBuf::from(std::ffi::OsStr::from_bytes(bytes)))
    }
    #[cfg(not(unix))]
    {
        std::str::from_utf8(bytes)
            .map(PathBuf::from)
            .map_err(|_| Error::invalid(format!("{name} is not valid UTF-8")))
    }
}

fn segmenter_ref<'a>(seg: *const segtool_segmenter) -> Result<&'a segtool_segmenter, Error> {
    // SAFETY: a non-null handle comes from `segtool_open` and is not closed yet (contract).
    unsafe { seg.as_ref() }.ok_or_else(|| Error::null("segmenter"))
}

fn result_ref<'a>(res: *const segtool_result) -> Result<&'a segtool_result, Error> {
    // SAFETY: a non-null handle comes from `segtool_segment` and is not freed yet.
    unsafe { res.as_ref() }.ok_or_else(|| Error::null("result"))
}

fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "")).expect("NUL bytes were removed")
}

// ---------------------------------------------------------------------------------------
// Opening.

fn parse_providers(list: Option<&str>) -> Result<Vec<Provider>, Error> {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<Provider>().map_err(Error::invalid))
        .collect()
}

fn open(path: &Path, opts: &segtool_options) -> Result<segtool_segmenter, Error> {
    // SAFETY: the caller's contract for `segtool_options` strings.
    let providers = parse_providers(unsafe { opt_str(opts.providers, "providers") }?)?;
    let ort_library = match unsafe { opt_str(opts.ort_library, "ort_library") }? {
        Some(p) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => None,
    };
    let mut ort = OrtOptions::new().with_execution_providers(providers.clone());
    if opts.intra_threads > 0 {
        ort = ort.with_intra_threads(opts.intra_threads as usize);
    }
    if let Some(lib) = ort_library {
        ort = ort.with_dylib_path(lib);
    }
    let (segmenter, engine_fallback) = match opts.engine {
        SEGTOOL_ENGINE_TRACT => (Segmenter::open(path, Backend::Tract)?, None),
        SEGTOOL_ENGINE_ORT => (Segmenter::open(path, Backend::Ort(ort))?, None),
        SEGTOOL_ENGINE_AUTO => match Segmenter::open(path, Backend::Ort(ort)) {
            Ok(s) => (s, None),
            Err(e @ RuntimeError::OrtLibraryNotFound { .. }) => (
                Segmenter::open(path, Backend::Tract)?,
                Some(format!("using tract: {e}")),
            ),
            Err(e) => return Err(e.into()),
        },
        other => {
            return Err(Error::invalid(format!(
                "unknown engine {other} (SEGTOOL_ENGINE_AUTO = 0, SEGTOOL_ENGINE_ORT = 1, \
                 SEGTOOL_ENGINE_TRACT = 2)"
            )))
        }
    };

    let engine = segmenter.engine();
    let fallback = engine_fallback.or_else(|| engine.fallback_reason().map(str::to_owned));
    let wanted = providers.first().unwrap_or(&Provider::Cpu).to_string();
    if opts.strict && engine.provider() != wanted {
        return Err(Error::new(
            SEGTOOL_ERR_PROVIDER_UNAVAILABLE,
            format!(
                "strict: {} was requested for {} but {} would run on {}{}",
                wanted,
                path.display(),
                engine.name(),
                engine.provider(),
                fallback.map(|r| format!(" ({r})")).unwrap_or_default()
            ),
        ));
    }
    let spec: &ModelSpec = segmenter.spec();
    Ok(segtool_segmenter {
        class_names: spec.classes.iter().map(|c| c_string(c)).collect(),
        palette: spec.palette.clone(),
        engine_name: c_string(engine.name()),
        provider: c_string(engine.provider()),
        fallback: fallback.as_deref().map(c_string),
        inner: Mutex::new(segmenter),
    })
}

/// The default options: `SEGTOOL_ENGINE_AUTO`, CPU only, ONNX Runtime's thread default,
/// not strict, ONNX Runtime library from the usual search path.
#[no_mangle]
pub extern "C" fn segtool_options_default() -> segtool_options {
    segtool_options {
        engine: SEGTOOL_ENGINE_AUTO,
        providers: ptr::null(),
        intra_threads: 0,
        strict: false,
        ort_library: ptr::null(),
    }
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
        if out.is_null() {
            return Err(Error::null("out"));
        }
        // SAFETY: `out` is non-null and writable (contract).
        unsafe { *out = ptr::null_mut() };
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
        if out.is_null() {
            return Err(Error::null("out"));
        }
        // SAFETY: non-null and writable (contract).
        unsafe { *out = ptr::null_mut() };
        let seg = segmenter_ref(seg)?;
        if rgb.is_null() {
            return Err(Error::null("rgb"));
        }
        let image = copy_image(rgb, width, height, stride_bytes)?;
        let mask = {
            // A panic while running leaves the engine usable for the next image (tract and
            // ONNX Runtime keep no half-updated state we rely on), so ignore poisoning.
            let mut inner = seg.inner.lock().unwrap_or_else(|e| e.into_inner());
            inner.segment(&image)?.mask
        };
        if mask.dim() != (height as usize, width as usize) {
            return Err(Error::new(
                SEGTOOL_ERR_INFERENCE,
                format!(
                    "class map is {:?}, expected ({height}, {width})",
                    mask.dim()
                ),
            ));
        }
        let result = segtool_result {
            width,
            height,
            class_map: mask.iter().copied().collect(),
        };
        // SAFETY: as above.
        unsafe { *out = Box::into_raw(Box::new(result)) };
        Ok(())
    })
}

/// Validates the sizes and copies the (possibly padded) rows into a packed image.
fn copy_image(rgb: *const u8, width: u32, height: u32, stride: u32) -> Result<RgbImage, Error> {
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
    let total = stride * u64::from(height - 1) + row;
    let (row, stride, total) = (
        usize::try_from(row).map_err(|_| Error::invalid("image too large"))?,
        usize::try_from(stride).map_err(|_| Error::invalid("image too large"))?,
        usize::try_from(total).map_err(|_| Error::invalid("image too large"))?,
    );
    // SAFETY: the caller guarantees `total` readable bytes at `rgb` (non-null, checked).
    let src = unsafe { std::slice::from_raw_parts(rgb, total) };
    let mut packed = Vec::with_capacity(row * height as usize);
    for y in 0..height as usize {
        packed.extend_from_slice(&src[y * stride..y * stride + row]);
    }
    Ok(RgbImage::from_raw(width, height, packed).expect("buffer is width * height * 3"))
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

// ---------------------------------------------------------------------------------------
// Model information.

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

/// The engine in use: `"onnxruntime"` or `"tract"`. NULL if `seg` is NULL.
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

// ---------------------------------------------------------------------------------------
// Library information.

/// The message of the last failed call on this thread, or `""` if the last call
/// succeeded. Valid until the next `segtool_*` call on this thread. Never NULL.
#[no_mangle]
pub extern "C" fn segtool_last_error() -> *const c_char {
    static EMPTY: &CStr = c"";
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|slot| match slot.try_borrow() {
                // The CString's heap buffer does not move while it stays in the slot.
                Ok(msg) => msg.as_ref().map_or(EMPTY.as_ptr(), |m| m.as_ptr()),
                Err(_) => EMPTY.as_ptr(),
            })
            .unwrap_or(EMPTY.as_ptr())
    })
    .unwrap_or(EMPTY.as_ptr())
}

/// The library version (`"0.1.0"`); a static string.
#[no_mangle]
pub extern "C" fn segtool_version() -> *const c_char {
    const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr().cast()
}
