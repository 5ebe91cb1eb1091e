//! segtool's `metadata_props`: the key names, and their values as types.
//!
//! [`Metadata`] is everything `segtool export` (and `segtool calibrate`) records next to
//! the graph. [`Metadata::to_props`] is how the exporter writes it and
//! [`Metadata::from_props`] how every reader gets it back: a known key with a value that
//! does not parse is an error naming the key, never silently dropped (a renamed field
//! in the TensorRT hint would otherwise cost TensorRT its optimisation profile).

use std::fmt;
use std::path::Path;

use segtool_model_spec::ModelSpec;
use serde::{Deserialize, Serialize};

use crate::error::{ModelFileError, Result};
pub use segtool_model_spec::SPEC_METADATA_KEY;

/// Key of the export options (JSON), next to the spec.
pub const EXPORT_METADATA_KEY: &str = "segtool.export";
/// Key of the input layout: [`LAYOUT_NCHW_F32`] or [`LAYOUT_NHWC_U8`].
pub const INPUT_LAYOUT_KEY: &str = "segtool.input_layout";
/// Key of the output kind: `logits` or `mask`.
pub const OUTPUT_KIND_KEY: &str = "segtool.output";
/// Key of the backbone's output stride (decimal).
pub const OUTPUT_STRIDE_KEY: &str = "segtool.output_stride";
/// Key of the sha256 of the checkpoint the model was exported from (hex).
pub const CHECKPOINT_SHA256_KEY: &str = "segtool.checkpoint_sha256";
/// Key of the TensorRT optimisation-profile hint ([`TrtProfileHint`], JSON).
pub const TRT_PROFILE_KEY: &str = "segtool.trt_profile";
/// Key recording how a model was calibrated to INT8 (JSON, written by `segtool calibrate`).
pub const CALIBRATION_METADATA_KEY: &str = "segtool.calibration";

/// `segtool.input_layout` of a plain export.
pub const LAYOUT_NCHW_F32: &str = "NCHW float32 normalised";
/// `segtool.input_layout` of a `--preprocess` export.
pub const LAYOUT_NHWC_U8: &str = "NHWC uint8 RGB";
/// `segtool.output` of a plain export.
pub const OUTPUT_LOGITS: &str = "logits";
/// `segtool.output` of an `--argmax` export.
pub const OUTPUT_MASK: &str = "mask";

/// The graph's input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum InputLayout {
    /// f32 `[N, 3, H, W]`, normalised with the spec's mean/std.
    #[default]
    NchwF32,
    /// uint8 `[N, H, W, 3]` RGB; the graph normalises.
    NhwcU8,
}

impl InputLayout {
    /// The metadata value.
    pub fn as_str(self) -> &'static str {
        match self {
            InputLayout::NchwF32 => LAYOUT_NCHW_F32,
            InputLayout::NhwcU8 => LAYOUT_NHWC_U8,
        }
    }

    fn parse(v: &str) -> Option<Self> {
        match v {
            LAYOUT_NCHW_F32 => Some(InputLayout::NchwF32),
            LAYOUT_NHWC_U8 => Some(InputLayout::NhwcU8),
            _ => None,
        }
    }
}

/// The graph's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OutputKind {
    /// f32 logits `[N, classes, H, W]`.
    #[default]
    Logits,
    /// Class map `[N, H, W]` (any integer type: uint8, int32, int64).
    Mask,
}

impl OutputKind {
    /// The metadata value.
    pub fn as_str(self) -> &'static str {
        match self {
            OutputKind::Logits => OUTPUT_LOGITS,
            OutputKind::Mask => OUTPUT_MASK,
        }
    }

    fn parse(v: &str) -> Option<Self> {
        match v {
            OUTPUT_LOGITS => Some(OutputKind::Logits),
            OUTPUT_MASK => Some(OutputKind::Mask),
            _ => None,
        }
    }
}

/// Input layout plus output kind of one model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct IoContract {
    /// What the graph takes.
    pub input: InputLayout,
    /// What the graph returns.
    pub output: OutputKind,
}

impl fmt::Display for IoContract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let input = match self.input {
            InputLayout::NchwF32 => "f32 NCHW normalised",
            InputLayout::NhwcU8 => "uint8 NHWC RGB",
        };
        let output = match self.output {
            OutputKind::Logits => "logits",
            OutputKind::Mask => "class map",
        };
        write!(f, "{input} -> {output}")
    }
}

