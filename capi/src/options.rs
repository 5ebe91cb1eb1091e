//! `segtool_options` and its defaults: the engine selector constants, the options struct
//! `segtool_open` takes, `segtool_options_default`, and the struct read as the runtime's
//! `SegmenterOptions` (the fields are its options under the same names, with the same
//! defaults). Separate from the segmenter so the C-visible configuration surface can be
//! read in one place.

use std::ffi::c_char;
use std::path::PathBuf;
use std::ptr;
use std::str::FromStr;

use segtool_runtime::{EngineKind, RuntimeError, SegmenterOptions};

use crate::status::{opt_str, Error};

/// Which inference engine `segtool_open` builds (one of the `SEGTOOL_ENGINE_*` values).
pub type segtool_engine = i32;
/// The engine timed fastest for the model on this machine (cached); ONNX Runtime for GPU
/// providers, OpenVINO for bf16 (the default).
pub const SEGTOOL_ENGINE_AUTO: segtool_engine = 0;
/// ONNX Runtime (CPU, CUDA, TensorRT); fails if `libonnxruntime` cannot be loaded.
pub const SEGTOOL_ENGINE_ORT: segtool_engine = 1;
/// tract: pure Rust, CPU only, no native dependency.
pub const SEGTOOL_ENGINE_TRACT: segtool_engine = 2;
/// OpenVINO (Intel CPUs, iGPUs, NPUs); fails if `libopenvino_c` cannot be loaded.
pub const SEGTOOL_ENGINE_OPENVINO: segtool_engine = 3;

/// Options for `segtool_open`: the runtime's `SegmenterOptions`, field for option, under
/// the same names and with the same defaults as every front end's (`ort_library` aside).
/// Start from `segtool_options_default()` and change fields; passing NULL to
/// `segtool_open` means the defaults. `segtool_options_json` reports what a segmenter
/// was opened with. Fields are only ever added at the end; the struct carries no size,
/// so a program is rebuilt against the header it links with.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct segtool_options {
    /// `SEGTOOL_ENGINE_AUTO` (default), `SEGTOOL_ENGINE_ORT`, `SEGTOOL_ENGINE_TRACT` or
    /// `SEGTOOL_ENGINE_OPENVINO`.
    pub engine: segtool_engine,
    /// ONNX Runtime execution providers in preference order, comma separated:
    /// `"cuda,cpu"`, `"cuda:1"`, `"tensorrt-fp16:0,cuda:0"`. One that does not load falls
    /// back to the next (reported), unless `strict`. NULL or `""` (default): `"cpu"`.
    pub providers: *const c_char,
    /// OpenVINO's device: `"CPU"`, `"GPU"`, `"NPU"` or `"AUTO"`; NULL or `""` (default):
    /// the CPU. An absent device falls back to the CPU (reported), unless `strict`.
    pub device: *const c_char,
    /// OpenVINO's precision for float32 layers: `"f32"` or `"bf16"`; NULL or `""`
    /// (default): f32.
    pub precision: *const c_char,
    /// Threads for one inference: ONNX Runtime's intra-op pool, tract's pool, OpenVINO's
    /// CPU plugin; 0 (default): the engine's choice (all cores).
    pub threads: u32,
    /// No fallback of any kind: fail with `SEGTOOL_ERR_PROVIDER_UNAVAILABLE` instead of
    /// running on something not asked for (another provider or device, another engine
    /// with `SEGTOOL_ENGINE_AUTO`, an option the engine that runs does not take). Default
    /// false: fall back and report it through `segtool_fallback_reason`.
    pub strict: bool,
    /// Full path of `libonnxruntime.so`; NULL (default) searches `ORT_DYLIB_PATH`, the
    /// path recorded at build time, then the system library path. ONNX Runtime is loaded
    /// once per process: the first segmenter that loads it decides which library is used.
    pub ort_library: *const c_char,
    /// `fixed_size`: the input height and width every image will have (a fixed camera),
    /// or 0 and 0 (default) for any size. ONNX Runtime then plans memory for that size (buffers
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
    /// OpenVINO's performance hint: `"latency"` or `"throughput"`; NULL or `""`
    /// (default): latency.
    pub hint: *const c_char,
    /// OpenVINO's parallel inference streams; 0 (default): what the hint picks.
    pub streams: u32,
    /// Also keep each image's logits: `segtool_result_logits`. Default false.
    pub logits: bool,
}

// ---------------------------------------------------------------------------------------
// Opening.

