//! The calibration run: images through the exposed model in batches, statistics per
//! tensor, thresholds, the QDQ rewrite.

use std::collections::BTreeMap;
use std::path::PathBuf;

use ndarray::{Array4, Axis};
use prost::Message;
use segtool_onnx::proto::ModelProto;
use segtool_runtime::card::CARD_METADATA_KEY;

use crate::error::CalibrationError;
use crate::feed::Feed;
use crate::files::read_image;
use crate::options::{Calibrated, CalibrationOptions, Method};
use crate::session::OrtModel;
use crate::stats::{Histogram, Range, TensorStats};
use crate::{qdq, trt_cache};

/// metadata_props key recording how a model was calibrated.
pub use segtool_onnx::metadata::CALIBRATION_METADATA_KEY;

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
    // Weights written as Constant nodes are weights too (qdq::constants).
    let model = &*qdq::with_constants_as_initializers(model);
    let feed = Feed::of_model(model, opts.card.as_ref())?;
    let images = &images[..images.len().min(opts.samples)];
    let plan = qdq::plan(model, &opts.keep_float, opts.layout)?;
    if plan.nodes.is_empty() && opts.keep_float.is_empty() {
        // An "INT8" file that is the float one would look like a success.
        return Err(CalibrationError::Model(
            "no layer can be quantised: the graph has no Conv with constant weights and no \
             MatMul or Add of activations outside attention"
                .into(),
        ));
    }
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
