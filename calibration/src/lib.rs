//! INT8 post-training quantisation of segtool models.
//!
//! [`calibrate`] exposes the tensors to quantise (activation inputs of every Conv and
//! MatMul, and Conv outputs or the Relus after them, see [`qdq::plan`]) as extra outputs of a copy of the model, runs calibration
//! images through it in ONNX Runtime (CPU) in batches, preprocessed exactly as the runtime
//! does ([`segtool_runtime::normalise`]), and streams per-tensor statistics: the range
//! first, then a 2048-bin histogram of `|x|` over `[0, absmax]` ([`stats`]). A calibrator
//! ([`Method`]) turns them into thresholds, [`qdq::rewrite`] into a QDQ model
//! (symmetric int8, zero point 0; weights per output channel or per tensor) and
//! [`trt_cache`] into a TensorRT calibration cache. [`report`] compares the result with
//! the float model.

pub mod auto;
pub mod calibrators;
pub mod compare;
pub mod feed;
pub mod kernels;
pub mod plot;
pub mod qdq;
pub mod report;
pub mod session;
pub mod similarity;
pub mod stats;
pub mod trt_cache;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use image::RgbImage;
use ndarray::{Array4, Axis};
use prost::Message;
use segtool_core::progress::Reporter;
use segtool_core::{ModelSpec, SPEC_METADATA_KEY};
use segtool_onnx::proto::ModelProto;
use segtool_runtime::card::{ModelCard, CARD_METADATA_KEY};

pub use feed::Feed;
use session::OrtModel;
use stats::{Histogram, Range, TensorStats, DEFAULT_BINS};

/// metadata_props key recording how a model was calibrated.
pub use segtool_onnx::metadata::CALIBRATION_METADATA_KEY;

#[derive(Debug, thiserror::Error)]
pub enum CalibrationError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("invalid model: {0}")]
    Model(String),
    #[error("ONNX Runtime: {0}")]
    Ort(String),
    #[error("{0}")]
    Input(String),
    #[error(transparent)]
    TrtCache(#[from] trt_cache::TrtCacheError),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CalibrationError + '_ {
    move |source| CalibrationError::Io {
        path: path.to_path_buf(),
        source,
    }
}

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

/// Reads and decodes an ONNX model.
pub fn load_model(path: &Path) -> Result<ModelProto, CalibrationError> {
    let bytes = std::fs::read(path).map_err(io_err(path))?;
    ModelProto::decode(bytes.as_slice())
        .map_err(|e| CalibrationError::Model(format!("{}: {e}", path.display())))
}

/// The spec in a decoded model's metadata.
pub fn model_spec(model: &ModelProto) -> Result<ModelSpec, CalibrationError> {
    let json = model
        .metadata_props
        .iter()
        .find(|e| e.key == SPEC_METADATA_KEY)
        .ok_or_else(|| {
            CalibrationError::Model(format!("no {SPEC_METADATA_KEY} in metadata_props"))
        })?;
    ModelSpec::from_json(&json.value).map_err(|e| CalibrationError::Model(e.to_string()))
}

/// The image files of a folder, sorted: [`segtool_core::images::list_images`], the lister
/// every segtool command uses (exactly the formats the build decodes). None is an error.
pub fn list_images(dir: &Path) -> Result<Vec<PathBuf>, CalibrationError> {
    let out = segtool_core::images::list_images(dir).map_err(io_err(dir))?;
    if out.is_empty() {
        return Err(CalibrationError::Input(format!(
            "{}: no images ({})",
            dir.display(),
            segtool_core::images::IMAGE_EXTENSIONS.join(", ")
        )));
    }
    Ok(out)
}

pub fn read_image(path: &Path) -> Result<RgbImage, CalibrationError> {
    // The dataset reader: refuses image bombs by their header, naming size and limit.
    segtool_core::dataset::read_rgb(path).map_err(|e| CalibrationError::Input(e.to_string()))
}

/// A label mask (class indices) as the datasets read it: palette PNGs as raw indices, not
/// expanded to colours; image bombs refused by their header, naming size and limit.
pub fn read_label(path: &Path) -> Result<image::GrayImage, CalibrationError> {
    segtool_core::dataset::read_mask(path).map_err(|e| CalibrationError::Input(e.to_string()))
}

