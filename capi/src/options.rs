//! `segtool_options` and its defaults: the engine selector constants, the options struct
//! `segtool_open` takes, `segtool_options_default`, and the parsing of the comma-separated
//! provider list. Separate from the segmenter so the C-visible configuration surface can be
//! read in one place.

use std::ffi::c_char;
use std::ptr;

use segtool_runtime::Provider;

use crate::status::Error;

/// Which inference engine `segtool_open` builds (one of the `SEGTOOL_ENGINE_*` values).
pub type segtool_engine = i32;
/// ONNX Runtime when its library can be loaded, tract otherwise (the default).
pub const SEGTOOL_ENGINE_AUTO: segtool_engine = 0;
/// ONNX Runtime (CPU, CUDA, TensorRT); fails if `libonnxruntime` cannot be loaded.
pub const SEGTOOL_ENGINE_ORT: segtool_engine = 1;
/// tract: pure Rust, CPU only, no native dependency.
pub const SEGTOOL_ENGINE_TRACT: segtool_engine = 2;
/// OpenVINO (Intel CPUs, iGPUs, NPUs); fails if `libopenvino_c` cannot be loaded.
pub const SEGTOOL_ENGINE_OPENVINO: segtool_engine = 3;

/// Options for `segtool_open`. Start from `segtool_options_default()` and change fields;
/// passing NULL to `segtool_open` means the defaults.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct segtool_options {
    /// `SEGTOOL_ENGINE_AUTO` (default), `SEGTOOL_ENGINE_ORT`, `SEGTOOL_ENGINE_TRACT` or
    /// `SEGTOOL_ENGINE_OPENVINO`.
    pub engine: segtool_engine,
    /// ONNX Runtime execution providers in preference order, comma separated:
    /// `"cuda,cpu"`, `"cuda:1"`, `"tensorrt-fp16:0,cuda:0"`. CPU is always the last
    /// resort. NULL or `""` means CPU only. tract always runs on the CPU.
    pub providers: *const c_char,
    /// OpenVINO's device: `"CPU"`, `"GPU"`, `"NPU"` or `"AUTO"`; NULL or `""` (default):
    /// the CPU. An absent device falls back to the CPU (reported), unless `strict`.
    pub device: *const c_char,
    /// OpenVINO's precision for float32 layers: `"f32"` or `"bf16"`; NULL or `""`
    /// (default): f32.
    pub precision: *const c_char,
    /// Threads for one inference (the runtime's `SegmenterOptions::threads`): ONNX
    /// Runtime's intra-op pool, or tract's own pool; 0 (default) lets the engine decide
    /// (all cores).
    pub threads: u32,
    /// Fail with `SEGTOOL_ERR_PROVIDER_UNAVAILABLE` instead of falling back when the first
    /// requested provider cannot be used (another ONNX Runtime provider, or tract with
    /// `SEGTOOL_ENGINE_AUTO`). Default false: fall back and report it through
    /// `segtool_fallback_reason`.
    pub strict: bool,
    /// Full path of `libonnxruntime.so`; NULL (default) searches `ORT_DYLIB_PATH`, the
    /// path recorded at build time, then the system library path. ONNX Runtime is loaded
    /// once per process: the first segmenter that loads it decides which library is used.
    pub ort_library: *const c_char,
    /// Input height and width every image will have (a fixed camera), or 0 and 0
    /// (default) for any size. ONNX Runtime then plans memory for that size (buffers
    /// reused in place: about 25% less activation memory for a ResNet-50 DANet) and
    /// refuses other sizes with `SEGTOOL_ERR_INVALID_ARGUMENT`. Refused by tract (it plans each
    /// size as it comes); with auto, the size the engines are timed at.
    pub fixed_height: u32,
    pub fixed_width: u32,
    /// Path of a model card (TOML) for an ONNX file segtool did not write: its input's
    /// normalisation, resize and output kind (book/src/models-from-elsewhere.md).
    /// NULL (default): the file's own metadata, then a sidecar `MODEL.segtool.toml`, then
    /// a Hugging Face folder's JSON files. A file with no card fails to open with
    /// `SEGTOOL_ERR_INVALID_MODEL`, naming what is missing.
    pub card: *const c_char,
}

// ---------------------------------------------------------------------------------------
// Opening.

pub(crate) fn parse_providers(list: Option<&str>) -> Result<Vec<Provider>, Error> {
    list.unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| p.parse::<Provider>().map_err(Error::invalid))
        .collect()
}

/// The default options: `SEGTOOL_ENGINE_AUTO`, CPU only, ONNX Runtime's thread default,
/// not strict, ONNX Runtime library from the usual search path.
#[no_mangle]
pub extern "C" fn segtool_options_default() -> segtool_options {
    segtool_options {
        engine: SEGTOOL_ENGINE_AUTO,
        providers: ptr::null(),
        device: ptr::null(),
        precision: ptr::null(),
        threads: 0,
        strict: false,
        ort_library: ptr::null(),
        fixed_height: 0,
        fixed_width: 0,
        card: ptr::null(),
    }
}
