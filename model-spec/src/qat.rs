//! The QAT checkpoint contract: what a checkpoint trained with fake quantisation in the
//! loop (`segtool train` with a `[quant]` section or `--qat`) carries so that
//! `segtool export` writes its INT8 file without calibration images.
//!
//! This module is the one owner of the contract. A QAT checkpoint is an ordinary segtool
//! checkpoint (float weights, BatchNorm statistics, the spec) plus:
//!
//! - [`QAT_METADATA_KEY`] in the safetensors header: a [`QatSpec`] as JSON (the layout,
//!   the weight granularity and range, how ranges were initialised and learned, and the
//!   ONNX tensor names whose thresholds are learned, in order);
//! - the tensor [`QAT_THRESHOLDS_TENSOR`]: one f32 per [`QatSpec::sources`], the learned
//!   threshold T of that activation. The layout turns T into a scale and zero point
//!   exactly as calibration does (`T / 127`, or `T / 255` over [0, T] for a Relu's or
//!   softmax's output in the `ort-cpu` and `openvino` layouts); weights are quantised per
//!   output channel, symmetric int8, from the BN-folded float weights, as calibration
//!   quantises them.
//!
//! The names are the tensors of the fp32 ONNX graph `segtool export` writes for the
//! checkpoint's spec (e.g. `pretrained.layer1.0`, `head.sa.attention_t`): the placement
//! is the calibration crate's QDQ plan of that graph for the layout.

use serde::{Deserialize, Serialize};

/// Safetensors header key holding the [`QatSpec`] JSON.
pub const QAT_METADATA_KEY: &str = "segtool.qat";

/// The checkpoint tensor of learned thresholds, one per [`QatSpec::sources`].
pub const QAT_THRESHOLDS_TENSOR: &str = "qat.thresholds";

/// How a QAT checkpoint was quantised (see the module docs).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct QatSpec {
    /// Calibration layout the fake quantisation follows: `portable`, `ort-cpu`, `openvino`.
    pub layout: String,
    /// Weights per output channel (always true: the granularity QAT trains).
    pub per_channel: bool,
    /// Integer range of the weights: `full` ([-127, 127]) or `reduced` ([-63, 63]).
    pub weight_range: String,
    /// How the activation thresholds move in training: `ema` (a moving average of each
    /// batch's range, gradients by the straight-through estimator) or `lsq` (learned by
    /// gradient, LSQ).
    pub ranges: String,
    /// The calibrator that gave the initial thresholds (`entropy`, `minmax`, ...).
    pub init_method: String,
    /// Training images the initial calibration saw.
    pub init_samples: usize,
    /// Iteration from which BatchNorm statistics are frozen (`None`: never in this run).
    pub freeze_bn_at: Option<u64>,
    /// ONNX tensor names, in the order of [`QAT_THRESHOLDS_TENSOR`]'s values.
    pub sources: Vec<String>,
}

impl QatSpec {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("QatSpec serialises")
    }

    pub fn from_json(s: &str) -> Result<Self, String> {
        serde_json::from_str(s).map_err(|e| format!("`{QAT_METADATA_KEY}` is not a QAT spec: {e}"))
    }
}
