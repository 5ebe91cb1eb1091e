//! The element's properties: their GObject specs, the settings they fill, and how the
//! settings become a runtime configuration.

use gst::glib;
use gst::prelude::*;
use segtool_runtime::accuracy::{AccuracyOptions, Protocol};
use segtool_runtime::openvino::{Device, Precision};
use segtool_runtime::{EngineKind, Provider};

/// Which engine runs the model (the `engine` property).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, glib::Enum)]
#[enum_type(name = "GstSegtoolSegEngine")]
pub enum EngineChoice {
    /// The engine timed fastest for the model on this machine (cached); OpenVINO for bf16.
    #[default]
    #[enum_value(
        name = "Auto: the engine timed fastest for the model on this machine",
        nick = "auto"
    )]
    Auto,
    /// ONNX Runtime (CPU, CUDA, TensorRT).
    #[enum_value(name = "ONNX Runtime", nick = "ort")]
    Ort,
    /// tract: pure Rust, CPU.
    #[enum_value(name = "tract (pure Rust, CPU)", nick = "tract")]
    Tract,
    /// OpenVINO: Intel CPUs, iGPUs, NPUs.
    #[enum_value(name = "OpenVINO (Intel CPU, GPU, NPU)", nick = "openvino")]
    OpenVino,
}

impl From<EngineChoice> for EngineKind {
    fn from(e: EngineChoice) -> Self {
        match e {
            EngineChoice::Auto => EngineKind::Auto,
            EngineChoice::Ort => EngineKind::Ort,
            EngineChoice::Tract => EngineKind::Tract,
            EngineChoice::OpenVino => EngineKind::OpenVino,
        }
    }
}

/// What the element outputs (the `output` property).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, glib::Enum)]
#[enum_type(name = "GstSegtoolSegOutput")]
pub enum OutputMode {
    /// The frame with the palette-coloured mask blended in (`alpha`).
    #[default]
    #[enum_value(
        name = "Overlay: the frame with the colour mask blended",
        nick = "overlay"
    )]
    Overlay,
    /// The palette-coloured mask alone, in the frame's format.
    #[enum_value(name = "Color: the palette mask", nick = "color")]
    Color,
    /// The class ids: GRAY8, or GRAY16 for models with more than 255 classes.
    #[enum_value(
        name = "Mask: class ids as GRAY8 (GRAY16 above 255 classes)",
        nick = "mask"
    )]
    Mask,
}

/// Everything the properties set.
#[derive(Debug, Clone)]
pub struct Settings {
    pub model: Option<String>,
    /// A model card (TOML) for an ONNX file segtool did not write.
    pub card: Option<String>,
    pub engine: EngineChoice,
    pub providers: String,
    /// OpenVINO's device and precision, as the runtime names them (`CPU`, `bf16`).
    pub device: String,
    pub precision: String,
    pub threads: u32,
    pub output: OutputMode,
    pub alpha: f64,
    pub live: bool,
    pub deadline_ms: u32,
    pub smooth: f64,
    pub protocol: String,
    pub base_size: u32,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: None,
            card: None,
            engine: EngineChoice::Auto,
            providers: String::new(),
            device: "CPU".into(),
            precision: "f32".into(),
            threads: 0,
            output: OutputMode::Overlay,
            alpha: segtool_runtime::DEFAULT_ALPHA as f64,
            live: false,
            deadline_ms: 0,
            smooth: 0.0,
            protocol: String::new(),
            base_size: 0,
        }
    }
}

impl Settings {
    /// The `providers` property as the runtime's providers (empty: the engine's default).
    pub fn providers(&self) -> Result<Vec<Provider>, String> {
        self.providers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect()
    }

    /// The `device` and `precision` properties as the runtime's values.
    pub fn openvino(&self) -> Result<(Device, Precision), String> {
        Ok((self.device.parse()?, self.precision.parse()?))
    }

    /// Accuracy mode's options, when `protocol` is set.
    pub fn accuracy(&self) -> Result<Option<AccuracyOptions>, String> {
        let protocol = match self.protocol.trim() {
            "" | "none" => return Ok(None),
            "danet" => Protocol::Danet,
            "mmseg" => Protocol::Mmseg,
            other => return Err(format!("unknown protocol {other:?} (danet, mmseg, none)")),
        };
        let base = (self.base_size > 0).then_some(self.base_size as usize);
        Ok(Some(
            AccuracyOptions::new().protocol(protocol).base_size(base),
        ))
    }
}

