//! [`OpenVinoEngine`]: a model compiled by OpenVINO for a CPU (AVX2, AVX-512, AMX), an
//! Intel GPU or NPU, or `AUTO`, through its C API loaded at run time (`libopenvino_c`
//! from the pinned `openvino` wheel; see [`library`]). Nothing links at build time.
//!
//! Accepts what the other engines accept: normalised f32 NCHW or uint8 NHWC input,
//! logits or a class map out, any batch and size the graph allows (OpenVINO compiles
//! dynamic shapes). Float32 layers run in the precision asked for (`f32`, or `bf16` on
//! hardware that has it); the precision each node actually ran in is read back from the
//! compiled graph ([`OpenVinoEngine::node_precisions`]). A device that is not present is
//! an error when strict, else the model runs on the CPU and says why.

mod ffi;
pub mod library;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::fmt;
use std::path::{Path, PathBuf};

use ndarray::{Array4, ArrayD, ArrayView4, IxDyn};
use segtool_onnx::ModelIo;

use self::ffi::{Element, Tensor};
use crate::engines::Engine;
use crate::engines::{check_input_shape, check_nhwc_shape, check_output_shape, mask_to_u16};
use crate::error::{Result, RuntimeError};
use crate::engines::io_contract::{EngineInput, EngineOutput, InputLayout, IoContract, OutputKind};
use crate::engines::openvino_options::{Device, OpenVinoOptions, Precision};

/// A model compiled by OpenVINO (see the module docs).
///
/// # Example
///
/// ```no_run
/// use segtool_runtime::expert::{load_spec, normalise, run_logits, OpenVinoEngine};
/// use segtool_runtime::openvino::{OpenVinoOptions, Precision};
/// let options = OpenVinoOptions { precision: Precision::Bf16, ..OpenVinoOptions::new() };
/// let mut engine = OpenVinoEngine::open("model.onnx", &options)?;
/// let spec = load_spec("model.onnx")?;
/// let x = normalise(&image::RgbImage::new(640, 480), &spec);
/// let logits = run_logits(&mut engine, x.view())?;
/// // e.g. "OpenVINO 2026.4.1-...: nodes by precision: bf16 118, f32 9"
/// println!("OpenVINO {}: {}", engine.version(), engine.node_precisions()?);
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
pub struct OpenVinoEngine {
    // Declared before what they were made from: fields drop in order.
    request: ffi::InferRequest,
    compiled: ffi::CompiledModel,
    _core: ffi::Core,
    input: CString,
    output: CString,
    contract: IoContract,
    declared: Vec<Option<usize>>,
    path: PathBuf,
    provider: String,
    fallback: Option<String>,
    version: String,
}

/// The precision each node of the compiled graph ran in (`f32`, `bf16`, `int8`, `i32`...),
/// read from the kernel the plugin chose for it; fused nodes are left out.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::NodePrecisions;
/// // What `OpenVinoEngine::node_precisions` reads back from a model compiled for bf16.
/// let precisions = NodePrecisions {
///     nodes: vec![
///         ("conv1".into(), "bf16".into()),
///         ("conv2".into(), "bf16".into()),
///         ("argmax".into(), "i32".into()),
///     ],
/// };
/// assert_eq!(precisions.counts()["bf16"], 2);
/// assert_eq!(precisions.to_string(), "nodes by precision: bf16 2, i32 1");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePrecisions {
    /// `(node name, precision)`, in the compiled graph's order.
    pub nodes: Vec<(String, String)>,
}

impl NodePrecisions {
    /// How many nodes ran in each precision.
    pub fn counts(&self) -> BTreeMap<&str, usize> {
        let mut counts = BTreeMap::new();
        for (_, precision) in &self.nodes {
            *counts.entry(precision.as_str()).or_insert(0) += 1;
        }
        counts
    }
}

