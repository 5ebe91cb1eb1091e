//! Finding and loading `libonnxruntime`: the candidate paths ([`dylib_candidates`]: the
//! explicit option, `ORT_DYLIB_PATH`, the build-time path, the system search path) and
//! the process-wide ONNX Runtime environment, created once from the first library that
//! loads. Separate because it is process-global state with its own rules (one library per
//! process), independent of any one model or provider.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ort::environment::Environment;

use crate::error::{Result, RuntimeError};

/// The ONNX Runtime library path recorded when this crate was built (the setup script
/// exports `SEGTOOL_ORT_DYLIB`), used when `ORT_DYLIB_PATH` is not set.
pub const BUILD_TIME_DYLIB: Option<&str> = option_env!("SEGTOOL_ORT_DYLIB");

/// Where `libonnxruntime` is looked for, in order: the explicit option (then the only
/// candidate), `ORT_DYLIB_PATH`, the path recorded at build time, then the plain name (the
/// system loader's search path).
pub fn dylib_candidates(explicit: Option<&Path>) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push((p.to_path_buf(), "OrtOptions::dylib_path"));
        return out;
    }
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        out.push((p.into(), "ORT_DYLIB_PATH"));
    }
    if let Some(p) = BUILD_TIME_DYLIB.filter(|p| !p.is_empty()) {
        out.push((p.into(), "build-time SEGTOOL_ORT_DYLIB"));
    }
    out.push(("libonnxruntime.so".into(), "system library path"));
    out
}

/// The process-wide environment and the library it was loaded from. ort allows exactly
/// one per process and cannot rebuild it once dropped, so it is created once and kept;
/// the mutex serialises the first load.
static ENVIRONMENT: Mutex<Option<(Environment, PathBuf)>> = Mutex::new(None);

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

/// The library the process-wide environment was created from, once one has loaded.
pub(super) fn loaded_library() -> Option<PathBuf> {
    let slot = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    slot.as_ref().map(|(_, path)| path.clone())
}

/// The process's one ONNX Runtime environment, created on first use from the first
/// library of [`dylib_candidates`] that loads (`explicit` first). Every ONNX Runtime
/// session of the process, the runtime's engines and the calibration's, is built in it:
/// ort allows one environment per process, and a second library cannot be loaded.
pub fn environment(explicit: Option<&Path>) -> Result<Environment> {
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((env, loaded)) = slot.as_ref() {
        // One library per process: a different explicit one cannot be honoured.
        if let Some(p) = explicit.filter(|p| !same_file(p, loaded)) {
            return Err(RuntimeError::OrtLibraryNotFound {
                tried: vec![format!(
                    "{} (OrtOptions::dylib_path): another ONNX Runtime library, {}, is \
                     already loaded in this process (one per process)",
                    p.display(),
                    loaded.display()
                )],
            });
        }
        return Ok(env.clone());
    }
    let mut tried = Vec::new();
    for (path, source) in dylib_candidates(explicit) {
        if path.is_absolute() && !path.exists() {
            tried.push(format!("{} ({source}): no such file", path.display()));
            continue;
        }
        match ort::init_from(&path) {
            Ok(builder) => {
                let env = builder
                    .with_name("segtool")
                    .build()
                    .map_err(|e| RuntimeError::Ort(format!("creating environment: {e}")))?;
                *slot = Some((env.clone(), path));
                return Ok(env);
            }
            Err(e) => tried.push(format!("{} ({source}): {e}", path.display())),
        }
    }
    Err(RuntimeError::OrtLibraryNotFound { tried })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_dylib_path_is_the_only_candidate() {
        let c = dylib_candidates(Some(Path::new("/x/libonnxruntime.so")));
        assert_eq!(
            c,
            vec![(
                PathBuf::from("/x/libonnxruntime.so"),
                "OrtOptions::dylib_path"
            )]
        );
        let c = dylib_candidates(None);
        assert_eq!(c.last().unwrap().0, PathBuf::from("libonnxruntime.so"));
    }
}
