//! Entropy (KL divergence) calibration, TensorRT's `EntropyCalibration2` algorithm as
//! published (GTC 2017, "8-bit Inference with TensorRT") and reproduced by MXNet and
//! ONNX Runtime:
//!
//! The zero bin first takes its neighbour's count (NVIDIA's pytorch-quantization does the
//! same): the exact zeros of ReLU outputs would otherwise dominate `P` and drive every
//! tensor after a ReLU to the smallest candidate threshold. Then,
//! for every candidate `i` in `levels..=bins` (threshold = upper edge of bin `i - 1`):
//! 1. reference `P = hist[..i]` with the outliers `sum(hist[i..])` folded into `P[i-1]`;
//! 2. `Q`: `hist[..i]` merged into `levels` (128) chunks of `i / levels` bins, the
//!    remainder joining the last chunk;
//! 3. `Q` expanded back to `i` bins: each chunk's count spread evenly over the bins where
//!    `P` is non-zero (zero elsewhere);
//! 4. both smoothed (zeros get `eps = 1e-4`, taken evenly from the non-zeros), normalised,
//!    and `KL(P || Q)` computed;
//!
//! the threshold with the smallest divergence wins (the first on ties).
//! `tests/reference/calibration_ref.py` is an independent numpy version of the same.

use crate::stats::Histogram;

/// Quantisation levels of the positive half of int8.
pub const LEVELS: usize = 128;
const EPS: f64 = 1e-4;

pub fn threshold(hist: &Histogram) -> f32 {
    match best_bins(&hist.counts, LEVELS) {
        Some(i) => hist.edge(i),
        None => hist.max.max(0.0),
    }
}

/// The number of bins kept by the best candidate, `None` for too few bins or no data.
pub fn best_bins(counts: &[u64], levels: usize) -> Option<usize> {
    let bins = counts.len();
    if bins < levels || counts.iter().all(|&c| c == 0) {
        return None;
    }
    let mut owned = counts.to_vec();
    if bins > 1 {
        owned[0] = owned[1];
    }
    if owned.iter().all(|&c| c == 0) {
        return None;
    }
    let counts = owned.as_slice();
    let mut outliers: u64 = counts[levels..].iter().sum();
    let mut best: Option<(f64, usize)> = None;
    let mut p = Vec::with_capacity(bins);
    let mut q = Vec::with_capacity(bins);
    for i in levels..=bins {
        if i > levels {
            outliers -= counts[i - 1];
        }
        p.clear();
        p.extend(counts[..i].iter().map(|&c| c as f64));
        p[i - 1] += outliers as f64;
        q.clear();
        q.resize(i, 0.0);
        let merged = i / levels;
        for j in 0..levels {
            let start = j * merged;
            let stop = if j + 1 == levels { i } else { start + merged };
            let sum: f64 = counts[start..stop].iter().map(|&c| c as f64).sum();
            let nonzero = p[start..stop].iter().filter(|&&v| v != 0.0).count();
            if nonzero > 0 {
                let v = sum / nonzero as f64;
                for k in start..stop {
                    if p[k] != 0.0 {
                        q[k] = v;
                    }
                }
            }
        }
        let kl = match (smooth(&mut p), smooth(&mut q)) {
            (true, true) => kl_divergence(&p, &q),
            _ => f64::INFINITY,
        };
        if best.is_none_or(|(b, _)| kl < b) {
            best = Some((kl, i));
        }
    }
    best.map(|(_, i)| i)
}

/// MXNet's `_smooth_distribution`: zeros get `EPS`, non-zeros lose `EPS * zeros /
/// nonzeros`. False when nothing is non-zero or a value would not stay positive.
fn smooth(v: &mut [f64]) -> bool {
    let zeros = v.iter().filter(|&&x| x == 0.0).count();
    let nonzeros = v.len() - zeros;
    if nonzeros == 0 {
        return false;
    }
    let eps1 = EPS * zeros as f64 / nonzeros as f64;
    let mut ok = true;
    for x in v.iter_mut() {
        if *x == 0.0 {
            *x = EPS;
        } else {
            *x -= eps1;
            ok &= *x > 0.0;
        }
    }
    ok
}

/// `KL(p || q)` of the normalised distributions (natural log).
fn kl_divergence(p: &[f64], q: &[f64]) -> f64 {
    let sp: f64 = p.iter().sum();
    let sq: f64 = q.iter().sum();
    p.iter()
        .zip(q)
        .map(|(&a, &b)| {
            let a = a / sp;
            let b = b / sq;
            if a > 0.0 {
                a * (a / b).ln()
            } else {
                0.0
            }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic standard normal draws (Box-Muller over a 64-bit LCG).
    pub(crate) fn gaussian(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed;
        let mut next = || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| {
                let (u, v) = (next(), next());
                ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
            })
            .collect()
    }

    #[test]
    fn entropy_clips_outliers_of_a_gaussian() {
        let mut xs = gaussian(200_000, 7);
        xs.extend([20.0, -25.0, 30.0]);
        let absmax = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut h = Histogram::new(2048, absmax);
        h.add(&xs);
        let t = threshold(&h);
        // Far below the outliers, above the bulk of the distribution.
        assert!(t > 2.5 && t < 10.0, "{t}");
    }

    #[test]
    fn too_few_bins_or_no_data_keep_the_range() {
        assert_eq!(threshold(&Histogram::from_counts(vec![1; 64], 3.0)), 3.0);
        assert_eq!(threshold(&Histogram::new(2048, 0.0)), 0.0);
    }
}
