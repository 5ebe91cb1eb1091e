//! The strings the C++ shims (`train/csrc/`) hand back: error messages and reports,
//! malloc'ed there and freed here. One reader for every shim call.

use std::ffi::{c_char, CStr};

extern "C" {
    fn segtool_c10d_free_string(s: *mut c_char);
}

/// The shim's malloc'ed string (NULL: none), freed.
pub(crate) fn take_string(s: *mut c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: the shim returns a malloc'ed NUL-terminated string that we now own.
    let out = unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned();
    unsafe { segtool_c10d_free_string(s) };
    Some(out)
}

/// A shim call's error string (NULL: success) as a `Result`, the string freed.
pub(crate) fn check(err: *mut c_char) -> anyhow::Result<()> {
    match take_string(err) {
        None => Ok(()),
        Some(message) => anyhow::bail!("{message}"),
    }
}