/// The property specs, in the order `gst-inspect-1.0` lists them.
pub fn specs() -> Vec<glib::ParamSpec> {
    let d = Settings::default();
    vec![
        glib::ParamSpecString::builder("model")
            .nick("Model")
            .blurb("Path of the exported model (.onnx written by `segtool export`)")
            .build(),
        glib::ParamSpecString::builder("card")
            .nick("Model card")
            .blurb(
                "A model card (TOML) for an ONNX file segtool did not write: input \
                 normalisation, channel order, output kind, classes (default: the file's \
                 own metadata, or MODEL.segtool.toml beside it)",
            )
            .build(),
        glib::ParamSpecEnum::builder_with_default("engine", d.engine)
            .nick("Engine")
            .blurb(
                "Engine running the model: auto (the engine timed fastest for the model on this machine, cached), ort, tract, openvino",
            )
            .build(),
        glib::ParamSpecString::builder("providers")
            .nick("Providers")
            .blurb(
                "ONNX Runtime execution providers in order of preference, e.g. \
                 \"cuda:0,cpu\" or \"tensorrt:0,cuda:0,cpu\" (empty: cpu)",
            )
            .default_value(Some(""))
            .build(),
        glib::ParamSpecString::builder("device")
            .nick("Device")
            .blurb("OpenVINO's device: CPU, GPU, NPU or AUTO (an absent one falls back to the CPU)")
            .default_value(Some("CPU"))
            .build(),
        glib::ParamSpecString::builder("precision")
            .nick("Precision")
            .blurb("OpenVINO's precision for float32 layers: f32, or bf16 (AMX, AVX-512 BF16)")
            .default_value(Some("f32"))
            .build(),
        glib::ParamSpecUInt::builder("threads")
            .nick("Threads")
            .blurb("Engine threads (0: the engine's default)")
            .maximum(1024)
            .default_value(d.threads)
            .build(),
        glib::ParamSpecEnum::builder_with_default("output", d.output)
            .nick("Output")
            .blurb("overlay (frame with the colour mask), color (palette mask) or mask (class ids)")
            .build(),
        glib::ParamSpecDouble::builder("alpha")
            .nick("Alpha")
            .blurb("Opacity of the mask in overlay output")
            .minimum(0.0)
            .maximum(1.0)
            .default_value(d.alpha)
            .mutable_playing()
            .build(),
        glib::ParamSpecBoolean::builder("live")
            .nick("Live")
            .blurb(
                "Newest frame wins: frames arriving while the engine is busy are dropped \
                 (counted in stats and reported on the bus) instead of queueing",
            )
            .default_value(d.live)
            .build(),
        glib::ParamSpecUInt::builder("deadline-ms")
            .nick("Deadline (ms)")
            .blurb("Live mode: a frame not started within this many ms is dropped (0: none)")
            .default_value(d.deadline_ms)
            .mutable_playing()
            .build(),
        glib::ParamSpecDouble::builder("smooth")
            .nick("Temporal smoothing")
            .blurb("Share of history in the logits' moving average, in [0, 1) (0: off)")
            .minimum(0.0)
            .maximum(0.99)
            .default_value(d.smooth)
            .build(),
        glib::ParamSpecString::builder("protocol")
            .nick("Accuracy protocol")
            .blurb("Accuracy mode: the evaluation protocol, danet or mmseg (empty: off)")
            .default_value(Some(""))
            .build(),
        glib::ParamSpecUInt::builder("base-size")
            .nick("Base size")
            .blurb("Accuracy mode, danet protocol: the long side at scale 1.0 (0: the frame's)")
            .default_value(d.base_size)
            .build(),
        glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
            .nick("Statistics")
            .blurb(
                "segtool/stats: frames-in, answered, dropped, flushed, failed, \
                 latency-p50-ms, latency-p99-ms, provider",
            )
            .read_only()
            .build(),
    ]
}

/// Sets one property from `value` (the GObject machinery checked its type).
pub fn set(settings: &mut Settings, name: &str, value: &glib::Value) {
    match name {
        "model" => settings.model = value.get::<Option<String>>().expect("type checked"),
        "card" => settings.card = value.get::<Option<String>>().expect("type checked"),
        "engine" => settings.engine = value.get().expect("type checked"),
        "providers" => {
            settings.providers = value
                .get::<Option<String>>()
                .expect("type checked")
                .unwrap_or_default()
        }
        "device" => {
            let text = value.get::<Option<String>>().expect("type checked");
            settings.device = text.unwrap_or_else(|| Settings::default().device);
        }
        "precision" => {
            let text = value.get::<Option<String>>().expect("type checked");
            settings.precision = text.unwrap_or_else(|| Settings::default().precision);
        }
        "threads" => settings.threads = value.get().expect("type checked"),
        "output" => settings.output = value.get().expect("type checked"),
        "alpha" => settings.alpha = value.get().expect("type checked"),
        "live" => settings.live = value.get().expect("type checked"),
        "deadline-ms" => settings.deadline_ms = value.get().expect("type checked"),
        "smooth" => settings.smooth = value.get().expect("type checked"),
        "protocol" => {
            settings.protocol = value
                .get::<Option<String>>()
                .expect("type checked")
                .unwrap_or_default()
        }
        "base-size" => settings.base_size = value.get().expect("type checked"),
        _ => {}
    }
}

/// Reads one property (all but `stats`).
pub fn get(settings: &Settings, name: &str) -> Option<glib::Value> {
    Some(match name {
        "model" => settings.model.to_value(),
        "card" => settings.card.to_value(),
        "engine" => settings.engine.to_value(),
        "providers" => settings.providers.to_value(),
        "device" => settings.device.to_value(),
        "precision" => settings.precision.to_value(),
        "threads" => settings.threads.to_value(),
        "output" => settings.output.to_value(),
        "alpha" => settings.alpha.to_value(),
        "live" => settings.live.to_value(),
        "deadline-ms" => settings.deadline_ms.to_value(),
        "smooth" => settings.smooth.to_value(),
        "protocol" => settings.protocol.to_value(),
        "base-size" => settings.base_size.to_value(),
        _ => return None,
    })
}
