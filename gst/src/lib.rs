//! `libgstsegtool.so`: a GStreamer plugin with one element, `segtoolseg`, that runs an
//! exported segtool model (ONNX Runtime, or tract) on every video frame.
//!
//! ```text
//! gst-launch-1.0 filesrc location=street.mp4 ! decodebin ! videoconvert ! \
//!     segtoolseg model=model.onnx output=overlay ! videoconvert ! autovideosink
//! ```
//!
//! Every buffer the element pushes carries the frame's class map and per-class pixel
//! counts as a custom meta; [`meta::ClassMap::from_buffer`] reads it in Rust, and
//! `include/gstsegtool.h` in C (through GStreamer's own custom-meta API, so a C program
//! needs no link to this library). `gst-inspect-1.0 segtoolseg` lists the properties.
//!
//! The element never panics across the C boundary on bad input: a model that does not
//! open, caps the model cannot take, or a failed run become element errors on the bus
//! with the file and the reason.

use gst::glib;

pub mod meta;
mod seg;

pub use seg::{EngineChoice, OutputMode, SegtoolSeg};

fn plugin_init(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    meta::register();
    seg::register(plugin)
}

gst::plugin_define!(
    segtool,
    "DANet semantic segmentation with exported segtool models (ONNX Runtime or tract)",
    plugin_init,
    env!("CARGO_PKG_VERSION"),
    "MIT/X11",
    "segtool",
    "segtool",
    "https://github.com/segtool/segtool"
);
