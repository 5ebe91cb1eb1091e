//! Streaming activation statistics: per-tensor range (pass 1), then a fixed-bin histogram
//! of `|x|` over `[0, absmax]` (pass 2), as TensorRT's calibrators collect them. Memory is
//! `bins` counters per tensor whatever the number of samples.

/// Bins of the `|x|` histogram (TensorRT's default).
pub const DEFAULT_BINS: usize = 2048;

/// Running minimum and maximum of a tensor (NaNs ignored).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Range {
    pub min: f32,
    pub max: f32,
    /// Finite values seen.
    pub count: u64,
}

impl Default for Range {
    fn default() -> Self {
        Self {
            min: f32::INFINITY,
            max: f32::NEG_INFINITY,
            count: 0,
        }
    }
}

impl Range {
    pub fn update(&mut self, xs: &[f32]) {
        let (mut lo, mut hi, mut n) = (self.min, self.max, 0u64);
        for &x in xs {
            if x.is_finite() {
                lo = lo.min(x);
                hi = hi.max(x);
                n += 1;
            }
        }
        self.min = lo;
        self.max = hi;
        self.count += n;
    }

    /// `max(|min|, |max|)`, 0 before any value.
    pub fn absmax(&self) -> f32 {
        if self.count == 0 {
            0.0
        } else {
            self.min.abs().max(self.max.abs())
        }
    }
}

/// Histogram of `|x|` with `counts.len()` equal bins over `[0, max]`; values above `max`
/// (none, when `max` is the pass-1 absmax) land in the last bin.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    pub counts: Vec<u64>,
    pub max: f32,
}

impl Histogram {
    pub fn new(bins: usize, max: f32) -> Self {
        assert!(bins > 0, "a histogram needs bins");
        Self {
            counts: vec![0; bins],
            max: max.max(0.0),
        }
    }

    /// A histogram built from counts (tests, references).
    pub fn from_counts(counts: Vec<u64>, max: f32) -> Self {
        Self { counts, max }
    }

    pub fn bins(&self) -> usize {
        self.counts.len()
    }

    pub fn bin_width(&self) -> f64 {
        self.max as f64 / self.counts.len() as f64
    }

    /// Upper edge of bin `i - 1`, i.e. the threshold that keeps the first `i` bins.
    pub fn edge(&self, i: usize) -> f32 {
        (self.bin_width() * i as f64) as f32
    }

    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    pub fn add(&mut self, xs: &[f32]) {
        let bins = self.counts.len();
        let last = bins - 1;
        if self.max <= 0.0 {
            self.counts[0] += xs.iter().filter(|x| x.is_finite()).count() as u64;
            return;
        }
        let k = bins as f64 / self.max as f64;
        for &x in xs {
            if !x.is_finite() {
                continue;
            }
            let b = ((x.abs() as f64) * k) as usize;
            self.counts[b.min(last)] += 1;
        }
    }
}

/// Both passes' statistics of one tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorStats {
    pub range: Range,
    pub hist: Option<Histogram>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_and_histogram_stream() {
        let mut r = Range::default();
        assert_eq!(r.absmax(), 0.0);
        r.update(&[1.0, -3.0, f32::NAN]);
        r.update(&[2.0]);
        assert_eq!((r.min, r.max, r.count, r.absmax()), (-3.0, 2.0, 3, 3.0));
        let mut h = Histogram::new(4, 4.0);
        h.add(&[0.5, -1.5, 3.99, 4.0, f32::INFINITY, -2.0]);
        assert_eq!(h.counts, vec![1, 1, 1, 2]);
        assert_eq!(h.edge(2), 2.0);
        let mut z = Histogram::new(4, 0.0);
        z.add(&[0.0, 0.0]);
        assert_eq!(z.counts, vec![2, 0, 0, 0]);
    }
}
