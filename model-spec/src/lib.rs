//! The pieces of segtool that every stage, the embedded runtime included, agrees on:
//! the [`ModelSpec`] carried in checkpoints and ONNX metadata, default palettes, the
//! official evaluation [`protocol`], the image lister, atomic file writes and the [`progress::Progress`] reporter long
//! loops report through.
//!
//! Split from `segtool-core` so that `segtool-runtime` and the C library carry no
//! training-only dependencies (`toml` configs, `rand` datasets, `png` palette masks).
//! `segtool-core` re-exports every module here under the same path.

pub mod images;
pub mod io;
pub mod palette;
pub mod process;
pub mod progress;
pub mod protocol;
pub mod qat;
pub mod raw_frames;
pub mod size;
pub mod spec;

pub use spec::{
    AuxHeadSpec, BackboneSpec, BlockKind, ModelSpec, MmsegTestCfg, SpecError, MAX_CLASSES,
    SPEC_METADATA_KEY,
};