/// Consecutive same-size images, at most `batch` per group, normalised as the runtime
/// does. Loads one batch at a time.
pub fn for_each_batch(
    images: &[PathBuf],
    feed: &Feed,
    batch: usize,
    mut f: impl FnMut(Array4<f32>, usize) -> Result<(), CalibrationError>,
) -> Result<(), CalibrationError> {
    let mut pending: Vec<Array4<f32>> = Vec::new();
    let flush = |pending: &mut Vec<Array4<f32>>,
                 f: &mut dyn FnMut(Array4<f32>, usize) -> Result<(), CalibrationError>|
     -> Result<(), CalibrationError> {
        if pending.is_empty() {
            return Ok(());
        }
        let views: Vec<_> = pending.iter().map(|a| a.view()).collect();
        let x = ndarray::concatenate(Axis(0), &views)
            .map_err(|e| CalibrationError::Input(e.to_string()))?;
        let n = pending.len();
        pending.clear();
        f(x, n)
    };
    for path in images {
        let x = feed.tensor(&read_image(path)?)?;
        if pending
            .first()
            .is_some_and(|p| p.shape() != x.shape() || pending.len() >= batch.max(1))
        {
            flush(&mut pending, &mut f)?;
        }
        pending.push(x);
    }
    flush(&mut pending, &mut f)
}

/// Collects statistics for `tensors` over `images`: the range, then (when `bins > 0`) a
/// histogram of `|x|`.
pub fn collect_stats(
    model: &ModelProto,
    tensors: &[String],
    images: &[PathBuf],
    feed: &Feed,
    opts: &CalibrationOptions,
    histograms: bool,
) -> Result<BTreeMap<String, TensorStats>, CalibrationError> {
    let stats_model = qdq::with_outputs(model, tensors).encode_to_vec();
    let mut ort = OrtModel::new(&stats_model, opts.threads)?;
    let input_name = qdq::graph(model)?
        .input
        .first()
        .map(|i| i.name.clone())
        .unwrap_or_default();
    let mut ranges: BTreeMap<String, Range> = tensors
        .iter()
        .map(|t| (t.clone(), Range::default()))
        .collect();
    // Every tensor must come back (a missing one is a plan the model cannot serve).
    let visit = |ort: &mut OrtModel,
                 x: &Array4<f32>,
                 f: &mut dyn FnMut(&str, &[f32])|
     -> Result<(), CalibrationError> {
        let mut seen = std::collections::HashSet::new();
        ort.visit(x.view(), tensors, |t, v| {
            // The input is read from `x` below, once (were it also a graph output).
            if t != input_name {
                f(t, v);
                seen.insert(t.to_string());
            }
            Ok(())
        })?;
        if tensors.contains(&input_name) {
            f(&input_name, x.as_slice().expect("standard layout"));
            seen.insert(input_name.clone());
        }
        match tensors.iter().find(|t| !seen.contains(*t)) {
            Some(t) => Err(CalibrationError::Model(format!(
                "tensor {t:?} is not a float output of the statistics model"
            ))),
            None => Ok(()),
        }
    };
    let progress = &opts.progress;
    progress.start("range", images.len() as u64, 0);
    for_each_batch(images, feed, opts.batch_size, |x, n| {
        visit(&mut ort, &x, &mut |t, v| {
            ranges.get_mut(t).unwrap().update(v)
        })?;
        progress.advance(n as u64);
        Ok(())
    })?;
    progress.finish(None);
    let mut hists: BTreeMap<String, Histogram> = BTreeMap::new();
    if histograms {
        hists = ranges
            .iter()
            .map(|(t, r)| (t.clone(), Histogram::new(opts.bins, r.absmax())))
            .collect();
        progress.start("histogram", images.len() as u64, 0);
        for_each_batch(images, feed, opts.batch_size, |x, n| {
            visit(&mut ort, &x, &mut |t, v| hists.get_mut(t).unwrap().add(v))?;
            progress.advance(n as u64);
            Ok(())
        })?;
        progress.finish(None);
    }
    Ok(ranges
        .into_iter()
        .map(|(t, range)| {
            let hist = hists.remove(&t);
            (t, TensorStats { range, hist })
        })
        .collect())
}

