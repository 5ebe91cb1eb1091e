//! What most programs never need: the engines themselves (to run a graph without a
//! [`Segmenter`](crate::Segmenter), or to wrap one), the segmenter's own plumbing
//! ([`SegmenterExt`]), the pre- and post-processing steps
//! one at a time, the environment report, heap trimming and the Triton repository writer.

pub mod env_report;
pub mod triton;

pub use crate::engines::contract_adapter::ContractAdapter;
pub use crate::engines::{load_spec, read_metadata, run_logits, Engine};
pub use crate::engines::io_contract::{EngineInput, EngineOutput, EngineTensor};
#[cfg(feature = "openvino")]
pub use crate::engines::openvino::{
    library as openvino_library, precision_class, NodePrecisions, OpenVinoEngine,
};
#[cfg(feature = "ort")]
pub use crate::engines::ort::{doctor, environment, NodePlacement, OrtEngine, PlacedNode};
pub use crate::segmentation::postprocess::{argmax, resize_bilinear, resize_nearest, softmax, Upsample};
pub use crate::normalise::{normalise, normalise_batch, prepare, PrepareOptions, Prepared};
pub use crate::segmenter::cpu_has_vnni;
pub use crate::segmenter::SegmenterExt;
#[cfg(feature = "tract")]
pub use crate::engines::tract::TractEngine;
pub use env_report::env_report;

/// Handing the heap's freed memory back to the system (glibc's `malloc_trim`; a no-op
/// elsewhere): see the functions. Below the engines, which trim after building a session.
pub mod memory {
    pub use crate::memory::{release_freed_heap, release_freed_heap_every};
}
