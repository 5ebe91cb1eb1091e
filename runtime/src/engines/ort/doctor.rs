//! ONNX Runtime's part of the environment report ([`crate::engines::ort_report`]): which library loads (through the same
//! search and process-wide environment as [`OrtEngine`]), its version and
//! `GetAvailableProviders`, and whether the CUDA and TensorRT providers register, found by
//! building a strict session (no CPU fallback) on a tiny model with each.

use std::ffi::{c_char, c_int, CStr};
use std::path::Path;

use super::{dylib, OrtEngine, OrtOptions, Provider};
use crate::error::RuntimeError;
use crate::engines::ort_report::{OrtReport, ProviderCheck};

/// Probes ONNX Runtime; never fails (what went wrong is in the report).
pub fn probe() -> OrtReport {
    let mut report = OrtReport {
        compiled: true,
        ..OrtReport::not_compiled()
    };
    if let Err(e) = dylib::environment(None) {
        report.tried = match e {
            RuntimeError::OrtLibraryNotFound { tried } => tried,
            other => vec![other.to_string()],
        };
        return report;
    }
    let Some(path) = dylib::loaded_library() else {
        return report;
    };
    report.version = library_version(&path);
    report.library = Some(path.display().to_string());
    report.available_providers = available_providers();

    let check = |name: &str, provider: Provider| -> ProviderCheck {
        let in_build = report.available_providers.iter().any(|p| p == name);
        let reason = provider_registers(provider).err();
        ProviderCheck {
            name: name.into(),
            in_build,
            registers: reason.is_none(),
            reason,
        }
    };
    report.cuda = Some(check(
        "CUDAExecutionProvider",
        Provider::Cuda { device_id: 0 },
    ));
    report.tensorrt = Some(check(
        "TensorrtExecutionProvider",
        Provider::TensorRt {
            device_id: 0,
            fp16: false,
            cache_dir: None,
        },
    ));
    report
}

/// Whether `provider` registers: a strict session (no CPU fallback) with it on a tiny
/// model. `Err` holds ONNX Runtime's own words, without the engine's framing. This is the
/// check `segtool doctor` reports, and the GPU tier's ground for skipping.
pub fn provider_registers(provider: Provider) -> Result<(), String> {
    let model = std::env::temp_dir().join(format!(
        "segtool-probe-{}-{:?}.onnx",
        std::process::id(),
        std::thread::current().id()
    ));
    let spec = segtool_testkit::tiny_spec(3);
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(
        &model,
        segtool_testkit::tiny_model_bytes(&spec, &w, &[0.0; 3]),
    )
    .map_err(|e| format!("could not write a test model {}: {e}", model.display()))?;
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_provider(provider)
        .strict(true);
    let opened = OrtEngine::open(&model, &options).map(drop).map_err(|e| {
        let e = e.to_string();
        e.split_once(" unavailable: ")
            .map_or(e.as_str(), |(_, why)| why)
            .to_string()
    });
    let _ = std::fs::remove_file(&model);
    opened
}

/// `OrtGetApiBase()->GetVersionString()` of the already loaded library.
fn library_version(path: &Path) -> Option<String> {
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
        // RTLD_NOLOAD: only a handle on what ort already loaded.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if handle.is_null() {
            return None;
        }
        let sym = unsafe { libc::dlsym(handle, c"OrtGetApiBase".as_ptr()) };
        let version = (!sym.is_null()).then(|| {
            // SAFETY: `const OrtApiBase* OrtGetApiBase(void)`, ONNX Runtime's one entry point.
            let get: unsafe extern "C" fn() -> *const ort::sys::OrtApiBase =
                unsafe { std::mem::transmute(sym) };
            let base = unsafe { get() };
            let s = unsafe { ((*base).GetVersionString)() };
            unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
        });
        unsafe { libc::dlclose(handle) };
        version
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        None
    }
}

/// `GetAvailableProviders`: the providers this ONNX Runtime build has.
fn available_providers() -> Vec<String> {
    let api = ort::api();
    let mut list: *mut *mut c_char = std::ptr::null_mut();
    let mut n: c_int = 0;
    let status = unsafe { (api.GetAvailableProviders)(&mut list, &mut n) };
    if !status.0.is_null() {
        unsafe { (api.ReleaseStatus)(status.0) };
        return Vec::new();
    }
    if list.is_null() {
        return Vec::new();
    }
    let out = (0..n.max(0) as usize)
        .map(|i| {
            unsafe { CStr::from_ptr(*list.add(i)) }
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let status = unsafe { (api.ReleaseAvailableProviders)(list, n) };
    if !status.0.is_null() {
        unsafe { (api.ReleaseStatus)(status.0) };
    }
    out
}
