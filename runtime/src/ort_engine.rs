//! The ONNX Runtime engine: CPU, CUDA or TensorRT, chosen at run time.
//!
//! `ort` is built with `load-dynamic`: nothing native is linked, `libonnxruntime.so` is
//! opened on first use (see [`dylib_candidates`] for where it is looked for). The same
//! binary therefore runs on a CPU-only wheel and on `onnxruntime-gpu`.
//!
//! Provider choice: ort silently falls back to CPU when an EP fails to register, which
//! would make "CUDA" benchmarks quietly run on the CPU. Here each requested provider is
//! tried in order with `error_on_failure()`, on a session of its own; the first whose
//! session builds wins, and [`Engine::provider`] / [`Engine::fallback_reason`] say which
//! one that was and why the earlier ones were not.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use ndarray::{Array4, ArrayView4, Ix4};
use ort::environment::Environment;
use ort::ep::{self, ExecutionProviderDispatch};
use ort::session::Session;
use ort::value::TensorRef;

use crate::engine::{check_input_shape, check_output_shape, ensure_exists, Engine};
use crate::error::{Result, RuntimeError};

/// The ONNX Runtime library path recorded when this crate was built (the setup script
/// exports `SEGTOOL_ORT_DYLIB`), used when `ORT_DYLIB_PATH` is not set.
pub const BUILD_TIME_DYLIB: Option<&str> = option_env!("SEGTOOL_ORT_DYLIB");

/// An ONNX Runtime execution provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provider {
    Cpu,
    Cuda {
        device_id: i32,
    },
    /// TensorRT, with CUDA registered behind it for the nodes TensorRT does not take.
    /// `cache_dir` keeps built engines (and timing caches) between runs: building one
    /// takes minutes for DANet-R101.
    TensorRt {
        device_id: i32,
        fp16: bool,
        cache_dir: Option<PathBuf>,
    },
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Cpu => f.write_str("cpu"),
            Provider::Cuda { device_id } => write!(f, "cuda:{device_id}"),
            Provider::TensorRt {
                device_id, fp16, ..
            } => {
                write!(
                    f,
                    "tensorrt:{device_id}{}",
                    if *fp16 { "(fp16)" } else { "" }
                )
            }
        }
    }
}

/// Parses `cpu`, `cuda`, `cuda:1`, `tensorrt`, `tensorrt:0`, `tensorrt-fp16:0`.
impl FromStr for Provider {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let (kind, id) = s.split_once(':').unwrap_or((s, "0"));
        let device_id = id
            .parse()
            .map_err(|_| format!("bad device id in provider {s:?}"))?;
        match kind.to_ascii_lowercase().as_str() {
            "cpu" => Ok(Provider::Cpu),
            "cuda" => Ok(Provider::Cuda { device_id }),
            "tensorrt" | "trt" => Ok(Provider::TensorRt {
                device_id,
                fp16: false,
                cache_dir: None,
            }),
            "tensorrt-fp16" | "trt-fp16" => Ok(Provider::TensorRt {
                device_id,
                fp16: true,
                cache_dir: None,
            }),
            _ => Err(format!(
                "unknown provider {s:?} (cpu, cuda[:N], tensorrt[:N], tensorrt-fp16[:N])"
            )),
        }
    }
}

impl Provider {
    fn dispatches(&self) -> Vec<ExecutionProviderDispatch> {
        match self {
            Provider::Cpu => vec![ep::CPU::default().build().error_on_failure()],
            Provider::Cuda { device_id } => {
                vec![ep::CUDA::default()
                    .with_device_id(*device_id)
                    .build()
                    .error_on_failure()]
            }
            Provider::TensorRt {
                device_id,
                fp16,
                cache_dir,
            } => {
                let mut trt = ep::TensorRT::default()
                    .with_device_id(*device_id)
                    .with_fp16(*fp16);
                if let Some(dir) = cache_dir {
                    // TensorRT does not create the cache folder itself; a failure here
                    // surfaces as a TensorRT registration error naming the path.
                    let _ = std::fs::create_dir_all(dir);
                    let dir = dir.display().to_string();
                    trt = trt
                        .with_engine_cache(true)
                        .with_engine_cache_path(&dir)
                        .with_timing_cache(true)
                        .with_timing_cache_path(&dir);
                }
                vec![
                    trt.build().error_on_failure(),
                    ep::CUDA::default()
                        .with_device_id(*device_id)
                        .build()
                        .error_on_failure(),
                ]
            }
        }
    }
}

/// Session settings, builder style: `OrtOptions::new().with_provider(Provider::Cuda { device_id: 0 })`.
#[derive(Clone, Debug, Default)]
pub struct OrtOptions {
    /// Threads inside one operator; `None` lets ONNX Runtime pick (all cores).
    pub intra_threads: Option<usize>,
    /// Tried in order; CPU is the last resort whatever the list. Empty means CPU.
    pub execution_providers: Vec<Provider>,
    /// Overrides `ORT_DYLIB_PATH` and the build-time path.
    pub dylib_path: Option<PathBuf>,
}

impl OrtOptions {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_intra_threads(mut self, threads: usize) -> Self {
        self.intra_threads = Some(threads);
        self
    }

    pub fn with_execution_providers(
        mut self,
        providers: impl IntoIterator<Item = Provider>,
    ) -> Self {
        self.execution_providers = providers.into_iter().collect();
        self
    }

    /// Appends one provider to the preference list.
    pub fn with_provider(mut self, provider: Provider) -> Self {
        self.execution_providers.push(provider);
        self
    }

    pub fn with_dylib_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.dylib_path = Some(path.into());
        self
    }
}

