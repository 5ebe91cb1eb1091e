//! What this build of segtool-runtime and this machine can run, for `segtool doctor`:
//! ONNX Runtime (the library found, its version, the providers it was built with, whether
//! the CUDA and TensorRT providers register on a session, and why not), the TensorRT
//! library (dlopen of `libnvinfer.so.10`, the soname ONNX Runtime 1.31's TensorRT provider
//! links) and tract. Every value comes from a check that ran; nothing is printed.
//! [`RuntimeEnvReport::to_json`] documents the stable keys.

use serde_json::{json, Value};

pub use crate::engines::ort_report::{OrtReport, ProviderCheck};

/// The TensorRT library, opened by name as ONNX Runtime's provider would.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::env_report::{tensorrt_library, TENSORRT_SONAME};
/// let trt = tensorrt_library(); // dlopens it now (also part of `env_report()`)
/// assert_eq!(trt.soname, TENSORRT_SONAME);
/// match (&trt.version, &trt.reason) {
///     (Some(version), _) => println!("TensorRT {version} at {:?}", trt.path),
///     (None, Some(why)) => println!("no TensorRT: {why}"),
///     (None, None) => println!("{} loaded, without a version", trt.soname),
/// }
/// assert_eq!(trt.found, trt.reason.is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRtLibrary {
    /// The name it was opened by ([`TENSORRT_SONAME`]).
    pub soname: String,
    /// Whether `dlopen` succeeded.
    pub found: bool,
    /// Where the loader found it.
    pub path: Option<String>,
    /// `getInferLibVersion()` ("10.16.1").
    pub version: Option<String>,
    /// `dlerror()` when not found.
    pub reason: Option<String>,
}

/// Everything [`env_report`] found.
///
/// # Example
///
/// ```no_run
/// use segtool_runtime::expert::env_report;
/// let report = env_report(); // loads ONNX Runtime and tries CUDA and TensorRT: a second or so
/// let ort = &report.onnxruntime;
/// match &ort.library {
///     Some(lib) => println!("ONNX Runtime {:?} from {lib}", ort.version),
///     None => println!("no ONNX Runtime (tried: {:?}); tract: {}", ort.tried, report.tract),
/// }
/// // Stable keys: `segtool doctor --json` prints them under `runtime`.
/// println!("{}", report.to_json()["tensorrt_library"]["found"]);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RuntimeEnvReport {
    /// ONNX Runtime: library, version, providers.
    pub onnxruntime: OrtReport,
    /// The TensorRT library ONNX Runtime's TensorRT provider needs.
    pub tensorrt_library: TensorRtLibrary,
    /// The `tract` feature is compiled in (pure Rust, always usable then).
    pub tract: bool,
}

/// ONNX Runtime 1.31's TensorRT provider links this soname.
pub const TENSORRT_SONAME: &str = "libnvinfer.so.10";

/// Runs every check: loads ONNX Runtime (once per process, as the engines do), builds
/// two tiny sessions (CUDA, TensorRT) and dlopens TensorRT. Well under a second without a
/// GPU.
pub fn env_report() -> RuntimeEnvReport {
    #[cfg(feature = "ort")]
    let onnxruntime = crate::engines::ort::doctor::probe();
    #[cfg(not(feature = "ort"))]
    let onnxruntime = OrtReport::not_compiled();
    RuntimeEnvReport {
        onnxruntime,
        tensorrt_library: tensorrt_library(),
        tract: cfg!(feature = "tract"),
    }
}

#[cfg(unix)]
fn dlerror() -> String {
    let e = unsafe { libc::dlerror() };
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        unsafe { std::ffi::CStr::from_ptr(e) }
            .to_string_lossy()
            .into_owned()
    }
}

/// dlopens [`TENSORRT_SONAME`] (kept loaded: ONNX Runtime would load it anyway).
pub fn tensorrt_library() -> TensorRtLibrary {
    let mut out = TensorRtLibrary {
        soname: TENSORRT_SONAME.into(),
        found: false,
        path: None,
        version: None,
        reason: None,
    };
    #[cfg(unix)]
    {
        let name = std::ffi::CString::new(TENSORRT_SONAME).expect("no NUL");
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
        if handle.is_null() {
            out.reason = Some(dlerror());
            return out;
        }
        out.found = true;
        let sym = unsafe { libc::dlsym(handle, c"getInferLibVersion".as_ptr()) };
        if !sym.is_null() {
            // SAFETY: TensorRT's `int32_t getInferLibVersion() noexcept`.
            let f: extern "C" fn() -> i32 = unsafe { std::mem::transmute(sym) };
            let v = f();
            // 10.x: major*10000 + minor*100 + patch.
            out.version = Some(format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100));
            let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
            if unsafe { libc::dladdr(sym, &mut info) } != 0 && !info.dli_fname.is_null() {
                out.path = Some(
                    unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    #[cfg(not(unix))]
    {
        out.reason = Some("only probed on Unix".into());
    }
    out
}

fn provider_json(p: &Option<ProviderCheck>) -> Value {
    match p {
        None => Value::Null,
        Some(p) => json!({
            "name": p.name,
            "in_build": p.in_build,
            "registers": p.registers,
            "reason": p.reason,
        }),
    }
}

impl RuntimeEnvReport {
    /// Stable keys (values `null` when unknown or not checked):
    /// - `onnxruntime`: `compiled` (bool), `loaded` (bool), `library` (string|null),
    ///   `tried` (array of string), `version` (string|null), `available_providers`
    ///   (array of string), `cuda` and `tensorrt` (null when no library loaded, else
    ///   `name` string, `in_build` bool, `registers` bool, `reason` string|null)
    /// - `tensorrt_library`: `soname` (string), `found` (bool), `path`, `version`,
    ///   `reason` (string|null)
    /// - `tract`: `compiled` (bool)
    pub fn to_json(&self) -> Value {
        let o = &self.onnxruntime;
        let t = &self.tensorrt_library;
        json!({
            "onnxruntime": {
                "compiled": o.compiled,
                "loaded": o.library.is_some(),
                "library": o.library,
                "tried": o.tried,
                "version": o.version,
                "available_providers": o.available_providers,
                "cuda": provider_json(&o.cuda),
                "tensorrt": provider_json(&o.tensorrt),
            },
            "tensorrt_library": {
                "soname": t.soname,
                "found": t.found,
                "path": t.path,
                "version": t.version,
                "reason": t.reason,
            },
            "tract": { "compiled": self.tract },
        })
    }
}
