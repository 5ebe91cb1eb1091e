//! The NVIDIA driver, and whether it suits the CUDA runtime libtorch was built with: a CUDA
//! 13 build (torch 2.13, onnxruntime-gpu 1.31.1) fails on an R5xx driver older than R580
//! with an opaque "driver too old" from the first CUDA call, so doctor says it up front.
//!
//! libcuda is `dlopen`ed here rather than linked: a CPU-only machine has none, and doctor
//! must still run there. `cuDriverGetVersion` needs no `cuInit` (and so no device).

use std::ffi::{c_int, CStr};

use serde_json::{json, Value};

use super::cudart_version;

/// What the machine has.
#[derive(Clone, Debug, PartialEq)]
pub enum Probe {
    /// `libcuda.so.1` does not load: no NVIDIA driver installed. The loader's words.
    Absent { reason: String },
    Present {
        /// `cuDriverGetVersion`: the newest CUDA the driver supports, 1000*major + 10*minor
        /// (13000); `None` when the call failed.
        cuda_version: Option<i64>,
        /// The kernel module's release ("580.65.06") from /proc/driver/nvidia/version;
        /// `None` where that file is absent (e.g. a container without it mounted).
        release: Option<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Suits,
    TooOld,
    /// No driver, a CPU-only libtorch, or `cuDriverGetVersion` failed.
    Unknown,
}

/// The driver against this build.
#[derive(Clone, Debug, PartialEq)]
pub struct Driver {
    pub probe: Probe,
    /// CUDART_VERSION of the libtorch build (13000); `None`: a CPU-only libtorch.
    pub required_cuda: Option<i64>,
    pub verdict: Verdict,
    /// What to do (or why the verdict is unknown); `None` when nothing is needed.
    pub advice: Option<String>,
}

/// NVIDIA's minimum Linux driver for a CUDA major release (CUDA toolkit release notes,
/// "CUDA Toolkit and Minimum Required Driver Version"); any minor of that major runs on it
/// (minor-version compatibility).
fn min_driver(major: i64) -> Option<&'static str> {
    match major {
        13 => Some("580.65.06"),
        12 => Some("525.60.13"),
        11 => Some("450.80.02"),
        _ => None,
    }
}

/// "R580 (580.65.06) or later" for the CUDA major of `code`.
fn driver_needed(code: i64) -> String {
    match min_driver(code / 1000) {
        Some(min) => format!("R{} ({min}) or later", min.split('.').next().unwrap_or(min)),
        None => format!("a release supporting CUDA {}", cudart_version(code)),
    }
}

/// The verdict for `probe` against a build of CUDA `required` (pure, for the tests).
pub fn assess(probe: Probe, required: Option<i64>) -> Driver {
    let have = match &probe {
        Probe::Present { cuda_version, .. } => *cuda_version,
        Probe::Absent { .. } => None,
    };
    let (verdict, advice) = match (&probe, have, required) {
        (Probe::Absent { reason }, _, Some(need)) => (
            Verdict::Unknown,
            Some(format!(
                "no NVIDIA driver installed ({reason}); a GPU with this CUDA {} build needs an \
                 NVIDIA driver: {}",
                cudart_version(need),
                driver_needed(need)
            )),
        ),
        (Probe::Absent { reason }, _, None) => (
            Verdict::Unknown,
            Some(format!("no NVIDIA driver installed ({reason})")),
        ),
        (_, None, _) => (
            Verdict::Unknown,
            Some("libcuda loads but cuDriverGetVersion failed".into()),
        ),
        (_, _, None) => (Verdict::Unknown, None), // CPU-only libtorch: nothing to compare.
        // Same major suffices: a 13.0 driver runs 13.x runtimes (minor-version compatibility).
        (_, Some(have), Some(need)) if have / 1000 >= need / 1000 => (Verdict::Suits, None),
        (_, Some(have), Some(need)) => {
            let (major, minor) = (need / 1000, (need % 1000) / 10);
            (
                Verdict::TooOld,
                Some(format!(
                    "the driver supports CUDA {} but this build needs CUDA {}: upgrade the NVIDIA \
                     driver to {}, or on a data-centre GPU install cuda-compat-{major}-{minor} and \
                     put /usr/local/cuda-{major}.{minor}/compat on LD_LIBRARY_PATH",
                    cudart_version(have),
                    cudart_version(need),
                    driver_needed(need)
                )),
            )
        }
    };
    Driver {
        probe,
        required_cuda: required,
        verdict,
        advice,
    }
}

/// The release in /proc/driver/nvidia/version's `NVRM version:` line: its first token that
/// is digits and dots ("x86_64" and the words around it are not).
pub fn parse_release(proc_version: &str) -> Option<String> {
    let line = proc_version
        .lines()
        .find(|l| l.trim_start().starts_with("NVRM version:"))?;
    line.split_whitespace()
        .find(|t| t.contains('.') && t.chars().all(|c| c.is_ascii_digit() || c == '.'))
        .map(str::to_string)
}

