//! ONNX Runtime's part of the environment report ([`crate::expert::env_report`]), as values: the
//! library found, its providers and whether CUDA and TensorRT register. Its own module so
//! that the probe that fills it in ([`crate::engines::ort::doctor`], `ort` feature) and the
//! report that holds it both depend on it, not on each other.

/// Whether one execution provider can be used.
///
/// # Example
///
/// ```no_run
/// use segtool_runtime::expert::env_report::env_report;
/// let ort = env_report().onnxruntime;
/// for check in [&ort.cuda, &ort.tensorrt].into_iter().flatten() {
///     match (check.in_build, check.registers) {
///         (_, true) => println!("{}: usable", check.name),
///         (false, _) => println!("{}: not in this ONNX Runtime build", check.name),
///         (true, false) => println!("{}: {}", check.name, check.reason.as_deref().unwrap_or("?")),
///     }
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProviderCheck {
    /// The provider's ONNX Runtime name (`CUDAExecutionProvider`).
    pub name: String,
    /// Listed by `GetAvailableProviders` (compiled into this ONNX Runtime build).
    pub in_build: bool,
    /// A session on a tiny model built with it, strictly (no CPU fallback).
    pub registers: bool,
    /// ONNX Runtime's error when it did not register.
    pub reason: Option<String>,
}

/// ONNX Runtime as found now.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::env_report::OrtReport;
/// // `env_report().onnxruntime` probes this machine; a build without the `ort` feature
/// // reports this:
/// let report = OrtReport::not_compiled();
/// assert!(!report.compiled && report.library.is_none());
/// let gpu = report.cuda.as_ref().is_some_and(|cuda| cuda.registers);
/// assert!(!gpu); // nothing loaded, so nothing was checked
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrtReport {
    /// The `ort` feature is compiled in.
    pub compiled: bool,
    /// The library that loaded (`None`: none did, see `tried`).
    pub library: Option<String>,
    /// Each candidate that failed, with why (the places [`crate::OrtOptions::with_dylib_path`] and the environment name).
    pub tried: Vec<String>,
    /// `OrtGetApiBase()->GetVersionString()` ("1.31.1").
    pub version: Option<String>,
    /// `GetAvailableProviders`.
    pub available_providers: Vec<String>,
    /// The CUDA provider's check (`None`: no library loaded, nothing to check).
    pub cuda: Option<ProviderCheck>,
    /// The TensorRT provider's check (`None`: no library loaded, nothing to check).
    pub tensorrt: Option<ProviderCheck>,
}

impl OrtReport {
    /// The report of a build without the `ort` feature: nothing loaded, nothing checked.
    pub fn not_compiled() -> Self {
        Self {
            compiled: false,
            library: None,
            tried: Vec::new(),
            version: None,
            available_providers: Vec::new(),
            cuda: None,
            tensorrt: None,
        }
    }
}