/// Calibrates `model` on the first `opts.samples` images of `images`.
pub fn calibrate(
    model: &ModelProto,
    images: &[PathBuf],
    opts: &CalibrationOptions,
) -> Result<Calibrated, CalibrationError> {
    if opts.samples == 0 {
        return Err(CalibrationError::Input(
            "--samples must be at least 1".into(),
        ));
    }
    if !(opts.percentile > 0.0 && opts.percentile <= 100.0) {
        return Err(CalibrationError::Input(format!(
            "--percentile {} is not in (0, 100]",
            opts.percentile
        )));
    }
    let feed = Feed::of_model(model, opts.card.as_ref())?;
    let images = &images[..images.len().min(opts.samples)];
    let plan = qdq::plan(model, &opts.keep_float, opts.layout)?;
    let stats = collect_stats(
        model,
        &plan.activations,
        images,
        &feed,
        opts,
        opts.method.needs_histogram(),
    )?;
    let thresholds: BTreeMap<String, f32> = stats
        .iter()
        .map(|(t, s)| (t.clone(), opts.method.threshold(s, opts.percentile)))
        .collect();
    let q = rewrite_with(
        model,
        &plan,
        &thresholds,
        opts,
        images.len(),
        &opts.keep_float,
    )?;
    // Checked here, not only when written: a bad name is a wrong table, not a warning.
    let trt_cache = trt_cache::cache_text(qdq::graph(model)?, &thresholds)?;
    Ok(Calibrated {
        model: q.encode_to_vec(),
        trt_cache,
        thresholds,
        stats,
        plan,
        samples: images.len(),
    })
}

/// The QDQ model of `plan` with calibrated `thresholds` (a superset is fine), recording
/// the settings, `samples` and the nodes kept float in [`CALIBRATION_METADATA_KEY`].
pub fn rewrite_with(
    model: &ModelProto,
    plan: &qdq::Plan,
    thresholds: &BTreeMap<String, f32>,
    opts: &CalibrationOptions,
    samples: usize,
    keep_float: &[String],
) -> Result<ModelProto, CalibrationError> {
    let mut meta = serde_json::json!({
        "method": opts.method.name(),
        "samples": samples,
        "per_channel": opts.per_channel,
        "weight_range": opts.weight_range.name(),
        "layout": plan.layout.name(),
        "bins": opts.bins,
        "tensors": plan.activations.len(),
        "keep_float": keep_float,
    });
    if opts.method == Method::Percentile {
        meta["percentile"] = serde_json::json!(opts.percentile);
    }
    let mut q = qdq::rewrite(
        model,
        plan,
        thresholds,
        opts.per_channel,
        opts.weight_range,
        (CALIBRATION_METADATA_KEY, meta.to_string()),
    )?;
    if let Some(card) = &opts.card {
        let json = card.to_json();
        q.metadata_props.retain(|p| p.key != CARD_METADATA_KEY);
        q.metadata_props
            .push(segtool_onnx::proto::StringStringEntryProto {
                key: CARD_METADATA_KEY.to_string(),
                value: json,
            });
    }
    Ok(q)
}

/// Writes `bytes` to `path` atomically ([`segtool_core::io::write_atomic`]: a temp file
/// in the same folder, fsync, rename, fsync of the folder).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CalibrationError> {
    segtool_core::io::write_atomic(path, bytes).map_err(io_err(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_only_decodable_images() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        for name in ["b.png", "a.bmp", "c.JPG", "notes.txt"] {
            std::fs::write(d.join(name), b"x").unwrap();
        }
        let names: Vec<_> = list_images(d)
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["b.png", "c.JPG"]);

        // Only a .bmp: no images, and the message names what is accepted.
        let only_bmp = d.join("bmp");
        std::fs::create_dir(&only_bmp).unwrap();
        std::fs::write(only_bmp.join("a.bmp"), b"x").unwrap();
        let err = list_images(&only_bmp).unwrap_err().to_string();
        assert!(err.contains("no images (png, jpg, jpeg)"), "{err}");
    }
}
