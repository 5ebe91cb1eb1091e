//! Finding and loading `libopenvino_c`, once per process: the candidates in order (the
//! explicit option, `OPENVINO_LIB`, the library the set-up found in the pinned `openvino`
//! wheel, the loader's search path), the first that loads wins, and a later request for
//! another file is refused (the C API's functions are process-global).

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::ffi;
use crate::error::{Result, RuntimeError};

/// The library the set-up recorded when this crate was built (`SEGTOOL_OPENVINO_LIB`: the
/// `openvino` wheel's `libs/libopenvino_c.so.*`).
pub const BUILD_TIME_LIBRARY: Option<&str> = option_env!("SEGTOOL_OPENVINO_LIB");

/// The oldest OpenVINO whose C API has the per-model compile properties the engine uses
/// (`ov_core_compile_model_props`).
const OLDEST: (u32, u32) = (2026, 4);

/// Where `libopenvino_c` is looked for, in order, with where each came from.
pub fn candidates(explicit: Option<&Path>) -> Vec<(PathBuf, &'static str)> {
    if let Some(p) = explicit {
        return vec![(p.to_path_buf(), "OpenVinoOptions::library")];
    }
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("OPENVINO_LIB").filter(|p| !p.is_empty()) {
        out.push((p.into(), "OPENVINO_LIB"));
    }
    if let Some(p) = BUILD_TIME_LIBRARY.filter(|p| !p.is_empty()) {
        out.push((p.into(), "build-time SEGTOOL_OPENVINO_LIB"));
    }
    out.push(("libopenvino_c.so".into(), "system library path"));
    out
}

/// The loaded library and OpenVINO's build number.
static LOADED: Mutex<Option<(PathBuf, String)>> = Mutex::new(None);

/// Loads the library (the first candidate that loads) unless one is loaded already;
/// returns OpenVINO's build number. Refuses a version older than the engine needs.
pub fn load(explicit: Option<&Path>) -> Result<String> {
    let mut slot = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((path, version)) = slot.as_ref() {
        return match explicit {
            Some(p) if !same_file(p, path) => Err(RuntimeError::OpenVino(format!(
                "{} was asked for, but {} is loaded already (one OpenVINO library per process)",
                p.display(),
                path.display()
            ))),
            _ => Ok(version.clone()),
        };
    }
    let mut tried = Vec::new();
    for (path, source) in candidates(explicit) {
        match ffi::load(&path) {
            Ok(version) => {
                check_version(&version, &path)?;
                *slot = Some((path, version.clone()));
                return Ok(version);
            }
            Err(why) => tried.push(format!("{} ({source}): {why}", path.display())),
        }
    }
    Err(RuntimeError::OpenVinoLibraryNotFound { tried })
}

fn same_file(a: &Path, b: &Path) -> bool {
    a == b
        || matches!(
            (std::fs::canonicalize(a), std::fs::canonicalize(b)),
            (Ok(x), Ok(y)) if x == y
        )
}

fn check_version(build: &str, path: &Path) -> Result<()> {
    let mut parts = build.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().flatten(), parts.next().flatten());
    match (major, minor) {
        (Some(major), Some(minor)) if (major, minor) >= OLDEST => Ok(()),
        _ => Err(RuntimeError::OpenVino(format!(
            "{} is OpenVINO {build}; segtool needs {}.{} or newer (pip install openvino==2026.4.1)",
            path.display(),
            OLDEST.0,
            OLDEST.1
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_versions_are_refused_by_number() {
        let p = Path::new("libopenvino_c.so");
        assert!(check_version("2026.4.1-22982-e213a147257", p).is_ok());
        assert!(check_version("2027.0.0-1-abc", p).is_ok());
        let e = check_version("2026.3.0-21000-abc", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2026.3.0") && e.contains("2026.4"), "{e}");
        assert!(check_version("custom", p).is_err());
    }

    #[test]
    fn an_explicit_library_is_the_only_candidate() {
        let c = candidates(Some(Path::new("/x/libopenvino_c.so.2641")));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].1, "OpenVinoOptions::library");
    }
}