/// Where `libonnxruntime` is looked for, in order: the explicit option, `ORT_DYLIB_PATH`,
/// the path recorded at build time, then the plain name (the system loader's search path).
pub fn dylib_candidates(explicit: Option<&Path>) -> Vec<(PathBuf, &'static str)> {
    let mut out = Vec::new();
    if let Some(p) = explicit {
        out.push((p.to_path_buf(), "OrtOptions::dylib_path"));
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

/// The process-wide environment. ort allows exactly one per process and cannot rebuild it
/// once dropped, so it is created once and kept; the mutex serialises the first load.
static ENVIRONMENT: Mutex<Option<Environment>> = Mutex::new(None);

fn environment(explicit: Option<&Path>) -> Result<Environment> {
    let mut slot = ENVIRONMENT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(env) = slot.as_ref() {
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
                *slot = Some(env.clone());
                return Ok(env);
            }
            Err(e) => tried.push(format!("{} ({source}): {e}", path.display())),
        }
    }
    Err(RuntimeError::OrtLibraryNotFound { tried })
}

/// ONNX Runtime engine for one model file: one session, used from one thread at a time.
pub struct OrtEngine {
    session: Session,
    input_name: String,
    output_name: String,
    declared: Vec<Option<usize>>,
    provider: String,
    fallback: Option<String>,
    path: PathBuf,
}

impl OrtEngine {
    pub fn open(path: impl AsRef<Path>, options: &OrtOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        ensure_exists(&path)?;
        let env = environment(options.dylib_path.as_deref())?;

        let mut requested = options.execution_providers.clone();
        if requested.last() != Some(&Provider::Cpu) {
            requested.push(Provider::Cpu);
        }
        let mut failures = Vec::new();
        for provider in &requested {
            match build_session(&env, &path, options, provider) {
                Ok(session) => {
                    let fallback = (!failures.is_empty()).then(|| failures.join("; "));
                    return Self::from_session(session, path, provider.to_string(), fallback);
                }
                // The model itself is broken: every provider would say the same.
                Err(e) if *provider == Provider::Cpu => {
                    let mut message = e.to_string();
                    if !failures.is_empty() {
                        message = format!("{message} (earlier providers: {})", failures.join("; "));
                    }
                    return Err(RuntimeError::InvalidModel { path, message });
                }
                Err(e) => failures.push(format!("{provider} unavailable: {e}")),
            }
        }
        unreachable!("CPU is always the last provider tried")
    }

    fn from_session(
        session: Session,
        path: PathBuf,
        provider: String,
        fallback: Option<String>,
    ) -> Result<Self> {
        let invalid = |message: String| RuntimeError::InvalidModel {
            path: path.clone(),
            message,
        };
        let input = session
            .inputs()
            .first()
            .ok_or_else(|| invalid("model has no input".into()))?;
        let declared = match input.dtype().tensor_shape() {
            Some(shape) => shape.iter().map(|&d| usize::try_from(d).ok()).collect(),
            None => vec![None; 4],
        };
        let input_name = input.name().to_string();
        let outputs = session.outputs();
        let output = outputs
            .iter()
            .find(|o| o.name() == "logits")
            .or_else(|| outputs.first())
            .ok_or_else(|| invalid("model has no output".into()))?;
        let output_name = output.name().to_string();
        Ok(Self {
            session,
            input_name,
            output_name,
            declared,
            provider,
            fallback,
            path,
        })
    }

    /// The model file this engine was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn build_session(
    env: &Environment,
    path: &Path,
    options: &OrtOptions,
    provider: &Provider,
) -> ort::Result<Session> {
    let mut builder = Session::builder(env)?;
    if let Some(n) = options.intra_threads {
        builder = builder
            .with_intra_threads(n)
            .map_err(|e| ort::Error::new(e.to_string()))?;
    }
    builder
        .with_execution_providers(provider.dispatches())
        .map_err(|e| ort::Error::new(e.to_string()))?
        .commit_from_file(path)
}

impl Engine for OrtEngine {
    fn name(&self) -> &str {
        "onnxruntime"
    }

    fn provider(&self) -> &str {
        &self.provider
    }

    fn fallback_reason(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    fn run(&mut self, input: ArrayView4<f32>) -> Result<Array4<f32>> {
        check_input_shape(input.shape(), &self.declared)?;
        let contiguous = input.as_standard_layout();
        let tensor = TensorRef::from_array_view(&contiguous)
            .map_err(|e| RuntimeError::Ort(e.to_string()))?;
        let outputs = self
            .session
            .run(ort::inputs![self.input_name.as_str() => tensor])
            .map_err(|e| RuntimeError::Ort(format!("running {}: {e}", self.path.display())))?;
        let logits = outputs[self.output_name.as_str()]
            .try_extract_array::<f32>()
            .map_err(|e| RuntimeError::OutputShape {
                expected: "f32 logits".into(),
                got: e.to_string(),
            })?;
        check_output_shape(input.shape(), logits.shape())?;
        Ok(logits
            .into_dimensionality::<Ix4>()
            .expect("rank checked")
            .to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_parsing_and_display() {
        assert_eq!(
            "cuda:1".parse::<Provider>().unwrap(),
            Provider::Cuda { device_id: 1 }
        );
        assert_eq!("CPU".parse::<Provider>().unwrap(), Provider::Cpu);
        let trt: Provider = "tensorrt-fp16".parse().unwrap();
        assert_eq!(trt.to_string(), "tensorrt:0(fp16)");
        assert!("tpu".parse::<Provider>().is_err());
    }

    #[test]
    fn candidates_put_explicit_path_first() {
        let c = dylib_candidates(Some(Path::new("/x/libonnxruntime.so")));
        assert_eq!(c[0].0, PathBuf::from("/x/libonnxruntime.so"));
        assert_eq!(c.last().unwrap().0, PathBuf::from("libonnxruntime.so"));
    }
}