impl IoContract {
    /// The standard interface (what plain `segtool export` writes).
    pub fn is_plain(&self) -> bool {
        *self == Self::default()
    }

    /// The graph's own view when there is one, else the metadata's, else plain: the graph
    /// wins where the two disagree (a hand-edited or re-exported model).
    pub fn resolve(metadata: Option<Self>, graph: Option<Self>) -> Self {
        graph.or(metadata).unwrap_or_default()
    }
}

/// `segtool.trt_profile`: TensorRT optimisation-profile shapes for the dynamic axes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrtProfileHint {
    /// The graph input the shapes are for.
    pub input: String,
    /// `NCHW` or `NHWC`.
    pub layout: String,
    /// Smallest shape.
    pub min: Vec<i64>,
    /// Shape TensorRT tunes for.
    pub opt: Vec<i64>,
    /// Largest shape.
    pub max: Vec<i64>,
    /// The same profile as `trtexec` flags.
    pub trtexec: String,
}

impl TrtProfileHint {
    /// Parses the JSON value; the error says which field is missing or wrong.
    pub fn from_json(json: &str) -> std::result::Result<Self, String> {
        let hint: Self = serde_json::from_str(json).map_err(|e| e.to_string())?;
        for (name, dims) in [("min", &hint.min), ("opt", &hint.opt), ("max", &hint.max)] {
            if dims.len() != 4 || dims.iter().any(|&d| d < 1) {
                return Err(format!(
                    "{name} must be 4 positive dimensions, got {dims:?}"
                ));
            }
        }
        Ok(hint)
    }

    /// The JSON value.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a plain struct serialises")
    }

    /// `(min, opt, max)` in ONNX Runtime's TensorRT syntax, `image:1x3x128x128`.
    pub fn ort_shapes(&self) -> (String, String, String) {
        let s = |d: &[i64]| {
            let dims: Vec<String> = d.iter().map(i64::to_string).collect();
            format!("{}:{}", self.input, dims.join("x"))
        };
        (s(&self.min), s(&self.opt), s(&self.max))
    }
}

/// Everything segtool records in a model's `metadata_props`, typed. Keys other tools
/// wrote are kept in [`Metadata::other`], in file order.
#[derive(Clone, Debug, PartialEq)]
pub struct Metadata {
    /// Classes, palette, normalisation and architecture (`segtool.spec`).
    pub spec: ModelSpec,
    /// The exporter's options, JSON (`segtool.export`); `None` from older exporters.
    pub export_options: Option<serde_json::Value>,
    /// Layout and output kind the exporter recorded; `None` when it recorded neither.
    pub contract: Option<IoContract>,
    /// The backbone's output stride (`segtool.output_stride`).
    pub output_stride: Option<i64>,
    /// sha256 (hex) of the checkpoint the model came from.
    pub checkpoint_sha256: Option<String>,
    /// TensorRT's profile shapes; `None` for static exports.
    pub trt_profile: Option<TrtProfileHint>,
    /// How the model was calibrated (JSON), for INT8 QDQ models.
    pub calibration: Option<serde_json::Value>,
    /// Entries under keys segtool does not own.
    pub other: Vec<(String, String)>,
}

impl Metadata {
    /// Metadata holding only the spec.
    pub fn new(spec: ModelSpec) -> Self {
        Self {
            spec,
            export_options: None,
            contract: None,
            output_stride: None,
            checkpoint_sha256: None,
            trt_profile: None,
            calibration: None,
            other: Vec::new(),
        }
    }

