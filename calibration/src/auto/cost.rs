//! The layers ranked by what each costs: the share of pixels whose fp32 decision changes
//! when that layer alone is quantised, measured in the deployment's engine.
//!
//! SNR against fp32 in the all-INT8 model ranks a layer by the noise at its own output,
//! which is not what the target sees: a first convolution with a fine SNR can cost more
//! pixels than a late layer with a poor one, because everything after it carries its
//! error. So each layer is measured alone (every other layer float) on a few of the
//! search's images, worst SNR first, until a time bound: layers that flip pixels come
//! first, most flips first; the rest (no flip measured, or not reached in time) follow
//! in SNR order.
//!
//! Accepts any ranking from [`super::stages::rank_layers`]; refuses nothing (0 samples or
//! a bound of 0 seconds leaves the SNR ranking as it is, and says so).

use std::path::PathBuf;
use std::time::Instant;

use segtool_onnx::proto::ModelProto;

use super::evaluator::Evaluator;
use super::stages::mix_bytes;
use super::{AutoOptions, Candidate, CostRanking};
use crate::{Calibrated, CalibrationError, CalibrationOptions, Feed};

/// Reorders `by_snr` by each layer's measured cost (module docs) and says how far the
/// measurement got.
pub(super) fn rank_by_cost(
    mut by_snr: Vec<Candidate>,
    model: &ModelProto,
    cal: &Calibrated,
    images: &[PathBuf],
    feed: &Feed,
    calib: &CalibrationOptions,
    auto: &AutoOptions,
) -> Result<(Vec<Candidate>, CostRanking), CalibrationError> {
    let images = &images[..images.len().min(auto.cost_samples)];
    let mut ranking = CostRanking {
        measured: 0,
        layers: by_snr.len(),
        images: images.len(),
        seconds: 0.0,
        budget_s: auto.cost_budget_s,
    };
    if images.is_empty() || by_snr.is_empty() || auto.cost_budget_s <= 0.0 {
        return Ok((by_snr, ranking));
    }
    let started = Instant::now();
    let fp32 = prost::Message::encode_to_vec(model);
    let ev = Evaluator::new(&fp32, images, None, feed, &auto.engine, calib.threads, 0.0)?;
    let every: Vec<String> = by_snr.iter().map(|c| c.node.clone()).collect();
    let progress = &calib.progress;
    progress.start("cost", by_snr.len() as u64, 0);
    let mut slowest = 0.0f64;
    for i in 0..by_snr.len() {
        let elapsed = started.elapsed().as_secs_f64();
        // Stop before a measurement that would likely overrun the bound.
        if elapsed + slowest > auto.cost_budget_s {
            break;
        }
        let one = Instant::now();
        let others: Vec<String> = every.iter().filter(|n| **n != every[i]).cloned().collect();
        let score = ev.evaluate(&mix_bytes(model, cal, calib, &others)?)?;
        let cost = 1.0 - score.agreement;
        by_snr[i].cost = Some(cost);
        ranking.measured += 1;
        slowest = slowest.max(one.elapsed().as_secs_f64());
        progress.advance(1);
        progress.line(format!(
            "cost {}/{}: {} alone in INT8 changes {:.4}% of pixels",
            i + 1,
            by_snr.len(),
            by_snr[i].node,
            cost * 100.0
        ));
    }
    ranking.seconds = started.elapsed().as_secs_f64();
    progress.finish(Some(ranking.describe()));
    // Stable: equal costs (0, or not measured) keep their SNR order.
    by_snr.sort_by(|a, b| b.cost.unwrap_or(0.0).total_cmp(&a.cost.unwrap_or(0.0)));
    Ok((by_snr, ranking))
}
