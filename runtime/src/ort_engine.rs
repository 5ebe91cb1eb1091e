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
//! one that was and why the earlier ones were not. With [`OrtOptions::strict`] there is
//! no CPU fallback: a requested provider that does not load is an error.
//!
//! TensorRT: [`TensorRtOptions`] (fp16/int8, engine and timing caches, optimisation
//! profile shapes); profile shapes not given come from the model's `segtool.trt_profile`
//! metadata, which `segtool export` writes for dynamic models.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Mutex;

use ndarray::{Array4, ArrayView4, Ix4};
use ort::environment::Environment;
use ort::ep::{self, ExecutionProviderDispatch};
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef};

use crate::engine::{
    check_input_shape, check_mask_shape, check_nhwc_shape, check_output_shape, ensure_exists,
    mask_to_u8, Engine,
};
use crate::error::{Result, RuntimeError};
use crate::io_contract::{EngineInput, EngineOutput, InputLayout, IoContract, OutputKind};

/// The ONNX Runtime library path recorded when this crate was built (the setup script
/// exports `SEGTOOL_ORT_DYLIB`), used when `ORT_DYLIB_PATH` is not set.
pub const BUILD_TIME_DYLIB: Option<&str> = option_env!("SEGTOOL_ORT_DYLIB");

/// An ONNX Runtime execution provider.
///
/// `Cuda { device_id }` and `TensorRt { .. }` are the short forms (what the provider
/// strings parse to); [`Provider::CudaWith`] and [`Provider::TensorRtWith`] carry every
/// option (see [`OrtOptions::with_cuda`] and [`OrtOptions::with_tensorrt`]).
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
    /// CUDA with all its options.
    CudaWith(CudaOptions),
    /// TensorRT (CUDA behind it, same device) with all its options.
    TensorRtWith(TensorRtOptions),
}

/// CUDA execution provider options, builder style.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaOptions {
    pub device_id: i32,
    /// Cap of the device memory arena, in bytes (`gpu_mem_limit`).
    pub memory_limit: Option<usize>,
}

impl CudaOptions {
    pub fn new(device_id: i32) -> Self {
        Self {
            device_id,
            memory_limit: None,
        }
    }

    pub fn with_memory_limit(mut self, bytes: usize) -> Self {
        self.memory_limit = Some(bytes);
        self
    }

    /// The `ort` builder with these options set.
    pub fn to_ep(&self) -> ep::CUDA {
        let mut cuda = ep::CUDA::default().with_device_id(self.device_id);
        if let Some(limit) = self.memory_limit {
            cuda = cuda.with_memory_limit(limit);
        }
        cuda
    }
}

/// TensorRT execution provider options, builder style.
///
/// Profile shapes use ONNX Runtime's syntax, `input:dims` with `x` between dimensions,
/// e.g. `image:1x3x512x512` (several inputs separated by commas). Left `None`, they are
/// taken from the model's `segtool.trt_profile` metadata (written by `segtool export`
/// for dynamic models) when the engine opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorRtOptions {
    pub device_id: i32,
    pub fp16: bool,
    pub int8: bool,
    /// INT8 calibration table (ONNX Runtime's format, e.g. from its quantisation tools).
    pub int8_calibration_table: Option<PathBuf>,
    /// Keeps built engines between runs (created if missing).
    pub engine_cache_dir: Option<PathBuf>,
    /// Keeps TensorRT's tactic timing cache between runs (created if missing).
    pub timing_cache_dir: Option<PathBuf>,
    pub profile_min_shapes: Option<String>,
    pub profile_opt_shapes: Option<String>,
    pub profile_max_shapes: Option<String>,
}

impl TensorRtOptions {
    pub fn new(device_id: i32) -> Self {
        Self {
            device_id,
            ..Self::default()
        }
    }

    pub fn with_fp16(mut self, fp16: bool) -> Self {
        self.fp16 = fp16;
        self
    }

    pub fn with_int8(mut self, int8: bool) -> Self {
        self.int8 = int8;
        self
    }

    pub fn with_int8_calibration_table(mut self, path: impl Into<PathBuf>) -> Self {
        self.int8_calibration_table = Some(path.into());
        self
    }

