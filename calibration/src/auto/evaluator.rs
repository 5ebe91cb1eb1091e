//! The validation images and their fp32 decisions, prepared once; each mix of the search
//! is then one pass over them in the deployment's engine ([`MixEngine`]): agreement with
//! fp32, and mIoU with labels.
//!
//! Besides the pooled agreement, each pass gives the lower confidence bound of the mean
//! per-image agreement ([`lower_bound`]): a mix chosen because its bound meets the target
//! is unlikely to miss it on images the search never saw, where a mix chosen on the bare
//! mean misses about half the time when it sits at the target.

use std::path::{Path, PathBuf};

use ndarray::Array4;
use segtool_core::metrics::ConfusionMatrix;

use super::engine::{MixEngine, MixSession};
use crate::{read_image, CalibrationError, Feed};

/// The validation images and their fp32 reference, preloaded.
pub(super) struct Evaluator {
    pub(super) inputs: Vec<Array4<f32>>,
    reference: Vec<Vec<u8>>,
    labels: Option<Vec<Vec<u8>>>,
    classes: usize,
    feed: Feed,
    engine: MixEngine,
    threads: Option<usize>,
    /// One-sided confidence level of [`Score::bound`] (0: the bound is the mean).
    confidence: f64,
    pub(super) miou_fp32: Option<f64>,
}

/// One pass of a model over the images.
#[derive(Clone, Copy, Debug)]
pub(super) struct Score {
    /// Pixels whose argmax equals fp32's, over all pixels of all images.
    pub(super) agreement: f64,
    /// Lower confidence bound of the mean per-image agreement.
    pub(super) bound: f64,
    pub(super) miou: Option<f64>,
}

impl Evaluator {
    pub(super) fn new(
        fp32: &[u8],
        images: &[PathBuf],
        labels: Option<&Path>,
        feed: &Feed,
        engine: &MixEngine,
        threads: Option<usize>,
        confidence: f64,
    ) -> Result<Self, CalibrationError> {
        let inputs: Vec<Array4<f32>> = images
            .iter()
            .map(|p| feed.tensor(&read_image(p)?))
            .collect::<Result<_, CalibrationError>>()?;
        let labels = match labels {
            None => None,
            // Scores of a card model come out at the model's own resolution, not the
            // labels'; its mIoU would need the card's decoding in the loop.
            Some(_) if matches!(feed, Feed::Card(_)) => {
                return Err(CalibrationError::Input(
                    "--labels (mIoU) is for segtool exports; a model from elsewhere is \
                     searched by --min-agreement"
                        .into(),
                ))
            }
            Some(dir) => Some(
                images
                    .iter()
                    .zip(&inputs)
                    .map(|(p, x)| {
                        let stem = p.file_stem().unwrap_or_default().to_string_lossy();
                        let path = dir.join(format!("{stem}.png"));
                        let l = crate::read_label(&path)?;
                        if l.len() != x.shape()[2] * x.shape()[3] {
                            return Err(CalibrationError::Input(format!(
                                "{}: label size differs from the image's",
                                path.display()
                            )));
                        }
                        Ok(l.into_raw())
                    })
                    .collect::<Result<Vec<_>, CalibrationError>>()?,
            ),
        };
        let mut ev = Self {
            inputs,
            reference: Vec::new(),
            labels,
            classes: feed.classes(),
            feed: feed.clone(),
            engine: engine.clone(),
            threads,
            confidence,
            miou_fp32: None,
        };
        let (pred, miou) = ev.predict(fp32)?;
        ev.reference = pred;
        ev.miou_fp32 = miou;
        Ok(ev)
    }

    fn predict(&self, model: &[u8]) -> Result<(Vec<Vec<u8>>, Option<f64>), CalibrationError> {
        let output = self.feed.output();
        let mut session =
            MixSession::open(&self.engine, model, self.threads, self.feed.io_names())?;
        let mut out = Vec::with_capacity(self.inputs.len());
        let mut cm = ConfusionMatrix::new(self.classes);
        for (i, x) in self.inputs.iter().enumerate() {
            let scores = session.scores(x.view(), output)?;
            let pred = self.feed.decisions(&scores);
            if let Some(l) = &self.labels {
                cm.update(&l[i], &pred, 255);
            }
            out.push(pred);
        }
        Ok((out, self.labels.as_ref().map(|_| cm.mean_iou())))
    }

