//! Status codes and the FFI guard: [`segtool_status`], the crate's internal `Error`
//! (status plus message, converted from `RuntimeError`), the thread-local last-error
//! message, the `catch_unwind` wrapper every entry point runs under, and the helpers that
//! turn C string arguments into Rust ones, plus the two entry points that take no handle
//! (`segtool_last_error`, `segtool_version`). Kept apart because every other module of the
//! crate goes through it and none of it is specific to one handle type.

use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use segtool_runtime::{ModelFileError, RuntimeError};

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
    /// `segtool_live_next`: no frame was answered within the timeout (not a failure).
    SEGTOOL_TIMEOUT = 10,
    /// `segtool_live_next`: the stream was finished and every frame is out (not a
    /// failure).
    SEGTOOL_END = 11,
}

use segtool_status::*;

pub(crate) struct Error {
    pub(crate) status: segtool_status,
    pub(crate) message: String,
}

impl Error {
    pub(crate) fn new(status: segtool_status, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn null(name: &str) -> Self {
        Self::new(
            SEGTOOL_ERR_NULL_ARGUMENT,
            format!("{name} must not be NULL"),
        )
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(SEGTOOL_ERR_INVALID_ARGUMENT, message)
    }
}

impl From<RuntimeError> for Error {
    fn from(e: RuntimeError) -> Self {
        // The trailing `_` arm is deliberate: variants added to RuntimeError later map to a
        // generic inference error instead of breaking this crate's build.
        #[allow(unreachable_patterns)]
        let status = match &e {
            RuntimeError::File(ModelFileError::NotFound { .. }) => SEGTOOL_ERR_MODEL_NOT_FOUND,
            RuntimeError::File(ModelFileError::Io { .. }) => SEGTOOL_ERR_IO,
            RuntimeError::File(ModelFileError::Invalid { .. })
            | RuntimeError::File(ModelFileError::MissingSpec { .. })
            | RuntimeError::File(ModelFileError::InvalidSpec { .. })
            | RuntimeError::File(ModelFileError::Metadata { .. })
            | RuntimeError::Card { .. } => SEGTOOL_ERR_INVALID_MODEL,
            RuntimeError::InputShape { .. }
            | RuntimeError::Frame(_)
            | RuntimeError::Option { .. }
            | RuntimeError::AccuracyMode { .. } => SEGTOOL_ERR_INVALID_ARGUMENT,
            RuntimeError::FallbackRefused { .. } => SEGTOOL_ERR_PROVIDER_UNAVAILABLE,
            RuntimeError::OrtLibraryNotFound { .. }
            | RuntimeError::OpenVinoLibraryNotFound { .. }
            | RuntimeError::BackendUnavailable(_) => SEGTOOL_ERR_BACKEND_UNAVAILABLE,
            RuntimeError::OutputShape { .. }
            | RuntimeError::Ort(_)
            | RuntimeError::OpenVino(_)
            | RuntimeError::Tract(_) => SEGTOOL_ERR_INFERENCE,
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

pub(crate) fn status_guard(f: impl FnOnce() -> Result<(), Error>) -> segtool_status {
    guard((), f).1
}

pub(crate) fn value_guard<T>(on_error: T, f: impl FnOnce() -> Result<T, Error>) -> T {
    guard(on_error, f).0
}

/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn opt_str<'a>(p: *const c_char, name: &str) -> Result<Option<&'a str>, Error> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated by the caller's contract.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map(Some)
        .map_err(|_| Error::invalid(format!("{name} is not valid UTF-8")))
}

/// A handle's out-pointer: required, and set to NULL first, so a call that fails after
/// this leaves NULL there whatever failed.
///
/// # Safety
/// `out` is NULL or writable.
pub(crate) unsafe fn clear_out<T>(out: *mut *mut T) -> Result<(), Error> {
    if out.is_null() {
        return Err(Error::null("out"));
    }
    // SAFETY: non-null and writable (contract).
    unsafe { *out = std::ptr::null_mut() };
    Ok(())
}

/// Writes `value` through an optional out-pointer; NULL: the caller does not want it.
///
/// # Safety
/// `p` is NULL or writable.
pub(crate) unsafe fn write_if_asked<T>(p: *mut T, value: T) {
    if !p.is_null() {
        // SAFETY: non-null and writable (contract).
        unsafe { *p = value };
    }
}

/// Paths are taken as raw bytes on Unix, so non-UTF-8 file names work.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string valid for the call.
pub(crate) unsafe fn path_arg(p: *const c_char, name: &str) -> Result<PathBuf, Error> {
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
