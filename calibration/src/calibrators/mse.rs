//! MSE: the threshold minimising the expected squared quantisation error over the
//! histogram. For a candidate threshold `t` (a bin edge) with step `s = t / 127`, a value
//! at a bin centre `c <= t` costs the uniform rounding error `s^2 / 12`, one above it the
//! clipping error `(c - t)^2`.

use crate::stats::Histogram;

pub fn threshold(hist: &Histogram) -> f32 {
    let bins = hist.bins();
    if hist.total() == 0 || hist.max <= 0.0 {
        return hist.max.max(0.0);
    }
    let w = hist.bin_width();
    // Suffix sums over bins >= i of n, n*c and n*c^2 (c: bin centre) give the clipping
    // error of every candidate in O(1).
    let mut n_suf = vec![0f64; bins + 1];
    let mut c_suf = vec![0f64; bins + 1];
    let mut c2_suf = vec![0f64; bins + 1];
    for i in (0..bins).rev() {
        let n = hist.counts[i] as f64;
        let c = (i as f64 + 0.5) * w;
        n_suf[i] = n_suf[i + 1] + n;
        c_suf[i] = c_suf[i + 1] + n * c;
        c2_suf[i] = c2_suf[i + 1] + n * c * c;
    }
    let mut best = (f64::INFINITY, bins);
    for i in 1..=bins {
        let t = i as f64 * w;
        let s = t / 127.0;
        let inside = n_suf[0] - n_suf[i];
        let clip = c2_suf[i] - 2.0 * t * c_suf[i] + t * t * n_suf[i];
        let err = inside * s * s / 12.0 + clip.max(0.0);
        if err < best.0 {
            best = (err, i);
        }
    }
    hist.edge(best.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mse_threshold_of_a_uniform_is_close_to_its_max() {
        // Analytic optimum for U[0, 1]: t / 254 = 1 - t, t = 254/255 = 0.996.
        let xs: Vec<f32> = (0..100_000).map(|i| i as f32 / 100_000.0).collect();
        let mut h = Histogram::new(2048, 1.0);
        h.add(&xs);
        let t = threshold(&h);
        assert!(
            (t - 254.0 / 255.0).abs() < 2.0 * h.bin_width() as f32,
            "{t}"
        );
    }

    #[test]
    fn mse_clips_a_long_tail() {
        // Mostly small values plus a few huge ones: clipping them is cheaper.
        // Rounding over [0, 100] costs 1e6 * (100/127)^2 / 12 = 5.2e4, clipping the one
        // outlier at ~1 costs 99^2 = 9.8e3.
        let mut xs: Vec<f32> = (0..1_000_000).map(|i| (i % 1000) as f32 / 1000.0).collect();
        xs.push(100.0);
        let mut h = Histogram::new(2048, 100.0);
        h.add(&xs);
        let t = threshold(&h);
        assert!(t > 0.99 && t < 50.0, "{t}");
    }
}