/// Loads libcuda (never unloaded: libtorch may hold it too, and unloading libcuda is not
/// safe) and asks it its CUDA version.
pub fn probe() -> Probe {
    // SAFETY: dlopen/dlsym/dlerror with NUL-terminated names; the symbol is called with
    // cuDriverGetVersion's C signature, `CUresult (int*)`.
    unsafe {
        let handle = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            let err = libc::dlerror();
            let reason = if err.is_null() {
                "libcuda.so.1 does not load".to_string()
            } else {
                CStr::from_ptr(err).to_string_lossy().into_owned()
            };
            return Probe::Absent { reason };
        }
        let sym = libc::dlsym(handle, c"cuDriverGetVersion".as_ptr());
        let cuda_version = (!sym.is_null()).then(|| {
            let get: unsafe extern "C" fn(*mut c_int) -> c_int = std::mem::transmute(sym);
            let mut v: c_int = 0;
            (get(&mut v) == 0 && v > 0).then_some(i64::from(v))
        });
        Probe::Present {
            cuda_version: cuda_version.flatten(),
            release: std::fs::read_to_string("/proc/driver/nvidia/version")
                .ok()
                .and_then(|s| parse_release(&s)),
        }
    }
}

impl Driver {
    /// Stable keys: `present` (bool), `release`, `cuda_version`, `required_cuda`
    /// ("13.0"; string|null), `suits_build` (bool|null when unknown), `advice` (string|null).
    pub fn to_json(&self) -> Value {
        let (present, have, release) = match &self.probe {
            Probe::Absent { .. } => (false, None, None),
            Probe::Present {
                cuda_version,
                release,
            } => (true, *cuda_version, release.clone()),
        };
        json!({
            "present": present,
            "release": release,
            "cuda_version": have.map(cudart_version),
            "required_cuda": self.required_cuda.map(cudart_version),
            "suits_build": match self.verdict {
                Verdict::Suits => Some(true),
                Verdict::TooOld => Some(false),
                Verdict::Unknown => None,
            },
            "advice": self.advice,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn present(v: i64) -> Probe {
        Probe::Present {
            cuda_version: Some(v),
            release: Some("580.65.06".into()),
        }
    }

    #[test]
    fn a_cuda_13_driver_suits_a_cuda_13_build() {
        let d = assess(present(13000), Some(13000));
        assert_eq!((d.verdict, d.advice.as_deref()), (Verdict::Suits, None));
        // Minor-version compatibility: a 13.0 driver runs a 13.2 runtime.
        assert_eq!(assess(present(13000), Some(13020)).verdict, Verdict::Suits);
        assert_eq!(d.to_json()["suits_build"], true);
        assert_eq!(d.to_json()["cuda_version"], "13.0");
    }

    #[test]
    fn a_cuda_12_driver_is_too_old_for_a_cuda_13_build() {
        let d = assess(present(12080), Some(13000));
        assert_eq!(d.verdict, Verdict::TooOld);
        assert_eq!(
            d.advice.as_deref().unwrap(),
            "the driver supports CUDA 12.8 but this build needs CUDA 13.0: upgrade the NVIDIA \
             driver to R580 (580.65.06) or later, or on a data-centre GPU install \
             cuda-compat-13-0 and put /usr/local/cuda-13.0/compat on LD_LIBRARY_PATH"
        );
        let j = d.to_json();
        assert_eq!(
            (&j["suits_build"], &j["required_cuda"]),
            (&json!(false), &json!("13.0"))
        );
    }

    #[test]
    fn no_libcuda_is_an_absent_driver() {
        let reason = "libcuda.so.1: cannot open shared object file: No such file or directory";
        let d = assess(
            Probe::Absent {
                reason: reason.into(),
            },
            Some(13000),
        );
        assert_eq!(d.verdict, Verdict::Unknown);
        let advice = d.advice.clone().unwrap();
        assert!(advice.starts_with("no NVIDIA driver installed (libcuda.so.1: cannot open"));
        assert!(
            advice.ends_with("needs an NVIDIA driver: R580 (580.65.06) or later"),
            "{advice}"
        );
        let j = d.to_json();
        assert_eq!(
            (&j["present"], &j["suits_build"]),
            (&json!(false), &Value::Null)
        );
        // A CPU-only libtorch needs no driver: nothing to compare.
        assert_eq!(assess(present(12080), None).verdict, Verdict::Unknown);
    }

    #[test]
    fn release_from_proc_driver_nvidia_version() {
        let text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 \
                    06:54:38 UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n";
        assert_eq!(parse_release(text).as_deref(), Some("580.65.06"));
        let open = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  575.57.08  Release \
                    Build  (dvs-builder@U16)  Sat May 24 2025\n";
        assert_eq!(parse_release(open).as_deref(), Some("575.57.08"));
        assert_eq!(parse_release("GCC version: 12.2.0\n"), None);
    }
}
