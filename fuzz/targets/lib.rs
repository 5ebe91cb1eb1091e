//! The fuzz targets' bodies, one module per target (fuzz_targets/NAME.rs calls
//! `targets::NAME::run`). The regression tests include these same files with `#[path]`.

pub mod support;

#[cfg(feature = "capi")]
pub mod capi;
#[cfg(feature = "card_huggingface")]
pub mod card_huggingface;
#[cfg(feature = "card_mmdeploy")]
pub mod card_mmdeploy;
#[cfg(feature = "card_sidecar")]
pub mod card_sidecar;
#[cfg(feature = "cdr")]
pub mod cdr;
#[cfg(feature = "config")]
pub mod config;
#[cfg(feature = "images")]
pub mod images;
#[cfg(feature = "mcap_bag")]
pub mod mcap_bag;
#[cfg(feature = "onnx")]
pub mod onnx;
#[cfg(feature = "pickle")]
pub mod pickle;
#[cfg(feature = "raw_frames")]
pub mod raw_frames;
#[cfg(feature = "safetensors")]
pub mod safetensors;
#[cfg(feature = "trt_cache")]
pub mod trt_cache;