    pub fn with_engine_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine_cache_dir = Some(dir.into());
        self
    }

    pub fn with_timing_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.timing_cache_dir = Some(dir.into());
        self
    }

    /// Sets the three optimisation-profile shapes (`image:1x3x512x512` style).
    pub fn with_profile_shapes(
        mut self,
        min: impl Into<String>,
        opt: impl Into<String>,
        max: impl Into<String>,
    ) -> Self {
        self.profile_min_shapes = Some(min.into());
        self.profile_opt_shapes = Some(opt.into());
        self.profile_max_shapes = Some(max.into());
        self
    }

    /// Fills the profile shapes not set from a hint (see [`TrtProfile::from_metadata`]).
    pub fn with_profile_defaults(mut self, hint: Option<&TrtProfile>) -> Self {
        if let Some(h) = hint {
            self.profile_min_shapes.get_or_insert_with(|| h.min.clone());
            self.profile_opt_shapes.get_or_insert_with(|| h.opt.clone());
            self.profile_max_shapes.get_or_insert_with(|| h.max.clone());
        }
        self
    }

    /// The `ort` builder with these options set. Cache folders are not created here
    /// (see [`OrtEngine::open`], which creates them).
    pub fn to_ep(&self) -> ep::TensorRT {
        let mut trt = ep::TensorRT::default()
            .with_device_id(self.device_id)
            .with_fp16(self.fp16);
        if self.int8 {
            trt = trt.with_int8(true);
        }
        if let Some(table) = &self.int8_calibration_table {
            // ONNX Runtime joins the name to the engine cache path; an absolute path
            // survives that join.
            let table = std::path::absolute(table).unwrap_or_else(|_| table.clone());
            trt = trt.with_int8_calibration_table_name(table.display());
        }
        if let Some(dir) = &self.engine_cache_dir {
            trt = trt
                .with_engine_cache(true)
                .with_engine_cache_path(dir.display());
        }
        if let Some(dir) = &self.timing_cache_dir {
            trt = trt
                .with_timing_cache(true)
                .with_timing_cache_path(dir.display());
        }
        if let Some(s) = &self.profile_min_shapes {
            trt = trt.with_profile_min_shapes(s);
        }
        if let Some(s) = &self.profile_opt_shapes {
            trt = trt.with_profile_opt_shapes(s);
        }
        if let Some(s) = &self.profile_max_shapes {
            trt = trt.with_profile_max_shapes(s);
        }
        trt
    }
}

/// metadata_props key of the TensorRT profile hint written by `segtool export`.
pub const TRT_PROFILE_KEY: &str = "segtool.trt_profile";

/// TensorRT optimisation-profile shapes in ONNX Runtime's syntax (`image:1x3x128x128`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrtProfile {
    pub min: String,
    pub opt: String,
    pub max: String,
}

impl TrtProfile {
    /// Parses the JSON hint `{"input": "image", "min": [..], "opt": [..], "max": [..]}`.
    pub fn from_json(json: &str) -> Option<Self> {
        let v: serde_json::Value = serde_json::from_str(json).ok()?;
        let input = v.get("input")?.as_str()?;
        let dims = |key: &str| -> Option<String> {
            let dims = v
                .get(key)?
                .as_array()?
                .iter()
                .map(|d| d.as_i64().map(|d| d.to_string()))
                .collect::<Option<Vec<_>>>()?;
            Some(format!("{input}:{}", dims.join("x")))
        };
        Some(Self {
            min: dims("min")?,
            opt: dims("opt")?,
            max: dims("max")?,
        })
    }

