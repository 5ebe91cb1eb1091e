//! The element's properties: their GObject specs, the settings they fill, and how the
//! settings become the runtime's configuration. The properties that open the model are
//! the runtime's `SegmenterOptions` under the same names (dashes for underscores, as
//! GStreamer spells them: `fixed-size`) and with the same defaults.

use std::path::PathBuf;

use gst::glib;
use gst::prelude::*;
use segtool_runtime::pipeline::accuracy::{AccuracyOptions, Protocol};
use segtool_runtime::{EngineKind, RuntimeError, SegmenterOptions};

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
    /// Comma separated, as the runtime names them (`cuda:0,cpu`).
    pub providers: String,
    /// OpenVINO's device, precision and hint, as the runtime names them (`CPU`, `bf16`,
    /// `throughput`).
    pub device: String,
    pub precision: String,
    pub hint: String,
    /// 0: what the hint picks.
    pub streams: u32,
    /// 0: the engine's default.
    pub threads: u32,
    pub strict: bool,
    /// `HxW`, or empty for any size.
    pub fixed_size: String,
    /// Each frame's logits in its meta.
    pub logits: bool,
    pub output: OutputMode,
    pub alpha: f64,
    pub live: bool,
    pub deadline_ms: u32,
    pub smooth: f64,
    pub protocol: String,
    pub base_size: u32,
    /// Elements with the same id share one model (empty: a model of its own).
    pub model_instance_id: String,
    /// A shared model's largest batch (frames of different elements in one run).
    pub max_batch: u32,
    /// How long a shared model's forming batch waits for other elements' frames.
    pub max_wait_ms: u32,
}

/// A shared model's batches: at most 4 frames, formed within 2 ms (the runtime's
/// default wait: a lone live camera loses at most that).
pub const DEFAULT_MAX_BATCH: u32 = 4;
pub const DEFAULT_MAX_WAIT_MS: u32 = 2;

impl Default for Settings {
    fn default() -> Self {
        Self {
            model: None,
            card: None,
            engine: EngineChoice::Auto,
            providers: "cpu".into(),
            device: "CPU".into(),
            precision: "f32".into(),
            hint: "latency".into(),
            streams: 0,
            threads: 0,
            strict: false,
            fixed_size: String::new(),
            logits: false,
            output: OutputMode::Overlay,
            alpha: segtool_runtime::DEFAULT_ALPHA as f64,
            live: false,
            deadline_ms: 0,
            smooth: 0.0,
            protocol: String::new(),
            base_size: 0,
            model_instance_id: String::new(),
            max_batch: DEFAULT_MAX_BATCH,
            max_wait_ms: DEFAULT_MAX_WAIT_MS,
        }
    }
}

impl Settings {
    /// The `model-instance-id` this element shares its model under, if any.
    pub fn shared_id(&self) -> Option<&str> {
        Some(self.model_instance_id.trim()).filter(|id| !id.is_empty())
    }

    /// The properties that open the model and form its batches, by name, with their
    /// values as a pipeline description writes them: elements sharing a
    /// `model-instance-id` must agree on every one (paths are compared as the files
    /// they name).
    pub fn model_key(&self) -> Vec<(&'static str, String)> {
        let path = |p: &Option<String>| {
            let text = p.clone().unwrap_or_default();
            match text.is_empty() {
                true => text,
                false => std::fs::canonicalize(&text)
                    .map(|c| c.display().to_string())
                    .unwrap_or(text),
            }
        };
        vec![
            ("model", path(&self.model)),
            ("card", path(&self.card)),
            ("engine", EngineKind::from(self.engine).as_str().to_string()),
            ("providers", self.providers.clone()),
            ("device", self.device.clone()),
            ("precision", self.precision.clone()),
            ("hint", self.hint.clone()),
            ("streams", self.streams.to_string()),
            ("threads", self.threads.to_string()),
            ("strict", self.strict.to_string()),
            ("fixed-size", self.fixed_size.trim().to_string()),
            ("logits", self.logits.to_string()),
            ("max-batch", self.max_batch.to_string()),
            ("max-wait-ms", self.max_wait_ms.to_string()),
        ]
    }