    /// The `(key, value)` entries, segtool's keys first in a fixed order.
    pub fn to_props(&self) -> Vec<(String, String)> {
        let mut props = vec![(SPEC_METADATA_KEY.to_string(), self.spec.to_json())];
        let mut push = |k: &str, v: String| props.push((k.to_string(), v));
        if let Some(o) = &self.export_options {
            push(EXPORT_METADATA_KEY, o.to_string());
        }
        if let Some(c) = self.contract {
            push(INPUT_LAYOUT_KEY, c.input.as_str().into());
            push(OUTPUT_KIND_KEY, c.output.as_str().into());
        }
        if let Some(s) = self.output_stride {
            push(OUTPUT_STRIDE_KEY, s.to_string());
        }
        if let Some(sha) = &self.checkpoint_sha256 {
            push(CHECKPOINT_SHA256_KEY, sha.clone());
        }
        if let Some(p) = &self.trt_profile {
            push(TRT_PROFILE_KEY, p.to_json());
        }
        if let Some(c) = &self.calibration {
            push(CALIBRATION_METADATA_KEY, c.to_string());
        }
        props.extend(self.other.iter().cloned());
        props
    }

    /// Reads the entries of the model at `path` (named in errors). The spec is required;
    /// every other segtool key is optional, but refused when present and malformed.
    pub fn from_props(path: &Path, props: &[(String, String)]) -> Result<Self> {
        let bad = |key: &'static str, message: String| ModelFileError::Metadata {
            path: path.into(),
            key,
            message,
        };
        let get = |key: &str| {
            props
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        let json = |key: &'static str| -> Result<Option<serde_json::Value>> {
            get(key)
                .map(|v| serde_json::from_str(v).map_err(|e| bad(key, format!("not JSON: {e}"))))
                .transpose()
        };
        let spec_json = get(SPEC_METADATA_KEY).ok_or_else(|| ModelFileError::MissingSpec {
            path: path.into(),
            key: SPEC_METADATA_KEY,
        })?;
        let spec =
            ModelSpec::from_json(spec_json).map_err(|source| ModelFileError::InvalidSpec {
                path: path.into(),
                source,
            })?;
        let layout = get(INPUT_LAYOUT_KEY)
            .map(|v| {
                InputLayout::parse(v).ok_or_else(|| {
                    bad(
                        INPUT_LAYOUT_KEY,
                        format!("{v:?}: expected {LAYOUT_NCHW_F32:?} or {LAYOUT_NHWC_U8:?}"),
                    )
                })
            })
            .transpose()?;
        let output = get(OUTPUT_KIND_KEY)
            .map(|v| {
                OutputKind::parse(v).ok_or_else(|| {
                    bad(
                        OUTPUT_KIND_KEY,
                        format!("{v:?}: expected \"{OUTPUT_LOGITS}\" or \"{OUTPUT_MASK}\""),
                    )
                })
            })
            .transpose()?;
        let contract = (layout.is_some() || output.is_some()).then(|| IoContract {
            input: layout.unwrap_or_default(),
            output: output.unwrap_or_default(),
        });
        let output_stride = get(OUTPUT_STRIDE_KEY)
            .map(|v| {
                v.parse::<i64>().ok().filter(|s| *s > 0).ok_or_else(|| {
                    bad(
                        OUTPUT_STRIDE_KEY,
                        format!("{v:?} is not a positive integer"),
                    )
                })
            })
            .transpose()?;
        let checkpoint_sha256 = get(CHECKPOINT_SHA256_KEY)
            .map(|v| {
                (v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit()))
                    .then(|| v.to_string())
                    .ok_or_else(|| {
                        bad(CHECKPOINT_SHA256_KEY, format!("{v:?} is not 64 hex digits"))
                    })
            })
            .transpose()?;
        let trt_profile = get(TRT_PROFILE_KEY)
            .map(|v| TrtProfileHint::from_json(v).map_err(|e| bad(TRT_PROFILE_KEY, e)))
            .transpose()?;
        const OWNED: [&str; 8] = [
            SPEC_METADATA_KEY,
            EXPORT_METADATA_KEY,
            INPUT_LAYOUT_KEY,
            OUTPUT_KIND_KEY,
            OUTPUT_STRIDE_KEY,
            CHECKPOINT_SHA256_KEY,
            TRT_PROFILE_KEY,
            CALIBRATION_METADATA_KEY,
        ];
        Ok(Self {
            spec,
            export_options: json(EXPORT_METADATA_KEY)?,
            contract,
            output_stride,
            checkpoint_sha256,
            trt_profile,
            calibration: json(CALIBRATION_METADATA_KEY)?,
            other: props
                .iter()
                .filter(|(k, _)| !OWNED.contains(&k.as_str()))
                .cloned()
                .collect(),
        })
    }
}
