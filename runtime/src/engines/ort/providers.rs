//! Execution providers and their options: [`Provider`] (with its string form, `cuda:1`,
//! `tensorrt-fp16:0`, ... via `FromStr` / `Display`), [`CudaOptions`], [`TensorRtOptions`]
//! and the TensorRT optimisation-profile hint [`TrtProfile`] read from a model's metadata.
//! Kept apart from the engine because it is pure configuration: it turns what the user
//! asked for into `ort` execution-provider builders and never touches a session.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use ort::ep::{self, ExecutionProviderDispatch};

/// An ONNX Runtime execution provider.
///
/// ```
/// use segtool_runtime::Provider;
/// let providers: Vec<Provider> = ["tensorrt:0", "cuda:0", "cpu"]
///     .iter()
///     .map(|p| p.parse())
///     .collect::<Result<_, _>>()?;
/// assert_eq!(providers[1], Provider::Cuda { device_id: 0 });
/// # Ok::<(), String>(())
/// ```
///
/// `Cuda { device_id }` and `TensorRt { .. }` are the short forms (what the provider
/// strings parse to); [`Provider::CudaWith`] and [`Provider::TensorRtWith`] carry every
/// option (see [`OrtOptions::with_cuda`](super::OrtOptions::with_cuda) and
/// [`OrtOptions::with_tensorrt`](super::OrtOptions::with_tensorrt)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Provider {
    /// ONNX Runtime's CPU provider (always available; the implicit last resort).
    Cpu,
    /// CUDA on one device, default options.
    Cuda {
        /// CUDA device ordinal (`0`: the first visible GPU).
        device_id: i32,
    },
    /// TensorRT, with CUDA registered behind it for the nodes TensorRT does not take.
    /// `cache_dir` keeps built engines (and timing caches) between runs: building one
    /// takes minutes for DANet-R101.
    TensorRt {
        /// CUDA device ordinal.
        device_id: i32,
        /// Let TensorRT build fp16 kernels (the interface stays float32).
        fp16: bool,
        /// Engine and timing cache folder (created if missing); `None`: nothing kept.
        cache_dir: Option<PathBuf>,
    },
    /// CUDA with all its options.
    CudaWith(CudaOptions),
    /// TensorRT (CUDA behind it, same device) with all its options.
    TensorRtWith(TensorRtOptions),
}

/// CUDA execution provider options, builder style.
///
/// # Example
///
/// ```
/// use segtool_runtime::{CudaOptions, OrtOptions, Provider};
/// // The second GPU, its arena capped at 4 GiB (a GPU shared with other processes).
/// let cuda = CudaOptions::new(1).with_memory_limit(4 << 30);
/// let options = OrtOptions::new().with_cuda(cuda.clone());
/// assert_eq!(options.execution_providers[0].to_string(), "cuda:1");
/// // The short form `cuda:1` is the same device with the default options.
/// let short: Provider = "cuda:1".parse()?;
/// assert_eq!(short.cuda_options(), Some(CudaOptions { memory_limit: None, ..cuda }));
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// CUDA device ordinal.
    pub device_id: i32,
    /// Cap of the device memory arena, in bytes (`gpu_mem_limit`).
    pub memory_limit: Option<usize>,
}

impl CudaOptions {
    /// Device `device_id`, no memory cap.
    pub fn new(device_id: i32) -> Self {
        Self {
            device_id,
            memory_limit: None,
        }
    }

    /// Caps the device memory arena at `bytes`.
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
///
/// # Example
///
/// ```
/// use segtool_runtime::{OrtOptions, Provider, TensorRtOptions};
/// let trt = TensorRtOptions::new(0)
///     .with_fp16(true)
///     .with_engine_cache_dir("trt-cache") // building an engine takes minutes: keep it
///     .with_timing_cache_dir("trt-cache")
///     .with_profile_shapes("image:1x3x512x512", "image:4x3x512x1024", "image:8x3x1024x2048");
/// assert_eq!(Provider::TensorRtWith(trt.clone()).to_string(), "tensorrt:0(fp16)");
/// let options = OrtOptions::new().with_tensorrt(trt); // then CUDA, then the CPU
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TensorRtOptions {
    /// CUDA device ordinal (TensorRT and the CUDA provider behind it).
    pub device_id: i32,
    /// Let TensorRT build fp16 kernels (the interface stays float32).
    pub fp16: bool,
    /// Let TensorRT build int8 kernels; needs a calibration table for a plain model.
    pub int8: bool,
    /// INT8 calibration table: ONNX Runtime's format (e.g. from its quantisation tools),
    /// or TensorRT's native text cache when `int8_native_calibration_table` is set.
    pub int8_calibration_table: Option<PathBuf>,
    /// The table is TensorRT's own cache (`TRT-...-EntropyCalibration2` header, as
    /// `segtool calibrate --trt-cache` writes), not ONNX Runtime's flatbuffer table.
    pub int8_native_calibration_table: bool,
    /// Keeps built engines between runs (created if missing).
    pub engine_cache_dir: Option<PathBuf>,
    /// Keeps TensorRT's tactic timing cache between runs (created if missing).
    pub timing_cache_dir: Option<PathBuf>,
    /// Smallest input shape of the optimisation profile (`image:1x3x128x128`).
    pub profile_min_shapes: Option<String>,
    /// Input shape TensorRT tunes its kernels for.
    pub profile_opt_shapes: Option<String>,
    /// Largest input shape the engine accepts.
    pub profile_max_shapes: Option<String>,
}

impl TensorRtOptions {
    /// Device `device_id`, fp32, no caches, profile from the model's metadata.
    pub fn new(device_id: i32) -> Self {
        Self {
            device_id,
            ..Self::default()
        }
    }