    /// The runtime's options the properties say; a value that is not one is refused,
    /// naming the option.
    pub fn options(&self) -> Result<SegmenterOptions, RuntimeError> {
        let bad = |name: &'static str, message: String| RuntimeError::Option { name, message };
        let defaults = SegmenterOptions::default();
        let providers: Vec<String> = self
            .providers
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect();
        let fixed_size = match self.fixed_size.trim() {
            "" => None,
            text => {
                let size = text
                    .split_once('x')
                    .and_then(|(h, w)| Some([h.trim().parse().ok()?, w.trim().parse().ok()?]));
                match size {
                    Some([h, w]) if h > 0 && w > 0 => Some([h, w]),
                    _ => {
                        return Err(bad(
                            "fixed_size",
                            format!(
                            "{text:?} is not HEIGHTxWIDTH (e.g. 480x640), or empty for any size"
                        ),
                        ))
                    }
                }
            }
        };
        Ok(SegmenterOptions {
            engine: self.engine.into(),
            // Empty is the default, as every front end's.
            providers: match providers.is_empty() {
                true => defaults.providers,
                false => providers,
            },
            device: self.device.parse().map_err(|e| bad("device", e))?,
            precision: self.precision.parse().map_err(|e| bad("precision", e))?,
            hint: self.hint.parse().map_err(|e| bad("hint", e))?,
            // 0 is the default (the hint's streams, the engine's threads), as everywhere.
            streams: (self.streams > 0).then_some(self.streams as usize),
            threads: (self.threads > 0).then_some(self.threads as usize),
            card: self
                .card
                .as_deref()
                .filter(|c| !c.is_empty())
                .map(PathBuf::from),
            strict: self.strict,
            fixed_size,
            logits: self.logits,
        })
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

/// The property specs, in the order `gst-inspect-1.0` lists them: the model and the
/// runtime's options under their names, then the element's own.
pub fn specs() -> Vec<glib::ParamSpec> {
    let d = Settings::default();
    let mut specs = model_and_option_specs(&d);
    specs.extend(element_specs(&d));
    specs
}

/// `model`, then the runtime's `SegmenterOptions` as properties (dashes for underscores),
/// with the runtime's defaults.
fn model_and_option_specs(d: &Settings) -> Vec<glib::ParamSpec> {
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
                 \"cuda:0,cpu\" or \"tensorrt:0,cuda:0,cpu\"; one that does not load falls \
                 back to the next, unless strict (empty: cpu)",
            )
            .default_value(Some("cpu"))
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
        glib::ParamSpecString::builder("hint")
            .nick("Performance hint")
            .blurb("OpenVINO's performance hint: latency or throughput")
            .default_value(Some("latency"))
            .build(),
        glib::ParamSpecUInt::builder("streams")
            .nick("Streams")
            .blurb("OpenVINO's parallel inference streams (0: what the hint picks)")
            .maximum(1024)
            .default_value(d.streams)
            .build(),
        glib::ParamSpecUInt::builder("threads")
            .nick("Threads")
            .blurb(
                "Threads for one inference: ONNX Runtime's intra-op pool, tract's, OpenVINO's \
                 CPU plugin (0: the engine's default, all cores)",
            )
            .maximum(1024)
            .default_value(d.threads)
            .build(),
        glib::ParamSpecBoolean::builder("strict")
            .nick("Strict")
            .blurb(
                "No fallback of any kind: a provider or device that does not load, an engine \
                 auto could not open, or an option the engine that runs does not take fails \
                 the start",
            )
            .default_value(d.strict)
            .build(),
        glib::ParamSpecString::builder("fixed-size")
            .nick("Fixed size")
            .blurb(
                "HEIGHTxWIDTH every frame will have (a fixed camera): ONNX Runtime plans its \
                 memory for it and refuses other sizes (empty: any size)",
            )
            .default_value(Some(""))
            .build(),
        glib::ParamSpecBoolean::builder("logits")
            .nick("Logits")
            .blurb(
                "Also carry each frame's logits in its SegtoolClassMapMeta (fields logits, \
                 logits-height, logits-width)",
            )
            .default_value(d.logits)
            .build(),
    ]
}