    pub(super) fn len(&self) -> usize {
        self.inputs.len()
    }

    /// Agreement with fp32 (pooled, and its per-image lower bound), mIoU against labels.
    pub(super) fn evaluate(&self, model: &[u8]) -> Result<Score, CalibrationError> {
        let (pred, miou) = self.predict(model)?;
        let (mut same, mut total) = (0u64, 0u64);
        let mut per_image = Vec::with_capacity(pred.len());
        for (p, r) in pred.iter().zip(&self.reference) {
            let s = p.iter().zip(r).filter(|(a, b)| a == b).count() as u64;
            per_image.push(s as f64 / p.len().max(1) as f64);
            same += s;
            total += p.len() as u64;
        }
        Ok(Score {
            agreement: same as f64 / total.max(1) as f64,
            bound: lower_bound(&per_image, self.confidence),
            miou,
        })
    }
}

/// One-sided lower confidence bound of the mean of `values` at level `confidence`
/// (Student's t with n - 1 degrees of freedom); the mean itself for one value or a
/// level of 0.
pub fn lower_bound(values: &[f64], confidence: f64) -> f64 {
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    let mean = values.iter().sum::<f64>() / n as f64;
    if n < 2 || confidence <= 0.0 {
        return mean;
    }
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    mean - student_t_quantile(confidence, (n - 1) as f64) * (var / n as f64).sqrt()
}

/// Student's t quantile by the Cornish-Fisher expansion around the normal quantile:
/// within 0.3% of the tables from 3 degrees of freedom on; below that it is too small
/// (about 5.6 for the tables' 6.31 at one degree), but a bound from two or three images
/// is crude whatever the constant.
fn student_t_quantile(p: f64, df: f64) -> f64 {
    let z = normal_quantile(p);
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * df)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * df * df)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * df.powi(3))
}

/// Standard normal quantile (Acklam's rational approximation, relative error < 1.2e-9).
fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969683028665376e1,
        2.209460984245205e2,
        -2.759285104469687e2,
        1.383577518672690e2,
        -3.066479806614716e1,
        2.506628277459239,
    ];
    const B: [f64; 5] = [
        -5.447609879822406e1,
        1.615858368580409e2,
        -1.556989798598866e2,
        6.680131188771972e1,
        -1.328068155288572e1,
    ];
    const C: [f64; 6] = [
        -7.784894002430293e-3,
        -3.223964580411365e-1,
        -2.400758277161838,
        -2.549732539343734,
        4.374664141464968,
        2.938163982698783,
    ];
    const D: [f64; 4] = [
        7.784695709041462e-3,
        3.224671290700398e-1,
        2.445134137142996,
        3.754408661907416,
    ];
    let p = p.clamp(1e-12, 1.0 - 1e-12);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against printed tables (one-sided upper quantiles of the standard normal and of
    /// Student's t).
    #[test]
    fn quantiles_match_the_tables() {
        for (p, z) in [
            (0.95, 1.644854),
            (0.975, 1.959964),
            (0.99, 2.326348),
            (0.5, 0.0),
        ] {
            assert!((normal_quantile(p) - z).abs() < 1e-6, "z({p})");
        }
        for (df, t) in [
            (3.0, 2.353363),
            (5.0, 2.015048),
            (10.0, 1.812461),
            (30.0, 1.697261),
            (120.0, 1.657651),
        ] {
            let got = student_t_quantile(0.95, df);
            assert!(
                (got - t).abs() / t < 3e-3,
                "t(0.95, {df}) = {got}, table {t}"
            );
        }
    }

    #[test]
    fn the_bound_is_below_the_mean_by_t_standard_errors() {
        let v = [0.99, 0.995, 1.0, 0.985, 0.99, 0.998];
        let mean = v.iter().sum::<f64>() / 6.0;
        let sd = (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / 5.0).sqrt();
        let want = mean - 2.015048 * sd / 6f64.sqrt();
        assert!((lower_bound(&v, 0.95) - want).abs() < 1e-5);
        assert_eq!(lower_bound(&v, 0.0), mean);
        assert_eq!(lower_bound(&[0.7], 0.95), 0.7);
        assert_eq!(lower_bound(&[1.0, 1.0, 1.0], 0.95), 1.0);
    }
}
