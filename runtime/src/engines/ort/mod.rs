//! The ONNX Runtime engine: CPU, CUDA or TensorRT, chosen at run time.
//!
//! `ort` is built with `load-dynamic`: nothing native is linked, `libonnxruntime.so` is
//! opened on first use (see `dylib::dylib_candidates` for where it is looked for). The same
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
//!
//! Fixed input size ([`OrtOptions::with_fixed_input_size`]): ONNX Runtime's CPU memory
//! planner reuses a buffer in place (a residual block's sum written over its input) only
//! when it can prove both have the same shape. Its NCHWc convolutions lose symbolic
//! dimensions in shape inference, so in a dynamic-shape graph no residual is done in place;
//! fixing `height`/`width` through free-dimension overrides makes every shape concrete
//! (measured on ResNet-50 DANet at 512x1024: peak RSS 862 -> 642 MiB, same logits).
//! `segtool infer` does this by itself when every input has one size.
//!
//! After a session is built the process's freed heap is handed back to the OS
//! (`malloc_trim`, glibc): ONNX Runtime frees the parsed model's weight buffers once its
//! layout passes have repacked them, but glibc keeps those pages, about 90% of the weight
//! size for a ResNet-50 DANet (171 MiB of 190 MB), for the life of the process.
//!
//! This module holds [`OrtOptions`] and [`OrtEngine`] (session building, I/O contract,
//! running); `providers.rs` the execution providers and their options, `dylib.rs` the
//! library search and the process-wide environment. Both are re-exported here.

pub mod doctor;
mod dylib;
mod placement;
mod providers;

use std::path::{Path, PathBuf};

use ndarray::Ix4;
use ort::environment::Environment;
use ort::session::Session;
use ort::value::{TensorElementType, TensorRef};

use crate::engines::{
    check_input_shape, check_mask_shape, check_nhwc_shape, check_output_shape, ensure_exists,
    mask_to_u16, Engine,
};
use crate::error::{Result, RuntimeError};
use crate::engines::io_contract::{EngineInput, EngineOutput, InputLayout, IoContract, OutputKind};
use segtool_onnx::ModelFileError;
use segtool_onnx::{ModelFile, ModelIo};

pub use placement::{NodePlacement, PlacedNode};
pub use providers::{CudaOptions, Provider, TensorRtOptions, TrtProfile, TRT_PROFILE_KEY};

pub(crate) use dylib::dylib_candidates;
pub use dylib::environment;

/// Session settings, builder style: `OrtOptions::new().with_provider(Provider::Cuda { device_id: 0 })`.
///
/// ```no_run
/// use segtool_runtime::{CudaOptions, OrtOptions, Provider, Segmenter, TensorRtOptions};
/// let options = OrtOptions::new()
///     .with_tensorrt(TensorRtOptions::new(0).with_fp16(true).with_engine_cache_dir("trt-cache"))
///     .with_cuda(CudaOptions::new(0))
///     .with_provider(Provider::Cpu) // the last resort
///     .with_intra_threads(4);
/// let seg = Segmenter::builder("danet.onnx").ort_options(options).open()?;
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
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
    /// `(height, width)` the model's symbolic input height and width are fixed to (ONNX
    /// Runtime free-dimension overrides); inputs of another size are then refused. `None`
    /// keeps the model's dynamic shape.
    pub fixed_input_size: Option<(usize, usize)>,
    /// ONNX Runtime's profiler on, its trace written under this path prefix (ORT appends
    /// a timestamp); [`OrtEngine::end_profiling`] closes it and says which provider ran
    /// each node.
    pub profiling: Option<PathBuf>,
    /// The graph input to feed and output to read (a model card's); `None`: the first
    /// input, and the output named `logits` or `mask`, else the first.
    pub io_names: Option<(String, String)>,
}

impl OrtOptions {
    /// The defaults: ONNX Runtime's thread count, CPU only, the library searched as
    /// `dylib::dylib_candidates` lists, the model's dynamic input size.
    pub fn new() -> Self {
        Self::default()
    }

    /// Feeds input `input` and reads output `output` (a model card's names).
    pub fn with_io_names(mut self, input: impl Into<String>, output: impl Into<String>) -> Self {
        self.io_names = Some((input.into(), output.into()));
        self
    }

    /// Threads inside one operator ([`OrtOptions::intra_threads`]).
    pub fn with_intra_threads(mut self, threads: usize) -> Self {
        self.intra_threads = Some(threads);
        self
    }

    /// Replaces the provider preference list (tried in order).
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

    /// Loads ONNX Runtime from this file only ([`OrtOptions::dylib_path`]).
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

    /// Builds sessions for inputs of exactly `height` x `width` (the batch stays
    /// dynamic): the input's symbolic height/width are fixed, so ONNX Runtime plans memory
    /// with concrete shapes (in-place residuals, less memory). Dimensions the model
    /// already fixes must agree; an input of another size is an error at run time.
    pub fn with_fixed_input_size(mut self, height: usize, width: usize) -> Self {
        self.fixed_input_size = Some((height, width));
        self
    }