impl segtool_options {
    /// The runtime's options these fields say; a value that is not one is
    /// `SEGTOOL_ERR_INVALID_ARGUMENT`, naming the field.
    ///
    /// # Safety
    /// The struct's strings are NULL or NUL-terminated (the contract of `segtool_open`).
    pub(crate) unsafe fn runtime_options(&self) -> Result<SegmenterOptions, Error> {
        let defaults = SegmenterOptions::default();
        let engine = match self.engine {
            SEGTOOL_ENGINE_AUTO => EngineKind::Auto,
            SEGTOOL_ENGINE_ORT => EngineKind::Ort,
            SEGTOOL_ENGINE_TRACT => EngineKind::Tract,
            SEGTOOL_ENGINE_OPENVINO => EngineKind::OpenVino,
            other => {
                return Err(bad(
                    "engine",
                    format!(
                        "unknown engine {other} (SEGTOOL_ENGINE_AUTO = 0, SEGTOOL_ENGINE_ORT = 1, \
                         SEGTOOL_ENGINE_TRACT = 2, SEGTOOL_ENGINE_OPENVINO = 3)"
                    ),
                ))
            }
        };
        // SAFETY: the caller's contract above.
        let providers: Vec<String> = unsafe { opt_str(self.providers, "providers") }?
            .unwrap_or("")
            .split(',')
            .map(str::trim)
            .filter(|p| !p.is_empty())
            .map(str::to_owned)
            .collect();
        // SAFETY: as above.
        let card = unsafe { opt_str(self.card, "card") }?.filter(|c| !c.is_empty());
        Ok(SegmenterOptions {
            engine,
            // The runtime's builder checks each name.
            providers: match providers.is_empty() {
                true => defaults.providers,
                false => providers,
            },
            // SAFETY (each): as above.
            device: unsafe { parsed(self.device, "device", defaults.device) }?,
            precision: unsafe { parsed(self.precision, "precision", defaults.precision) }?,
            hint: unsafe { parsed(self.hint, "hint", defaults.hint) }?,
            // 0 is the default (the hint's streams, the engine's threads), as everywhere.
            streams: (self.streams > 0).then_some(self.streams as usize),
            threads: (self.threads > 0).then_some(self.threads as usize),
            card: card.map(PathBuf::from),
            strict: self.strict,
            fixed_size: match (self.fixed_height, self.fixed_width) {
                (0, 0) => None,
                (0, _) | (_, 0) => {
                    return Err(bad(
                        "fixed_size",
                        format!(
                            "fixed_height {} and fixed_width {}: give both, or 0 and 0 for any \
                             size",
                            self.fixed_height, self.fixed_width
                        ),
                    ))
                }
                (h, w) => Some([h as usize, w as usize]),
            },
            logits: self.logits,
        })
    }
}

/// The error for option `name`, as the runtime words it.
fn bad(name: &'static str, message: String) -> Error {
    Error::from(RuntimeError::Option { name, message })
}

/// A string field parsed as the runtime parses it; NULL and `""` are `default`.
///
/// # Safety
/// `p` is NULL or NUL-terminated.
unsafe fn parsed<T: FromStr<Err = String>>(
    p: *const c_char,
    name: &'static str,
    default: T,
) -> Result<T, Error> {
    // SAFETY: the caller's contract.
    match unsafe { opt_str(p, name) }?.filter(|s| !s.is_empty()) {
        Some(text) => text.parse().map_err(|e| bad(name, e)),
        None => Ok(default),
    }
}

/// The default options, those of every front end: `SEGTOOL_ENGINE_AUTO`, providers
/// `"cpu"`, OpenVINO's CPU at f32 with the latency hint, each engine's own threads and
/// streams, not strict, any input size, no logits, the usual library and card search.
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
        hint: ptr::null(),
        streams: 0,
        logits: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C constants are the runtime's engines, in the order of `EngineKind::ALL`: one
    /// list of engines, with numbers for C.
    #[test]
    fn engine_constants_are_the_runtime_engines_in_order() {
        for (i, kind) in EngineKind::ALL.into_iter().enumerate() {
            let mut o = segtool_options_default();
            o.engine = i as segtool_engine;
            // SAFETY: the default options hold no pointers but static strings or NULL.
            let got = unsafe { o.runtime_options() }.map(|r| r.engine).ok();
            assert_eq!(got, Some(kind), "SEGTOOL_ENGINE value {i}");
        }
        let mut o = segtool_options_default();
        o.engine = EngineKind::ALL.len() as segtool_engine;
        assert!(unsafe { o.runtime_options() }.is_err());
    }
}