    /// The hint in a model's metadata, if it has one (static models do not).
    pub fn from_metadata(path: &Path) -> Option<Self> {
        crate::engine::read_metadata(path)
            .ok()?
            .into_iter()
            .find(|(k, _)| k == TRT_PROFILE_KEY)
            .and_then(|(_, v)| Self::from_json(&v))
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provider::Cpu => f.write_str("cpu"),
            Provider::Cuda { device_id } => write!(f, "cuda:{device_id}"),
            Provider::CudaWith(o) => write!(f, "cuda:{}", o.device_id),
            Provider::TensorRt { .. } | Provider::TensorRtWith(_) => {
                let o = self.tensorrt_options(None).expect("a TensorRT provider");
                let precision = match (o.int8, o.fp16) {
                    (true, true) => "(int8+fp16)",
                    (true, false) => "(int8)",
                    (false, true) => "(fp16)",
                    (false, false) => "",
                };
                write!(f, "tensorrt:{}{precision}", o.device_id)
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
    /// The full CUDA options of a CUDA provider.
    pub fn cuda_options(&self) -> Option<CudaOptions> {
        match self {
            Provider::Cuda { device_id } => Some(CudaOptions::new(*device_id)),
            Provider::CudaWith(o) => Some(o.clone()),
            _ => None,
        }
    }

    /// The full TensorRT options of a TensorRT provider, profile shapes not given
    /// filled from `hint`.
    pub fn tensorrt_options(&self, hint: Option<&TrtProfile>) -> Option<TensorRtOptions> {
        let o = match self {
            Provider::TensorRt {
                device_id,
                fp16,
                cache_dir,
            } => TensorRtOptions {
                device_id: *device_id,
                fp16: *fp16,
                engine_cache_dir: cache_dir.clone(),
                timing_cache_dir: cache_dir.clone(),
                ..TensorRtOptions::default()
            },
            Provider::TensorRtWith(o) => o.clone(),
            _ => return None,
        };
        Some(o.with_profile_defaults(hint))
    }

    /// Short name without device, as in errors: `cpu`, `cuda`, `tensorrt`.
    pub fn kind(&self) -> &'static str {
        match self {
            Provider::Cpu => "cpu",
            Provider::Cuda { .. } | Provider::CudaWith(_) => "cuda",
            Provider::TensorRt { .. } | Provider::TensorRtWith(_) => "tensorrt",
        }
    }

    fn dispatches(&self, hint: Option<&TrtProfile>) -> Vec<ExecutionProviderDispatch> {
        if let Some(cuda) = self.cuda_options() {
            return vec![cuda.to_ep().build().error_on_failure()];
        }
        if let Some(trt) = self.tensorrt_options(hint) {
            // TensorRT does not create its cache folders; a failure here surfaces as a
            // TensorRT registration error naming the path.
            for dir in [&trt.engine_cache_dir, &trt.timing_cache_dir]
                .into_iter()
                .flatten()
            {
                let _ = std::fs::create_dir_all(dir);
            }
            return vec![
                trt.to_ep().build().error_on_failure(),
                CudaOptions::new(trt.device_id)
                    .to_ep()
                    .build()
                    .error_on_failure(),
            ];
        }
        vec![ep::CPU::default().build().error_on_failure()]
    }
}

/// Session settings, builder style: `OrtOptions::new().with_provider(Provider::Cuda { device_id: 0 })`.
#[derive(Clone, Debug, Default)]
pub struct OrtOptions {
    /// Threads inside one operator; `None` lets ONNX Runtime pick (all cores).
    pub intra_threads: Option<usize>,
    /// Tried in order; CPU is the last resort whatever the list (unless `strict`).
    /// Empty means CPU.
    pub execution_providers: Vec<Provider>,
    /// Overrides `ORT_DYLIB_PATH` and the build-time path: when set, only this file is
    /// tried.
    pub dylib_path: Option<PathBuf>,
    /// Only the listed providers: no implicit CPU fallback. When none of them works,
    /// opening fails with an error naming each and why.
    pub strict: bool,
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

    /// Appends CUDA with all its options.
    pub fn with_cuda(self, options: CudaOptions) -> Self {
        self.with_provider(Provider::CudaWith(options))
    }

    /// Appends TensorRT with all its options.
    pub fn with_tensorrt(self, options: TensorRtOptions) -> Self {
        self.with_provider(Provider::TensorRtWith(options))
    }

    pub fn with_dylib_path(mut self, path: impl Into<PathBuf>) -> Self {
        self.dylib_path = Some(path.into());
        self
    }