    /// Profiles the session into a trace under `prefix` ([`OrtOptions::profiling`]).
    pub fn with_profiling(mut self, prefix: impl Into<PathBuf>) -> Self {
        self.profiling = Some(prefix.into());
        self
    }
}

/// ONNX Runtime engine for one model file: one session, used from one thread at a time.
///
/// # Example
///
/// ```no_run
/// use segtool_runtime::expert::{load_spec, normalise, run_logits, Engine, OrtEngine};
/// use segtool_runtime::{OrtOptions, Provider};
/// let options = OrtOptions::new().with_provider(Provider::Cuda { device_id: 0 });
/// let mut engine = OrtEngine::open("model.onnx", &options)?;
/// if let Some(why) = engine.fallback_reason() {
///     eprintln!("running on {}: {why}", engine.provider()); // e.g. "cpu: cuda:0 unavailable ..."
/// }
/// let spec = load_spec("model.onnx")?;
/// let x = normalise(&image::RgbImage::new(640, 480), &spec);
/// let logits = run_logits(&mut engine, x.view())?; // [1, classes, 480, 640]
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
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
    ///
    /// Reads the file's metadata and I/O only when the options need them (a TensorRT
    /// provider, a fixed input size), so any ONNX file opens, segtool's or not; a
    /// segtool model already read is opened with [`OrtEngine::open_model`].
    pub fn open(path: impl AsRef<Path>, options: &OrtOptions) -> Result<Self> {
        let path = path.as_ref();
        let hint = match wants_tensorrt(options) {
            true => trt_hint(&segtool_onnx::read_props(path)?, path)?,
            false => None,
        };
        let io = match options.fixed_input_size {
            Some(_) => Some(segtool_onnx::read_io(path)?),
            None => None,
        };
        Self::open_with(path, options, hint, io.as_ref())
    }

    /// [`OrtEngine::open`] for a model already read: its TensorRT hint and graph I/O come
    /// from `model`, the file is not scanned again.
    pub fn open_model(model: &ModelFile, options: &OrtOptions) -> Result<Self> {
        let hint = model.metadata.trt_profile.as_ref().map(TrtProfile::from);
        Self::open_with(&model.path, options, hint, Some(&model.io))
    }

    fn open_with(
        path: &Path,
        options: &OrtOptions,
        hint: Option<TrtProfile>,
        io: Option<&ModelIo>,
    ) -> Result<Self> {
        let path = path.to_path_buf();
        ensure_exists(&path)?;
        let env = environment(options.dylib_path.as_deref())?;

        let mut requested = options.execution_providers.clone();
        if requested.is_empty() || (!options.strict && requested.last() != Some(&Provider::Cpu)) {
            requested.push(Provider::Cpu);
        }
        let overrides = match (options.fixed_input_size, io) {
            (Some((h, w)), Some(io)) => fixed_size_overrides(&path, io, h, w)?,
            _ => Vec::new(),
        };
        let mut failures = Vec::new();
        for (i, provider) in requested.iter().enumerate() {
            let last = i + 1 == requested.len();
            match build_session(&env, &path, options, &overrides, provider, hint.as_ref()) {
                Ok(session) => {
                    // The parsed model's weight buffers, freed once repacked (module docs).
                    crate::memory::release_freed_heap();
                    let fallback = (!failures.is_empty()).then(|| failures.join("; "));
                    return Self::from_session(
                        session,
                        path,
                        provider.to_string(),
                        fallback,
                        options.io_names.as_ref(),
                    );
                }
                // The model itself is broken: every provider would say the same.
                Err(e) if *provider == Provider::Cpu && last => {
                    let mut message = e.to_string();
                    if !failures.is_empty() {
                        message = format!("{message} (earlier providers: {})", failures.join("; "));
                    }
                    return Err(RuntimeError::File(ModelFileError::Invalid {
                        path,
                        message,
                    }));
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
        io_names: Option<&(String, String)>,
    ) -> Result<Self> {
        let invalid = |message: String| {
            RuntimeError::File(ModelFileError::Invalid {
                path: path.clone(),
                message,
            })
        };
        let named = |names: Vec<&str>, want: &str, what: &str| {
            invalid(format!(
                "the card's {what} {want:?} is not in the graph (its {what}s: {names:?})"
            ))
        };
        let input = match io_names {
            Some((want, _)) => session
                .inputs()
                .iter()
                .find(|i| i.name() == want)
                .ok_or_else(|| {
                    named(
                        session.inputs().iter().map(|i| i.name()).collect(),
                        want,
                        "input",
                    )
                })?,
            None => session
                .inputs()
                .first()
                .ok_or_else(|| invalid("model has no input".into()))?,
        };
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
        let output = match io_names {
            Some((_, want)) => outputs
                .iter()
                .find(|o| o.name() == want)
                .ok_or_else(|| named(outputs.iter().map(|o| o.name()).collect(), want, "output"))?,
            None => outputs
                .iter()
                .find(|o| o.name() == "logits" || o.name() == "mask")
                .or_else(|| outputs.first())
                .ok_or_else(|| invalid("model has no output".into()))?,
        };
        let output_kind = match (
            output.dtype().tensor_type(),
            output.dtype().tensor_shape().map(|s| s.len()),
        ) {
            (Some(TensorElementType::Float32), _) => OutputKind::Logits,
            (
                Some(
                    TensorElementType::Uint8 | TensorElementType::Int32 | TensorElementType::Int64,
                ),
                Some(3 | 4),
            ) => OutputKind::Mask,
            (ty, rank) => {
                return Err(invalid(format!(
                    "output {:?} is {ty:?} of rank {rank:?}: expected f32 logits \
                     [N, classes, H, W] or a uint8/int32/int64 class map [N, H, W] or [N, 1, H, W]",
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

    /// Ends the profiling [`OrtOptions::with_profiling`] started and reads, from ONNX
    /// Runtime's trace, which provider ran each node of the runs so far.
    pub fn end_profiling(&mut self) -> Result<NodePlacement> {
        let file = self
            .session
            .end_profiling()
            .map_err(|e| RuntimeError::Ort(format!("ending the profile: {e}")))?;
        let trace = std::fs::read_to_string(&file).map_err(|e| {
            RuntimeError::Ort(format!("reading ONNX Runtime's profile {file}: {e}"))
        })?;
        NodePlacement::parse(&trace)
    }
}

fn build_session(
    env: &Environment,
    path: &Path,
    options: &OrtOptions,
    overrides: &[(String, i64)],
    provider: &Provider,
    hint: Option<&TrtProfile>,
) -> ort::Result<Session> {
    let mut builder = Session::builder(env)?;
    if let Some(n) = options.intra_threads {
        builder = builder
            .with_intra_threads(n)
            .map_err(|e| ort::Error::new(e.to_string()))?;
    }
    if let Some(prefix) = &options.profiling {
        builder = builder
            .with_profiling(prefix)
            .map_err(|e| ort::Error::new(e.to_string()))?;
    }
    for (name, size) in overrides {
        builder = builder
            .with_dimension_override(name, *size)
            .map_err(|e| ort::Error::new(e.to_string()))?;
    }
    builder
        .with_execution_providers(provider.dispatches(hint))
        .map_err(|e| ort::Error::new(e.to_string()))?
        .commit_from_file(path)
}

/// The free-dimension overrides that fix the first input's height and width: `(symbol,
/// size)` for each of the two that is symbolic. A dimension the model fixes to another
/// size is an error; an unnamed dynamic one cannot be overridden and stays dynamic.
fn fixed_size_overrides(
    path: &Path,
    io: &ModelIo,
    height: usize,
    width: usize,
) -> Result<Vec<(String, i64)>> {
    let input = &io.inputs[0];
    let (h_axis, w_axis) = match input.elem_type {
        2 => (1, 2), // uint8 NHWC (--preprocess exports)
        _ => (2, 3),
    };
    if input.dims.len() != 4 {
        return Err(RuntimeError::File(ModelFileError::Invalid {
            path: path.into(),
            message: format!(
                "input {:?} has rank {}: a fixed input size needs a 4-D image input",
                input.name,
                input.dims.len()
            ),
        }));
    }
    let mut overrides = Vec::new();
    for (axis, want, side) in [(h_axis, height, "height"), (w_axis, width, "width")] {
        match (input.dims[axis], &input.dim_names[axis]) {
            (Some(fixed), _) if fixed != want as i64 => {
                return Err(RuntimeError::InputShape {
                    expected: format!(
                        "{side} {fixed} (fixed in {}, input {:?})",
                        path.display(),
                        input.name
                    ),
                    got: format!("a fixed input {side} of {want}"),
                })
            }
            (None, Some(symbol)) => overrides.push((symbol.clone(), want as i64)),
            _ => {}
        }
    }
    Ok(overrides)
}

fn wants_tensorrt(options: &OrtOptions) -> bool {
    options
        .execution_providers
        .iter()
        .any(|p| p.kind() == "tensorrt")
}

/// The model's TensorRT profile hint, read from raw metadata (an error when malformed).
fn trt_hint(props: &[(String, String)], path: &Path) -> Result<Option<TrtProfile>> {
    let Some((_, json)) = props.iter().find(|(k, _)| k == TRT_PROFILE_KEY) else {
        return Ok(None);
    };
    let hint = segtool_onnx::TrtProfileHint::from_json(json).map_err(|message| {
        RuntimeError::from(segtool_onnx::ModelFileError::Metadata {
            path: path.into(),
            key: TRT_PROFILE_KEY,
            message,
        })
    })?;
    Ok(Some(TrtProfile::from(&hint)))
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

    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
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
            let mask = if let Ok(m) = value.try_extract_array::<u8>() {
                mask_to_u16(m)?
            } else if let Ok(m) = value.try_extract_array::<i32>() {
                mask_to_u16(m)?
            } else {
                mask_to_u16(value.try_extract_array::<i64>().map_err(|e| {
                    RuntimeError::OutputShape {
                        expected: "a uint8, int32 or int64 class map".into(),
                        got: e.to_string(),
                    }
                })?)?
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
