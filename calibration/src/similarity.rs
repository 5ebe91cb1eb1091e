//! How far one tensor is from a reference, accumulated over many batches in float64: the
//! cosine similarity, SNR and largest absolute difference that the calibration report and
//! `segtool compare` both print, computed once so their figures agree.

/// Running sums over pairs `(reference, other)`.
#[derive(Clone, Debug, Default)]
pub struct Similarity {
    dot: f64,
    aa: f64,
    bb: f64,
    dd: f64,
    max_diff: f64,
    max_abs: f64,
}

impl Similarity {
    /// Adds the element pairs of `a` (the reference) and `b`.
    pub fn add(&mut self, a: &[f32], b: &[f32]) {
        for (&x, &y) in a.iter().zip(b) {
            let (x, y) = (x as f64, y as f64);
            self.dot += x * y;
            self.aa += x * x;
            self.bb += y * y;
            let d = x - y;
            self.dd += d * d;
            // NaN in either makes the difference NaN: report it as infinite.
            let d = if d.is_nan() { f64::INFINITY } else { d.abs() };
            self.max_diff = self.max_diff.max(d);
            self.max_abs = self.max_abs.max(x.abs());
        }
    }

    /// Cosine of the angle between the two: 1 for two all-zero tensors, 0 when only one is.
    pub fn cosine(&self) -> f64 {
        if self.aa > 0.0 && self.bb > 0.0 {
            self.dot / (self.aa.sqrt() * self.bb.sqrt())
        } else if self.aa == self.bb {
            1.0
        } else {
            0.0
        }
    }

    /// `10 log10(|a|^2 / |a - b|^2)`, capped at 200 dB (identical tensors).
    pub fn snr_db(&self) -> f64 {
        if self.dd > 0.0 {
            (10.0 * (self.aa / self.dd).log10()).min(200.0)
        } else {
            200.0
        }
    }

    /// The largest `|a - b|` (infinite where either was NaN).
    pub fn max_abs_diff(&self) -> f64 {
        self.max_diff
    }

    /// The largest `|a|`.
    pub fn max_abs(&self) -> f64 {
        self.max_abs
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_of_simple_pairs() {
        let mut s = Similarity::default();
        s.add(&[1.0, 0.0], &[1.0, 0.0]);
        assert_eq!(
            (s.cosine(), s.snr_db(), s.max_abs_diff()),
            (1.0, 200.0, 0.0)
        );
        let mut s = Similarity::default();
        s.add(&[3.0, 4.0], &[3.0, 3.0]);
        assert!((s.snr_db() - 10.0 * 25f64.log10()).abs() < 1e-12);
        assert_eq!((s.max_abs_diff(), s.max_abs()), (1.0, 4.0));
        let mut s = Similarity::default();
        s.add(&[0.0], &[1.0]);
        assert_eq!(s.cosine(), 0.0);
        s.add(&[f32::NAN], &[1.0]);
        assert_eq!(s.max_abs_diff(), f64::INFINITY);
    }
}
