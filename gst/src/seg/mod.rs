//! The `segtoolseg` element: a BaseTransform that segments each video frame.
//!
//! Modules: `props` (properties and settings), `caps` (templates, caps mapping, pixel
//! conversions), `engine` (the model: streaming thread, newest-frame stream, or a source of a
//! shared model), `shared` (the models elements share by `model-instance-id`), `flow` (rendering,
//! draining, flushing, bus reports), `stats`
//! (counters and latencies), `imp` (the element's GStreamer side).

use gst::glib;
use gst::prelude::*;

#[cfg(feature = "analytics")]
mod analytics;
mod caps;
mod engine;
mod flow;
mod imp;
mod props;
mod shared;
mod stats;

pub use props::{EngineChoice, OutputMode};

glib::wrapper! {
    /// The `segtoolseg` element.
    pub struct SegtoolSeg(ObjectSubclass<imp::SegtoolSeg>)
        @extends gst_base::BaseTransform, gst::Element, gst::Object;
}

/// Registers `segtoolseg` with `plugin`.
pub fn register(plugin: &gst::Plugin) -> Result<(), glib::BoolError> {
    gst::Element::register(
        Some(plugin),
        "segtoolseg",
        gst::Rank::NONE,
        SegtoolSeg::static_type(),
    )
}
