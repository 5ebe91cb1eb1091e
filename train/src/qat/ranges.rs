//! Where thresholds come from and how they move: the initial calibration of the float
//! model, the EMA step, and summaries for logs and reports.

use anyhow::{bail, Result};
use segtool_calibration::stats::{Histogram, Range, TensorStats, DEFAULT_BINS};
use tch::Tensor;

use super::{FakeQuant, Mode, RangeLearning};

impl FakeQuant {
    /// Initial thresholds: statistics of the float model (no fake quantisation) over
    /// `batches` (normalised images), in two passes as the calibration crate collects
    /// them (range, then a histogram of |x|), turned into thresholds by its calibrator.
    /// `forward` runs the model in eval mode on a batch. Checks that every quantised
    /// read was made.
    pub fn calibrate(&self, batches: &[Tensor], forward: impl Fn(&Tensor)) -> Result<()> {
        let n = self.sources.len();
        self.lock().mode = Mode::Ranges(vec![Range::default(); n]);
        self.lock().visited.clear();
        tch::no_grad(|| batches.iter().for_each(&forward));
        let ranges = match std::mem::replace(&mut self.lock().mode, Mode::Quantise) {
            Mode::Ranges(r) => r,
            _ => unreachable!(),
        };
        if let Some(i) = ranges.iter().position(|r| r.count == 0) {
            bail!(
                "no statistics for {:?}: the tch model never produced it",
                self.sources[i]
            );
        }
        let mut hists = None;
        if self.options.method.needs_histogram() {
            self.lock().mode = Mode::Histograms(
                ranges
                    .iter()
                    .map(|r| Histogram::new(DEFAULT_BINS, r.absmax()))
                    .collect(),
            );
            tch::no_grad(|| batches.iter().for_each(&forward));
            hists = match std::mem::replace(&mut self.lock().mode, Mode::Quantise) {
                Mode::Histograms(h) => Some(h),
                _ => unreachable!(),
            };
        }
        let values: Vec<f32> = ranges
            .into_iter()
            .enumerate()
            .map(|(i, range)| {
                let stats = TensorStats {
                    range,
                    hist: hists.as_ref().map(|h| h[i].clone()),
                };
                self.options
                    .method
                    .threshold(&stats, self.options.percentile)
            })
            .collect();
        self.set_thresholds(&values);
        self.check_coverage()
    }

    /// Sets the thresholds (e.g. from a checkpoint's values).
    pub fn set_thresholds(&self, values: &[f32]) {
        tch::no_grad(|| {
            let mut t = self.thresholds.shallow_clone();
            t.copy_(&Tensor::from_slice(values).to_device(t.device()));
        });
    }

    /// The end of a training step: EMA moves each threshold towards the step's range
    /// (`ranks_max` takes the largest of the per-source maxima over the ranks: the global
    /// batch's range, identical thresholds everywhere).
    pub fn end_step(&self, ranks_max: impl FnOnce(&[f64]) -> Result<Vec<f64>>) -> Result<()> {
        if self.options.ranges != RangeLearning::Ema {
            return Ok(());
        }
        let maxima: Vec<f64> = {
            let mut s = self.lock();
            let m = s.batch_max.iter().map(|&v| v as f64).collect();
            s.batch_max.iter_mut().for_each(|v| *v = 0.0);
            m
        };
        let maxima = ranks_max(&maxima)?;
        let c = self.options.ema_momentum;
        let next: Vec<f32> = self
            .threshold_values()
            .into_iter()
            .zip(maxima)
            .map(|(t, m)| {
                if m > 0.0 {
                    ((1.0 - c) * t as f64 + c * m) as f32
                } else {
                    t
                }
            })
            .collect();
        self.set_thresholds(&next);
        Ok(())
    }
}

/// Minimum, median and maximum of a set of thresholds (zeros when empty).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ThresholdSummary {
    pub min: f64,
    pub median: f64,
    pub max: f64,
}

impl ThresholdSummary {
    pub fn of(values: &[f32]) -> Self {
        let mut v: Vec<f64> = values.iter().map(|&x| x as f64).collect();
        if v.is_empty() {
            return Self::default();
        }
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let median = if n % 2 == 1 {
            v[n / 2]
        } else {
            (v[n / 2 - 1] + v[n / 2]) / 2.0
        };
        Self {
            min: v[0],
            median,
            max: v[n - 1],
        }
    }
}

/// How far thresholds moved from `from` to `to` (same sources, same order): the mean of
/// `|log(to / from)|` over the positive pairs, the relative movement of a typical range
/// (0.01: ranges moved about 1%).
pub fn threshold_movement(from: &[f32], to: &[f32]) -> f64 {
    let logs: Vec<f64> = from
        .iter()
        .zip(to)
        .filter(|(a, b)| **a > 0.0 && **b > 0.0)
        .map(|(&a, &b)| (b as f64 / a as f64).ln().abs())
        .collect();
    match logs.is_empty() {
        true => 0.0,
        false => logs.iter().sum::<f64>() / logs.len() as f64,
    }
}
