//! C ABI for segtool: `libsegtool.so` plus `include/segtool.h`, so that C, C++ and ROS
//! nodes can run exported segtool (DANet) ONNX models through ONNX Runtime (CPU, CUDA,
//! TensorRT) or tract (pure Rust, CPU), with the same pre/post-processing as
//! `segtool_runtime::Segmenter`.
//!
//! The header is generated from this crate by cbindgen (`capi/cbindgen.toml`), which
//! follows the `mod` declarations below in order; the test `tests/it/header.rs` fails when
//! the checked-in copy is stale and rewrites it with
//! `SEGTOOL_BLESS=1 cargo test -p segtool-capi --test it -- header::`.
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
//!     opts.engine = SEGTOOL_ENGINE_AUTO;   /* the engine timed fastest here (cached) */
//!     opts.providers = "cuda,cpu";         /* ONNX Runtime providers, in preference order */
//!     opts.threads = 4;                    /* 0: the engine's own */
//!
//!     segtool_segmenter *seg = NULL;
//!     if (segtool_open(model, &opts, &seg) != SEGTOOL_OK) {
//!         fprintf(stderr, "segtool_open: %s\n", segtool_last_error());
//!         return 1;
//!     }
//!     printf("segtool %s on %s/%s, %u classes\n", segtool_version(),
//!            segtool_engine_name(seg), segtool_provider(seg), segtool_num_classes(seg));
//!     printf("options: %s\n", segtool_options_json(seg)); /* what arrived, as JSON */
//!
//!     segtool_result *res = NULL;
//!     if (segtool_segment(seg, rgb, w, h, step, &res) != SEGTOOL_OK) {
//!         fprintf(stderr, "segtool_segment: %s\n", segtool_last_error());
//!         segtool_close(seg);
//!         return 1;
//!     }
//!     const uint8_t *classes = segtool_result_class_map(res); /* w * h bytes, row-major */
//!     /* models of more than 256 classes: segtool_result_bits(res) is 16, read
//!        segtool_result_class_map16(res) (w * h uint16_t) instead */
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

// The declaration order of these modules is the order of the declarations in
// `include/segtool.h`: cbindgen walks them in source order, so they are kept in the order
// of the entry points in the header (and apart, so rustfmt does not sort them).
mod options;
// `segtool_open`, `segtool_close`, `segtool_segment`.
mod segmenter;
// `segtool_result_*`.
mod result;
// Accessors of an open segmenter.
mod info;
// `segtool_live_*`: the newest-frame stream.
mod live;
// Status codes, last error, version.
mod status;

pub use info::{
    segtool_class_name, segtool_engine_choice, segtool_engine_name, segtool_fallback_reason,
    segtool_num_classes, segtool_options_json, segtool_palette, segtool_provider,
};
pub use live::{
    segtool_live, segtool_live_add_source, segtool_live_close, segtool_live_counts,
    segtool_live_finish, segtool_live_finish_source, segtool_live_latency, segtool_live_next,
    segtool_live_next_source, segtool_live_open, segtool_live_options,
    segtool_live_options_default, segtool_live_source_stats, segtool_live_stats,
    segtool_live_submit, segtool_live_submit_source,
};
pub use options::{
    segtool_engine, segtool_options, segtool_options_default, SEGTOOL_ENGINE_AUTO,
    SEGTOOL_ENGINE_OPENVINO, SEGTOOL_ENGINE_ORT, SEGTOOL_ENGINE_TRACT,
};
pub use result::{
    segtool_result, segtool_result_bits, segtool_result_class_map, segtool_result_class_map16,
    segtool_result_free, segtool_result_height, segtool_result_logits, segtool_result_width,
};
pub use segmenter::{
    segtool_close, segtool_open, segtool_segment, segtool_segmenter, SEGTOOL_MAX_PIXELS,
};
pub use status::{segtool_last_error, segtool_status, segtool_version};

const _: () = {
    const fn shareable<T: Send + Sync>() {}
    shareable::<segtool_segmenter>();
    shareable::<segtool_result>();
    shareable::<segtool_live>();
};