impl fmt::Display for NodePrecisions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let counts = self.counts();
        let mut counts: Vec<(&&str, &usize)> = counts.iter().collect();
        counts.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let parts: Vec<String> = counts.iter().map(|(p, n)| format!("{p} {n}")).collect();
        write!(f, "nodes by precision: {}", parts.join(", "))
    }
}

impl OpenVinoEngine {
    /// Compiles the model at `path` with `options`; the graph's first input and output
    /// unless `options.io_names` names others.
    pub fn open(path: impl AsRef<Path>, options: &OpenVinoOptions) -> Result<Self> {
        let path = path.as_ref();
        let io = segtool_onnx::read_io(path)?;
        Self::open_io(path, &io, options)
    }

    /// [`open`](Self::open) with the graph's inputs and outputs already read.
    pub fn open_io(path: &Path, io: &ModelIo, options: &OpenVinoOptions) -> Result<Self> {
        let version = library::load(options.library.as_deref())?;
        let failed = |what: String| RuntimeError::OpenVino(format!("{}: {what}", path.display()));
        let core = ffi::Core::new().map_err(failed)?;
        let (device, fallback) = pick_device(&core, options).map_err(|why| match why {
            DeviceMissing::Refused(why) => RuntimeError::FallbackRefused {
                path: path.to_path_buf(),
                fallback: why,
            },
            DeviceMissing::Failed(e) => failed(e),
        })?;
        let model = core.read_model(path).map_err(failed)?;
        let properties = properties(device, options)?;
        let compiled = core
            .compile(&model, device.as_str(), &properties)
            .map_err(|e| failed(format!("{e} (device {device}, {properties:?})")))?;
        let provider = compiled
            .property("EXECUTION_DEVICES")
            .map_err(failed)?
            .trim_matches(|c| c == '(' || c == ')' || c == '"')
            .to_lowercase();
        let request = compiled.request().map_err(failed)?;
        let (input, output) = match &options.io_names {
            Some((i, o)) => (i.clone(), o.clone()),
            None => first_io(io).ok_or_else(|| failed("no graph input or output".into()))?,
        };
        let declared = io
            .inputs
            .iter()
            .find(|t| t.name == input)
            .map(|t| t.dims.iter().map(|d| d.map(|d| d as usize)).collect())
            .unwrap_or_default();
        let cstr = |s: String| CString::new(s).map_err(|_| failed("a tensor name with NUL".into()));
        Ok(Self {
            request,
            compiled,
            _core: core,
            input: cstr(input)?,
            output: cstr(output)?,
            contract: io.contract().unwrap_or_default(),
            declared,
            path: path.to_path_buf(),
            provider,
            fallback,
            version,
        })
    }

    /// OpenVINO's build number, e.g. `2026.4.1-22982-e213a147257`.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The inference precision the compiled model reports (`f32`, `bf16`).
    pub fn inference_precision(&self) -> Result<String> {
        self.compiled
            .property("INFERENCE_PRECISION_HINT")
            .map_err(RuntimeError::OpenVino)
    }

    /// How many nodes ran in each precision, from the kernels the plugin chose (the
    /// runtime model's `runtimePrecision`). Call after a run.
    pub fn node_precisions(&self) -> Result<NodePrecisions> {
        let mut nodes = Vec::new();
        for row in self.request.nodes().map_err(RuntimeError::OpenVino)? {
            let precision = precision_class(row.exec_type.rsplit('_').next().unwrap_or_default());
            if precision.is_empty() || precision == "undef" || row.name.is_empty() {
                continue;
            }
            nodes.push((row.name, precision));
        }
        Ok(NodePrecisions { nodes })
    }

