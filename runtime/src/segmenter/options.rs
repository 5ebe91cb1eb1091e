//! [`SegmenterOptions`]: how a model opens, as one value with its defaults written down
//! once. The command line's flags, the ROS 2 node's parameters, Python's keyword
//! arguments, the C options struct and the GStreamer element's properties are skins of
//! it, under the same names (`engine`, `providers`, `device`, `threads`, `card`, ...); it is
//! serde-serialisable, so a deployment can keep it in a file.
//!
//! Accepts what [`SegmenterBuilder`] accepts; refuses, naming it, an unknown key (serde)
//! and a provider name that is not one (`cpu`, `cuda[:N]`, `tensorrt[:N]`,
//! `tensorrt-fp16[:N]`).

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{EngineKind, SegmenterBuilder};
use crate::card::CardRequest;
use crate::error::{Result, RuntimeError};
use crate::engines::openvino_options::{Device, PerformanceHint, Precision};

/// Everything that says how a model opens (see the module docs).
///
/// ```no_run
/// use segtool_runtime::{Segmenter, SegmenterOptions};
/// // What a configuration file or a front end's flags say, with the defaults for the rest.
/// let options: SegmenterOptions =
///     serde_json::from_str(r#"{"engine": "openvino", "precision": "bf16", "threads": 2}"#)?;
/// assert_eq!(options.providers, ["cpu"]);
/// let seg = Segmenter::builder("danet.onnx").options(&options)?.open()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SegmenterOptions {
    /// `auto` (the engine measured fastest for this model on this machine, cached; the
    /// choice and its timings are reported), `ort`, `tract` or `openvino`.
    pub engine: EngineKind,
    /// ONNX Runtime's execution providers in preference order: `cpu`, `cuda[:N]`,
    /// `tensorrt[:N]`, `tensorrt-fp16[:N]`. One that does not load falls back to the next
    /// (reported), unless `strict`.
    pub providers: Vec<String>,
    /// OpenVINO's device: `CPU`, `GPU`, `NPU` or `AUTO`. One that is absent falls back to
    /// the CPU (reported), unless `strict`.
    pub device: Device,
    /// OpenVINO's precision for float32 layers: `f32`, or `bf16` (AMX, AVX-512 BF16).
    pub precision: Precision,
    /// OpenVINO's performance hint: `latency` or `throughput`.
    pub hint: PerformanceHint,
    /// OpenVINO's parallel inference streams; `None` or 0: what the hint picks.
    pub streams: Option<usize>,
    /// Threads for one inference (ONNX Runtime's intra-op pool, tract's executor,
    /// OpenVINO's CPU plugin); `None` or 0: the engine's choice (all cores).
    pub threads: Option<usize>,
    /// A model card (TOML) for a file segtool did not write.
    pub card: Option<PathBuf>,
    /// No fallback of any kind: opening fails instead of running on something not asked
    /// for.
    pub strict: bool,
    /// `[height, width]` every image will have (a fixed camera): ONNX Runtime plans its
    /// memory for it and refuses other sizes.
    pub fixed_size: Option<[usize; 2]>,
    /// Also return each image's logits.
    pub logits: bool,
}

impl Default for SegmenterOptions {
    fn default() -> Self {
        Self {
            engine: EngineKind::Auto,
            providers: vec!["cpu".into()],
            device: Device::Cpu,
            precision: Precision::F32,
            hint: PerformanceHint::Latency,
            streams: None,
            threads: None,
            card: None,
            strict: false,
            fixed_size: None,
            logits: false,
        }
    }
}

impl SegmenterOptions {
    /// The names every front end uses for these options, in declaration order.
    pub const NAMES: [&'static str; 11] = [
        "engine",
        "providers",
        "device",
        "precision",
        "hint",
        "streams",
        "threads",
        "card",
        "strict",
        "fixed_size",
        "logits",
    ];
}

impl SegmenterBuilder {
    /// Every option of `options` at once (the builder's own setters, one by one).
    pub fn options(mut self, options: &SegmenterOptions) -> Result<Self> {
        self = self.engine(options.engine).strict(options.strict);
        #[cfg(feature = "ort")]
        {
            let providers = options
                .providers
                .iter()
                .map(|p| p.parse::<crate::engines::ort::Provider>())
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|message| RuntimeError::Option {
                    name: "providers",
                    message,
                })?;
            self = self.providers(providers);
        }
        self = self
            .device(options.device)
            .precision(options.precision)
            .hint(options.hint);
        if let Some(n) = options.streams {
            self = self.streams(n);
        }
        if let Some(n) = options.threads {
            self = self.threads(n);
        }
        if let Some(card) = &options.card {
            self = self.card(CardRequest::new().card_file(card));
        }
        if let Some([h, w]) = options.fixed_size {
            self = self.fixed_size(h, w);
        }
        Ok(self.logits(options.logits))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_round_trip_and_unknown_keys_are_refused() {
        let defaults = SegmenterOptions::default();
        let json = serde_json::to_value(&defaults).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut names = SegmenterOptions::NAMES.to_vec();
        names.sort_unstable();
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, names);
        assert_eq!(json["engine"], "auto");
        let back: SegmenterOptions = serde_json::from_value(json).unwrap();
        assert_eq!(back, defaults);
        let partial: SegmenterOptions =
            serde_json::from_str(r#"{"engine": "tract", "threads": 2}"#).unwrap();
        assert_eq!(partial.engine, EngineKind::Tract);
        assert_eq!(partial.providers, ["cpu"]);
        let e = serde_json::from_str::<SegmenterOptions>(r#"{"engnie": "ort"}"#).unwrap_err();
        assert!(e.to_string().contains("engnie"), "{e}");
        let e = serde_json::from_str::<SegmenterOptions>(r#"{"engine": "onnx"}"#).unwrap_err();
        assert!(e.to_string().contains("onnx"), "{e}");
    }

    #[cfg(feature = "ort")]
    #[test]
    fn a_bad_provider_is_refused_by_name() {
        let opts = SegmenterOptions {
            providers: vec!["cuda".into(), "npu".into()],
            ..SegmenterOptions::default()
        };
        let e = crate::Segmenter::builder("m.onnx")
            .options(&opts)
            .unwrap_err();
        assert!(e.to_string().contains("npu"), "{e}");
    }
}