/// The element's own properties: what it outputs, live mode, smoothing, accuracy mode
/// and its statistics.
fn element_specs(d: &Settings) -> Vec<glib::ParamSpec> {
    vec![
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
        glib::ParamSpecString::builder("model-instance-id")
            .nick("Model instance id")
            .blurb(
                "Elements with the same id share one model (one copy, one engine session) \
                 and batch their frames together; they must agree on every property that \
                 opens the model (model, card, engine, providers, device, precision, hint, \
                 streams, threads, strict, fixed-size, logits, max-batch, max-wait-ms). \
                 Empty: a model of this element's own",
            )
            .default_value(Some(""))
            .build(),
        glib::ParamSpecUInt::builder("max-batch")
            .nick("Max batch")
            .blurb(
                "With model-instance-id: most frames in one run of the shared model, at \
                 most one per element (the number of cameras is a good value)",
            )
            .minimum(1)
            .maximum(256)
            .default_value(d.max_batch)
            .build(),
        glib::ParamSpecUInt::builder("max-wait-ms")
            .nick("Max wait (ms)")
            .blurb(
                "With model-instance-id: how long a frame may wait for the other elements' \
                 frames to join its batch before the shared model runs (0: run at once)",
            )
            .maximum(10_000)
            .default_value(d.max_wait_ms)
            .build(),
        glib::ParamSpecBoxed::builder::<gst::Structure>("stats")
            .nick("Statistics")
            .blurb(
                "segtool/stats: frames-in, answered, dropped, flushed, failed, \
                 latency-p50-ms, latency-p99-ms, provider; with model-instance-id also \
                 model-instance-id, source, shared-elements, model-opened-by, model-opens, \
                 engine-runs, largest-batch",
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
            // NULL or empty: the default, as in every front end.
            let text = text.filter(|t| !t.is_empty());
            settings.device = text.unwrap_or_else(|| Settings::default().device);
        }
        "precision" => {
            let text = value.get::<Option<String>>().expect("type checked");
            // NULL or empty: the default, as in every front end.
            let text = text.filter(|t| !t.is_empty());
            settings.precision = text.unwrap_or_else(|| Settings::default().precision);
        }
        "hint" => {
            let text = value.get::<Option<String>>().expect("type checked");
            // NULL or empty: the default, as in every front end.
            let text = text.filter(|t| !t.is_empty());
            settings.hint = text.unwrap_or_else(|| Settings::default().hint);
        }
        "streams" => settings.streams = value.get().expect("type checked"),
        "threads" => settings.threads = value.get().expect("type checked"),
        "strict" => settings.strict = value.get().expect("type checked"),
        "fixed-size" => {
            settings.fixed_size = value
                .get::<Option<String>>()
                .expect("type checked")
                .unwrap_or_default()
        }
        "logits" => settings.logits = value.get().expect("type checked"),
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
        "model-instance-id" => {
            settings.model_instance_id = value
                .get::<Option<String>>()
                .expect("type checked")
                .unwrap_or_default()
        }
        "max-batch" => settings.max_batch = value.get().expect("type checked"),
        "max-wait-ms" => settings.max_wait_ms = value.get().expect("type checked"),
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
        "hint" => settings.hint.to_value(),
        "streams" => settings.streams.to_value(),
        "threads" => settings.threads.to_value(),
        "strict" => settings.strict.to_value(),
        "fixed-size" => settings.fixed_size.to_value(),
        "logits" => settings.logits.to_value(),
        "output" => settings.output.to_value(),
        "alpha" => settings.alpha.to_value(),
        "live" => settings.live.to_value(),
        "deadline-ms" => settings.deadline_ms.to_value(),
        "smooth" => settings.smooth.to_value(),
        "protocol" => settings.protocol.to_value(),
        "base-size" => settings.base_size.to_value(),
        "model-instance-id" => settings.model_instance_id.to_value(),
        "max-batch" => settings.max_batch.to_value(),
        "max-wait-ms" => settings.max_wait_ms.to_value(),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `engine` property's values are the runtime's engines under the runtime's
    /// names: one list of engines, as a GEnum for GStreamer.
    #[test]
    fn engine_enum_is_the_runtime_engines_by_name() {
        let class = glib::EnumClass::with_type(EngineChoice::static_type()).unwrap();
        assert_eq!(class.values().len(), EngineKind::ALL.len());
        for kind in EngineKind::ALL {
            let value = class
                .value_by_nick(kind.as_str())
                .unwrap_or_else(|| panic!("no GEnum value named {kind}"));
            let choice: EngineChoice = unsafe { glib::translate::from_glib(value.value()) };
            assert_eq!(EngineKind::from(choice), kind);
        }
    }
}