    fn read_output(&self, n: usize) -> Result<EngineOutput> {
        let failed = |e: String| self.failed(e);
        let tensor = self.request.get(&self.output).map_err(failed)?;
        let dims = tensor.dims().map_err(failed)?;
        let element = tensor.element().map_err(failed)?;
        let shape = IxDyn(&dims);
        let wrong = |what: &str| RuntimeError::OutputShape {
            expected: what.into(),
            got: format!("{element:?} {dims:?}"),
        };
        if self.contract.output == OutputKind::Mask {
            let mask = match element {
                Some(Element::U8) => mask_to_u16(array(shape, tensor.to_vec::<u8>())?.view())?,
                Some(Element::I32) => mask_to_u16(array(shape, tensor.to_vec::<i32>())?.view())?,
                Some(Element::I64) => mask_to_u16(array(shape, tensor.to_vec::<i64>())?.view())?,
                _ => return Err(wrong("a uint8, int32 or int64 class map")),
            };
            crate::engines::check_mask_shape(n, mask.shape())?;
            return Ok(EngineOutput::Mask(mask));
        }
        if element != Some(Element::F32) {
            return Err(wrong("f32 logits"));
        }
        check_output_shape(&[n], &dims)?;
        let logits = Array4::from_shape_vec(
            (dims[0], dims[1], dims[2], dims[3]),
            tensor.to_vec::<f32>().map_err(failed)?,
        )
        .map_err(|e| wrong(&e.to_string()))?;
        Ok(EngineOutput::Logits(logits))
    }
}

/// A kernel's precision as the report counts it: lower case, and `int8` for either
/// signedness (a quantising reorder's kernel says `I8` where the runtime model's
/// `runtimePrecision` says `u8`: the same INT8 work).
pub fn precision_class(kernel: &str) -> String {
    match kernel.to_lowercase().as_str() {
        "i8" | "u8" => "int8".into(),
        other => other.into(),
    }
}

fn array<T>(shape: IxDyn, data: std::result::Result<Vec<T>, String>) -> Result<ArrayD<T>> {
    let data = data.map_err(RuntimeError::OpenVino)?;
    ArrayD::from_shape_vec(shape, data).map_err(|e| RuntimeError::OutputShape {
        expected: "an output whose size matches its shape".into(),
        got: e.to_string(),
    })
}

fn first_io(io: &ModelIo) -> Option<(String, String)> {
    Some((
        io.inputs.first()?.name.clone(),
        io.outputs.first()?.name.clone(),
    ))
}

enum DeviceMissing {
    /// Strict: the fallback to the CPU, refused.
    Refused(String),
    /// Listing the devices failed.
    Failed(String),
}

/// The device to compile for: the one asked for when OpenVINO finds it (`GPU` matches
/// `GPU.0`), else the CPU with the reason (refused when strict).
fn pick_device(
    core: &ffi::Core,
    options: &OpenVinoOptions,
) -> std::result::Result<(Device, Option<String>), DeviceMissing> {
    let wanted = options.device;
    if wanted == Device::Auto || wanted == Device::Cpu {
        return Ok((wanted, None));
    }
    let found = core.devices().map_err(DeviceMissing::Failed)?;
    let name = wanted.as_str();
    if found
        .iter()
        .any(|d| d == name || d.starts_with(&format!("{name}.")))
    {
        return Ok((wanted, None));
    }
    let why = format!(
        "OpenVINO finds no {name} on this machine (devices: {})",
        found.join(", ")
    );
    if options.strict {
        return Err(DeviceMissing::Refused(why));
    }
    Ok((Device::Cpu, Some(why)))
}

/// The compile properties for `device`: each one only where the device takes it. An
/// option set for a device that does not take it is refused by name, never dropped.
fn properties(device: Device, options: &OpenVinoOptions) -> Result<Vec<(&'static str, String)>> {
    let refuse = |name: &'static str, takes: &str| RuntimeError::Option {
        name,
        message: format!("OpenVINO's {device} device does not take it (only {takes} do)"),
    };
    let mut out = vec![("PERFORMANCE_HINT", options.hint.as_str().to_uppercase())];
    if matches!(device, Device::Cpu | Device::Gpu) {
        out.push((
            "INFERENCE_PRECISION_HINT",
            options.precision.as_str().into(),
        ));
        if let Some(n) = options.streams {
            out.push(("NUM_STREAMS", n.to_string()));
        }
    } else if options.precision != Precision::F32 {
        return Err(refuse("precision", "CPU and GPU"));
    } else if options.streams.is_some() {
        return Err(refuse("streams", "CPU and GPU"));
    }
    match (device, options.threads) {
        (Device::Cpu, Some(n)) => out.push(("INFERENCE_NUM_THREADS", n.to_string())),
        (_, Some(_)) => return Err(refuse("threads", "the CPU")),
        (_, None) => {}
    }
    Ok(out)
}

