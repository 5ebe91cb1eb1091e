//! OpenVINO's options: the device, the precision of float32 layers, the performance hint
//! and streams ([`OpenVinoOptions`]). In every build, also without the `openvino`
//! feature, so that [`crate::SegmenterOptions`] has the same fields everywhere; the
//! engine itself is [`crate::expert::OpenVinoEngine`].

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Where OpenVINO compiles the model: its device names, as `benchmark_app -d` takes them.
///
/// ```
/// use segtool_runtime::openvino::Device;
/// let device: Device = "npu".parse()?; // any case, as benchmark_app's -d
/// assert_eq!(device.as_str(), "NPU");
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Device {
    /// The CPU plugin (AVX2, AVX-512, AMX).
    #[default]
    Cpu,
    /// An Intel GPU (integrated or discrete), the first one.
    Gpu,
    /// An Intel NPU (Core Ultra).
    Npu,
    /// OpenVINO's automatic device selection (it may start on the CPU and move on).
    Auto,
}

impl Device {
    /// OpenVINO's name for it: `CPU`, `GPU`, `NPU`, `AUTO`.
    pub fn as_str(self) -> &'static str {
        match self {
            Device::Cpu => "CPU",
            Device::Gpu => "GPU",
            Device::Npu => "NPU",
            Device::Auto => "AUTO",
        }
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Device {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_uppercase().as_str() {
            "CPU" => Ok(Device::Cpu),
            "GPU" => Ok(Device::Gpu),
            "NPU" => Ok(Device::Npu),
            "AUTO" => Ok(Device::Auto),
            _ => Err(format!(
                "unknown OpenVINO device {s:?} (CPU, GPU, NPU, AUTO)"
            )),
        }
    }
}

/// The precision OpenVINO computes a float32 model in (its `INFERENCE_PRECISION_HINT`).
/// INT8 (QDQ) files run their quantised layers in INT8 either way.
///
/// # Example
///
/// ```
/// use segtool_runtime::openvino::{OpenVinoOptions, Precision};
/// let precision: Precision = "bf16".parse()?; // `--precision bf16`
/// let options = OpenVinoOptions { precision, ..OpenVinoOptions::new() };
/// assert_eq!(Precision::default(), Precision::F32); // segtool's default, whatever the CPU
/// // The same name in a configuration file (`SegmenterOptions`' `precision`).
/// assert_eq!(serde_json::from_str::<Precision>(r#""bf16""#)?, options.precision);
/// assert!("fp16".parse::<Precision>().is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// float32 throughout: the same numbers as ONNX Runtime up to float32 rounding.
    /// segtool's default, also on CPUs where OpenVINO's own default is bf16 (AMX).
    #[default]
    F32,
    /// bfloat16 where the device has it (AMX, AVX-512 BF16): several times faster on such
    /// CPUs, labels close to float32's (the report says how many nodes ran in it).
    Bf16,
}

impl Precision {
    /// `f32` or `bf16`, as OpenVINO names them.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            _ => Err(format!("unknown precision {s:?} (f32, bf16)")),
        }
    }
}

/// What OpenVINO tunes its streams and threads for (its `PERFORMANCE_HINT`).
///
/// # Example
///
/// ```
/// use segtool_runtime::openvino::{OpenVinoOptions, PerformanceHint};
/// // A batch server with two workers wants throughput; a robot's camera, latency.
/// let hint: PerformanceHint = "throughput".parse()?; // `--hint throughput`
/// let options = OpenVinoOptions { hint, streams: Some(2), ..OpenVinoOptions::new() };
/// assert_eq!(serde_json::to_string(&options.hint)?, r#""throughput""#);
/// assert_eq!(PerformanceHint::default().to_string(), "latency");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PerformanceHint {
    /// One request as soon as possible (a robot's camera).
    #[default]
    Latency,
    /// Many requests at once (a batch server with several streams).
    Throughput,
}

impl PerformanceHint {
    /// `latency` or `throughput`.
    pub fn as_str(self) -> &'static str {
        match self {
            PerformanceHint::Latency => "latency",
            PerformanceHint::Throughput => "throughput",
        }
    }
}

impl fmt::Display for PerformanceHint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PerformanceHint {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "latency" => Ok(PerformanceHint::Latency),
            "throughput" => Ok(PerformanceHint::Throughput),
            _ => Err(format!(
                "unknown performance hint {s:?} (latency, throughput)"
            )),
        }
    }
}

/// How an OpenVINO engine compiles and runs a model. Start from [`OpenVinoOptions::new`].
///
/// ```
/// use segtool_runtime::openvino::{Device, OpenVinoOptions, PerformanceHint, Precision};
/// let options = OpenVinoOptions {
///     device: Device::Cpu,
///     precision: "bf16".parse::<Precision>()?,
///     hint: PerformanceHint::Throughput,
///     streams: Some(2), // for a batch server with two workers
///     threads: Some(4),
///     ..OpenVinoOptions::new()
/// };
/// assert_eq!(options.precision, Precision::Bf16);
/// # Ok::<(), String>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpenVinoOptions {
    /// The device to compile for.
    pub device: Device,
    /// The inference precision of float32 layers.
    pub precision: Precision,
    /// Threads of the CPU plugin (`INFERENCE_NUM_THREADS`); `None`: OpenVINO's choice.
    pub threads: Option<usize>,
    /// Latency or throughput.
    pub hint: PerformanceHint,
    /// Parallel inference streams (`NUM_STREAMS`); `None`: what the hint picks.
    pub streams: Option<usize>,
    /// `libopenvino_c.so*` to load; `None`: `OPENVINO_LIB`, then the library the set-up
    /// found (the pinned `openvino` wheel), then the loader's search path.
    pub library: Option<PathBuf>,
    /// The graph input to feed and output to read (a model card's); `None`: the first
    /// of each.
    pub io_names: Option<(String, String)>,
    /// No fallback: a device that is absent is an error, not the CPU.
    pub strict: bool,
}

impl OpenVinoOptions {
    /// The defaults: the CPU, float32, latency, OpenVINO's thread count.
    pub fn new() -> Self {
        Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for d in [Device::Cpu, Device::Gpu, Device::Npu, Device::Auto] {
            assert_eq!(d.as_str().parse::<Device>(), Ok(d));
            assert_eq!(d.as_str().to_lowercase().parse::<Device>(), Ok(d));
        }
        for p in [Precision::F32, Precision::Bf16] {
            assert_eq!(p.as_str().parse::<Precision>(), Ok(p));
        }
        for h in [PerformanceHint::Latency, PerformanceHint::Throughput] {
            assert_eq!(h.as_str().parse::<PerformanceHint>(), Ok(h));
        }
        assert!("TPU"
            .parse::<Device>()
            .unwrap_err()
            .contains("CPU, GPU, NPU, AUTO"));
        assert!("fp16"
            .parse::<Precision>()
            .unwrap_err()
            .contains("f32, bf16"));
    }
}