    /// fp16 kernels (see [`TensorRtOptions::fp16`]).
    pub fn with_fp16(mut self, fp16: bool) -> Self {
        self.fp16 = fp16;
        self
    }

    /// int8 kernels (see [`TensorRtOptions::int8`]).
    pub fn with_int8(mut self, int8: bool) -> Self {
        self.int8 = int8;
        self
    }

    /// INT8 calibration table in ONNX Runtime's format (does not set `int8` itself).
    pub fn with_int8_calibration_table(mut self, path: impl Into<PathBuf>) -> Self {
        self.int8_calibration_table = Some(path.into());
        self
    }

    /// INT8 with TensorRT's native calibration cache, e.g. `segtool calibrate --trt-cache`.
    pub fn with_tensorrt_calibration_cache(mut self, path: impl Into<PathBuf>) -> Self {
        self.int8 = true;
        self.int8_calibration_table = Some(path.into());
        self.int8_native_calibration_table = true;
        self
    }

    /// Keeps built engines in `dir` between runs.
    pub fn with_engine_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.engine_cache_dir = Some(dir.into());
        self
    }

    /// Keeps the tactic timing cache in `dir` between runs.
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

    /// Fills the profile shapes not set from a hint (the model's `segtool.trt_profile`, see [`TrtProfile`]).
    pub fn with_profile_defaults(mut self, hint: Option<&TrtProfile>) -> Self {
        if let Some(h) = hint {
            self.profile_min_shapes.get_or_insert_with(|| h.min.clone());
            self.profile_opt_shapes.get_or_insert_with(|| h.opt.clone());
            self.profile_max_shapes.get_or_insert_with(|| h.max.clone());
        }
        self
    }

    /// The `ort` builder with these options set. Cache folders are not created here
    /// (see [`OrtEngine::open`](super::OrtEngine::open), which creates them).
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
            if self.int8_native_calibration_table {
                trt = trt.with_int8_use_native_calibration_table(true);
            }
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

pub use segtool_onnx::metadata::TRT_PROFILE_KEY;

/// TensorRT optimisation-profile shapes in ONNX Runtime's syntax (`image:1x3x128x128`),
/// from a model's [`TrtProfileHint`](segtool_onnx::TrtProfileHint).
///
/// # Example
///
/// ```
/// use segtool_runtime::{TensorRtOptions, TrtProfile};
/// // What `segtool export` records for a dynamic model (`OrtEngine::open` reads it) ...
/// let hint = TrtProfile {
///     min: "image:1x3x256x256".into(),
///     opt: "image:1x3x512x1024".into(),
///     max: "image:4x3x1024x2048".into(),
/// };
/// // ... fills the profile shapes the options leave open.
/// let trt = TensorRtOptions {
///     profile_opt_shapes: Some("image:1x3x720x1280".into()), // a 720p camera
///     ..TensorRtOptions::new(0)
/// }
/// .with_profile_defaults(Some(&hint));
/// assert_eq!(trt.profile_opt_shapes.as_deref(), Some("image:1x3x720x1280"));
/// assert_eq!(trt.profile_max_shapes, Some(hint.max));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TrtProfile {
    /// Smallest shape.
    pub min: String,
    /// Shape TensorRT tunes for.
    pub opt: String,
    /// Largest shape.
    pub max: String,
}

impl From<&segtool_onnx::TrtProfileHint> for TrtProfile {
    fn from(hint: &segtool_onnx::TrtProfileHint) -> Self {
        let (min, opt, max) = hint.ort_shapes();
        Self { min, opt, max }
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

    pub(super) fn dispatches(&self, hint: Option<&TrtProfile>) -> Vec<ExecutionProviderDispatch> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engines::ort::OrtOptions;

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
        let native = format!(
            "{:?}",
            TensorRtOptions::new(0)
                .with_tensorrt_calibration_cache("/cal/m.calib")
                .to_ep()
        );
        for kv in [
            r#""trt_int8_enable": "true""#,
            r#""trt_int8_calibration_table_name": "/cal/m.calib""#,
            r#""trt_int8_use_native_calibration_table": "true""#,
        ] {
            assert!(native.contains(kv), "{kv} missing from {native}");
        }
        assert!(!dbg.contains("native"), "{dbg}");

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
        let hint = TrtProfile::from(&segtool_onnx::TrtProfileHint::from_json(json).unwrap());
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
        assert!(segtool_onnx::TrtProfileHint::from_json("{}").is_err());
    }
}