impl Engine for OpenVinoEngine {
    fn name(&self) -> &str {
        "openvino"
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
        let n = input.dims().0;
        let layout_error = |got: &str| RuntimeError::InputShape {
            expected: format!("{} input ({})", self.contract, self.path.display()),
            got: got.to_string(),
        };
        match input {
            EngineInput::NchwF32(x) => {
                if self.contract.input != InputLayout::NchwF32 {
                    return Err(layout_error("f32 NCHW"));
                }
                check_input_shape(x.shape(), &self.declared)?;
                self.infer(Element::F32, x)?;
            }
            EngineInput::NhwcU8(x) => {
                if self.contract.input != InputLayout::NhwcU8 {
                    return Err(layout_error("uint8 NHWC"));
                }
                check_nhwc_shape(x.shape(), &self.declared)?;
                self.infer(Element::U8, x)?;
            }
        }
        self.read_output(n)
    }

    fn ran_in(&self) -> Option<String> {
        self.node_precisions().ok().map(|p| p.to_string())
    }
}

impl OpenVinoEngine {
    /// One inference on `x` (its elements are `element`s), read in place when contiguous.
    fn infer<T>(&mut self, element: Element, x: ArrayView4<'_, T>) -> Result<()>
    where
        T: Clone,
    {
        let x = x.as_standard_layout();
        // SAFETY: `x` holds the shape's elements and outlives the inference below; the
        // next run sets a new tensor before inferring again.
        let tensor = unsafe { Tensor::borrowed(element, x.shape(), x.as_ptr().cast()) }
            .map_err(|e| self.failed(e))?;
        self.request
            .set(&self.input, &tensor)
            .map_err(|e| self.failed(e))?;
        self.request.infer().map_err(|e| self.failed(e))
    }

    /// OpenVINO's message, naming the model.
    fn failed(&self, e: String) -> RuntimeError {
        RuntimeError::OpenVino(format!("{}: {e}", self.path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_a_device_does_not_take_are_refused_by_name() {
        let with = |f: fn(&mut OpenVinoOptions)| {
            let mut o = OpenVinoOptions::new();
            f(&mut o);
            o
        };
        let cpu = properties(Device::Cpu, &with(|o| o.threads = Some(2))).unwrap();
        assert!(
            cpu.contains(&("INFERENCE_NUM_THREADS", "2".into())),
            "{cpu:?}"
        );
        type Case = (Device, fn(&mut OpenVinoOptions), &'static str);
        let cases: [Case; 4] = [
            (Device::Npu, |o| o.precision = Precision::Bf16, "precision"),
            (Device::Auto, |o| o.streams = Some(2), "streams"),
            (Device::Gpu, |o| o.threads = Some(2), "threads"),
            (Device::Npu, |o| o.threads = Some(1), "threads"),
        ];
        for (device, set, name) in cases {
            match properties(device, &with(set)) {
                Err(RuntimeError::Option { name: n, message }) => {
                    assert_eq!(n, name, "{message}");
                    assert!(message.contains(device.as_str()), "{message}");
                }
                other => panic!("{device} with {name}: {other:?}"),
            }
        }
        let gpu = properties(Device::Gpu, &with(|o| o.streams = Some(2))).unwrap();
        assert!(gpu.contains(&("NUM_STREAMS", "2".into())), "{gpu:?}");
    }
}