    /// A requested provider that is unavailable is an error instead of a reported
    /// fallback to CPU.
    pub fn strict(mut self, strict: bool) -> Self {
        self.strict = strict;
        self
    }
}

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

fn environment(explicit: Option<&Path>) -> Result<Environment> {
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

/// ONNX Runtime engine for one model file: one session, used from one thread at a time.
pub struct OrtEngine {
    session: Session,
    input_name: String,
    output_name: String,
    declared: Vec<Option<usize>>,
    /// What the graph's input/output element types and ranks say.
    contract: IoContract,
    provider: String,
    fallback: Option<String>,
    path: PathBuf,
}

impl OrtEngine {
    /// Opens `path` with the first requested provider that works. Without
    /// [`OrtOptions::strict`], CPU is tried last and a fallback is reported by
    /// [`Engine::fallback_reason`]; with it, failing every listed provider is an error.
    /// TensorRT profile shapes not given are taken from the model's metadata.
    pub fn open(path: impl AsRef<Path>, options: &OrtOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        ensure_exists(&path)?;
        let env = environment(options.dylib_path.as_deref())?;

        let mut requested = options.execution_providers.clone();
        if requested.is_empty() || (!options.strict && requested.last() != Some(&Provider::Cpu)) {
            requested.push(Provider::Cpu);
        }
        let hint = requested
            .iter()
            .any(|p| p.kind() == "tensorrt")
            .then(|| TrtProfile::from_metadata(&path))
            .flatten();
        let mut failures = Vec::new();
        for (i, provider) in requested.iter().enumerate() {
            let last = i + 1 == requested.len();
            match build_session(&env, &path, options, provider, hint.as_ref()) {
                Ok(session) => {
                    let fallback = (!failures.is_empty()).then(|| failures.join("; "));
                    return Self::from_session(session, path, provider.to_string(), fallback);
                }
                // The model itself is broken: every provider would say the same.
                Err(e) if *provider == Provider::Cpu && last => {
                    let mut message = e.to_string();
                    if !failures.is_empty() {
                        message = format!("{message} (earlier providers: {})", failures.join("; "));
                    }
                    return Err(RuntimeError::InvalidModel { path, message });
                }
                Err(e) => failures.push(format!("{provider} unavailable: {e}")),
            }
        }
        Err(RuntimeError::Ort(format!(
            "no requested execution provider is available for {} (strict: no CPU \
             fallback): {}",
            path.display(),
            failures.join("; ")
        )))
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
        let input_layout = match input.dtype().tensor_type() {
            Some(TensorElementType::Uint8) => InputLayout::NhwcU8,
            _ => InputLayout::NchwF32,
        };
        let input_name = input.name().to_string();
        let outputs = session.outputs();
        let output = outputs
            .iter()
            .find(|o| o.name() == "logits" || o.name() == "mask")
            .or_else(|| outputs.first())
            .ok_or_else(|| invalid("model has no output".into()))?;
        let output_kind = match (
            output.dtype().tensor_type(),
            output.dtype().tensor_shape().map(|s| s.len()),
        ) {
            (Some(TensorElementType::Float32), _) => OutputKind::Logits,
            (Some(TensorElementType::Uint8 | TensorElementType::Int64), Some(3)) => {
                OutputKind::Mask
            }
            (ty, rank) => {
                return Err(invalid(format!(
                    "output {:?} is {ty:?} of rank {rank:?}: expected f32 logits \
                     [N, classes, H, W] or a uint8/int64 class map [N, H, W]",
                    output.name()
                )))
            }
        };
        let output_name = output.name().to_string();
        Ok(Self {
            session,
            input_name,
            output_name,
            declared,
            contract: IoContract {
                input: input_layout,
                output: output_kind,
            },
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
    hint: Option<&TrtProfile>,
) -> ort::Result<Session> {
    let mut builder = Session::builder(env)?;
    if let Some(n) = options.intra_threads {
        builder = builder
            .with_intra_threads(n)
            .map_err(|e| ort::Error::new(e.to_string()))?;
    }
    builder
        .with_execution_providers(provider.dispatches(hint))
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

    fn io_contract(&self) -> Option<IoContract> {
        Some(self.contract)
    }

    fn run(&mut self, input: ArrayView4<f32>) -> Result<Array4<f32>> {
        match self.run_io(EngineInput::NchwF32(input))? {
            EngineOutput::Logits(l) => Ok(l),
            EngineOutput::Mask(_) => Err(RuntimeError::OutputShape {
                expected: "f32 logits (Engine::run); use Engine::run_io for models exported \
                           with --argmax"
                    .into(),
                got: "a class map".into(),
            }),
        }
    }

    fn run_io(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let contract_error = |got: &str| RuntimeError::InputShape {
            expected: format!("{} input ({})", self.contract, self.path.display()),
            got: got.to_string(),
        };
        let n = input.dims().0;
        let outputs = match input {
            EngineInput::NchwF32(x) => {
                if self.contract.input != InputLayout::NchwF32 {
                    return Err(contract_error("f32 NCHW"));
                }
                check_input_shape(x.shape(), &self.declared)?;
                let contiguous = x.as_standard_layout();
                let tensor = TensorRef::from_array_view(&contiguous)
                    .map_err(|e| RuntimeError::Ort(e.to_string()))?;
                self.session
                    .run(ort::inputs![self.input_name.as_str() => tensor])
            }
            EngineInput::NhwcU8(x) => {
                if self.contract.input != InputLayout::NhwcU8 {
                    return Err(contract_error("uint8 NHWC"));
                }
                check_nhwc_shape(x.shape(), &self.declared)?;
                let contiguous = x.as_standard_layout();
                let tensor = TensorRef::from_array_view(&contiguous)
                    .map_err(|e| RuntimeError::Ort(e.to_string()))?;
                self.session
                    .run(ort::inputs![self.input_name.as_str() => tensor])
            }
        }
        .map_err(|e| RuntimeError::Ort(format!("running {}: {e}", self.path.display())))?;
        let value = &outputs[self.output_name.as_str()];
        if self.contract.output == OutputKind::Mask {
            let mask = match value.try_extract_array::<u8>() {
                Ok(m) => mask_to_u8(m)?,
                Err(_) => mask_to_u8(value.try_extract_array::<i64>().map_err(|e| {
                    RuntimeError::OutputShape {
                        expected: "a uint8 or int64 class map".into(),
                        got: e.to_string(),
                    }
                })?)?,
            };
            check_mask_shape(n, mask.shape())?;
            return Ok(EngineOutput::Mask(mask));
        }
        let logits = value
            .try_extract_array::<f32>()
            .map_err(|e| RuntimeError::OutputShape {
                expected: "f32 logits".into(),
                got: e.to_string(),
            })?;
        check_output_shape(&[n], logits.shape())?;
        Ok(EngineOutput::Logits(
            logits
                .into_dimensionality::<Ix4>()
                .expect("rank checked")
                .to_owned(),
        ))
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

    #[test]
    fn tensorrt_options_reach_the_ort_builder() {
        let o = TensorRtOptions::new(1)
            .with_fp16(true)
            .with_int8(true)
            .with_int8_calibration_table("/cal/table.flatbuffers")
            .with_engine_cache_dir("/cache/engines")
            .with_timing_cache_dir("/cache/timing")
            .with_profile_shapes("image:1x3x64x64", "image:1x3x256x256", "image:4x3x512x512");
        let dbg = format!("{:?}", o.to_ep());
        for kv in [
            r#""device_id": "1""#,
            r#""trt_fp16_enable": "true""#,
            r#""trt_int8_enable": "true""#,
            r#""trt_int8_calibration_table_name": "/cal/table.flatbuffers""#,
            r#""trt_engine_cache_enable": "true""#,
            r#""trt_engine_cache_path": "/cache/engines""#,
            r#""trt_timing_cache_enable": "true""#,
            r#""trt_timing_cache_path": "/cache/timing""#,
            r#""trt_profile_min_shapes": "image:1x3x64x64""#,
            r#""trt_profile_opt_shapes": "image:1x3x256x256""#,
            r#""trt_profile_max_shapes": "image:4x3x512x512""#,
        ] {
            assert!(dbg.contains(kv), "{kv} missing from {dbg}");
        }
        let plain = format!("{:?}", TensorRtOptions::new(0).to_ep());
        assert!(
            !plain.contains("trt_profile") && !plain.contains("int8"),
            "{plain}"
        );

        let cuda = format!(
            "{:?}",
            CudaOptions::new(2).with_memory_limit(1 << 30).to_ep()
        );
        assert!(cuda.contains(r#""gpu_mem_limit": "1073741824""#), "{cuda}");
        assert!(cuda.contains(r#""device_id": "2""#), "{cuda}");

        let p = Provider::TensorRtWith(o.clone());
        assert_eq!(p.to_string(), "tensorrt:1(int8+fp16)");
        assert_eq!(
            OrtOptions::new()
                .with_tensorrt(o)
                .strict(true)
                .execution_providers,
            vec![p]
        );
    }

    #[test]
    fn profile_hint_fills_only_missing_shapes() {
        let json = r#"{"input":"image","layout":"NCHW","min":[1,3,128,128],"opt":[1,3,512,1024],"max":[8,3,1024,2048],"trtexec":""}"#;
        let hint = TrtProfile::from_json(json).unwrap();
        assert_eq!(hint.min, "image:1x3x128x128");
        assert_eq!(hint.max, "image:8x3x1024x2048");
        let short: Provider = "tensorrt-fp16:0".parse().unwrap();
        let o = short.tensorrt_options(Some(&hint)).unwrap();
        assert!(o.fp16);
        assert_eq!(o.profile_opt_shapes.as_deref(), Some("image:1x3x512x1024"));
        let mine = TensorRtOptions {
            profile_max_shapes: Some("image:2x3x64x64".into()),
            ..TensorRtOptions::default()
        }
        .with_profile_defaults(Some(&hint));
        assert_eq!(mine.profile_max_shapes.as_deref(), Some("image:2x3x64x64"));
        assert_eq!(
            mine.profile_min_shapes.as_deref(),
            Some("image:1x3x128x128")
        );
        assert!(TrtProfile::from_json("{}").is_none());
    }
}
