//! The fuzz targets' bodies, one module per target (fuzz_targets/NAME.rs calls
//! `targets::NAME::run`). The regression tests include these same files with `#[path]`.

pub mod support;

pub mod capi;
pub mod card_huggingface;
pub mod card_mmdeploy;
pub mod card_sidecar;
pub mod cdr;
pub mod config;
pub mod images;
pub mod mcap_bag;
pub mod onnx;
pub mod pickle;
pub mod raw_frames;
pub mod safetensors;
pub mod trt_cache;
