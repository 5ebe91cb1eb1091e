//! How to calibrate ([`CalibrationOptions`], [`Method`]) and what a calibration returns
//! ([`Calibrated`]).

use std::collections::BTreeMap;
use std::str::FromStr;

use segtool_model_spec::progress::Reporter;
use segtool_runtime::card::ModelCard;

use crate::stats::{TensorStats, DEFAULT_BINS};
use crate::{calibrators, qdq};

/// Calibration algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    MinMax,
    Percentile,
    Entropy,
    Mse,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::MinMax => "minmax",
            Method::Percentile => "percentile",
            Method::Entropy => "entropy",
            Method::Mse => "mse",
        }
    }

    pub fn needs_histogram(self) -> bool {
        self != Method::MinMax
    }

    /// The threshold of one tensor's statistics.
    pub fn threshold(self, stats: &TensorStats, percentile: f64) -> f32 {
        let hist = stats.hist.as_ref();
        match (self, hist) {
            (Method::MinMax, _) | (_, None) => calibrators::minmax::threshold(&stats.range),
            (Method::Percentile, Some(h)) => calibrators::percentile::threshold(h, percentile),
            (Method::Entropy, Some(h)) => calibrators::entropy::threshold(h),
            (Method::Mse, Some(h)) => calibrators::mse::threshold(h),
        }
    }
}

impl FromStr for Method {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "minmax" | "min-max" => Ok(Method::MinMax),
            "percentile" => Ok(Method::Percentile),
            "entropy" | "kl" => Ok(Method::Entropy),
            "mse" => Ok(Method::Mse),
            _ => Err(format!(
                "unknown calibration method {s:?} (minmax, percentile, entropy, mse)"
            )),
        }
    }
}

/// Calibration settings.
#[derive(Clone, Debug)]
pub struct CalibrationOptions {
    pub method: Method,
    /// Percentile of `|x|` kept by [`Method::Percentile`].
    pub percentile: f64,
    /// Images used (the first `samples` of the folder in name order).
    pub samples: usize,
    /// Weights per output channel (axis 0) instead of per tensor.
    pub per_channel: bool,
    /// Integer range of the weights (see [`qdq::WeightRange`]).
    pub weight_range: qdq::WeightRange,
    /// Activation type and placement (see [`qdq::Layout`]).
    pub layout: qdq::Layout,
    /// Nodes left in float.
    pub keep_float: Vec<String>,
    /// Same-size images per ORT run.
    pub batch_size: usize,
    pub bins: usize,
    /// ORT intra-op threads (`None`: ORT's choice).
    pub threads: Option<usize>,
    /// Where the statistics passes report their progress (one step per image).
    pub progress: Reporter,
    /// The card of a model from elsewhere (`None`: the model's own segtool spec). It
    /// prepares the images ([`Feed`]) and is written into the calibrated file's metadata,
    /// so that the INT8 file describes itself.
    pub card: Option<ModelCard>,
}

impl Default for CalibrationOptions {
    fn default() -> Self {
        Self {
            method: Method::Entropy,
            percentile: 99.99,
            samples: 100,
            per_channel: true,
            weight_range: qdq::WeightRange::for_this_cpu(),
            layout: qdq::Layout::Portable,
            keep_float: Vec::new(),
            batch_size: 4,
            bins: DEFAULT_BINS,
            threads: None,
            progress: Reporter::default(),
            card: None,
        }
    }
}

/// Result of [`calibrate`].
#[derive(Clone, Debug)]
pub struct Calibrated {
    /// The QDQ model, serialised.
    pub model: Vec<u8>,
    /// TensorRT calibration cache text.
    pub trt_cache: String,
    /// Threshold per calibrated tensor.
    pub thresholds: BTreeMap<String, f32>,
    pub stats: BTreeMap<String, TensorStats>,
    pub plan: qdq::Plan,
    /// Images actually used.
    pub samples: usize,
}
