//! Percentile: the smallest threshold below which `p`% of the `|x|` values fall, read from
//! the histogram (upper edge of the bin where the cumulative count reaches the target).

use crate::stats::Histogram;

pub fn threshold(hist: &Histogram, percentile: f64) -> f32 {
    let total = hist.total();
    if total == 0 {
        return 0.0;
    }
    let target = (percentile / 100.0).clamp(0.0, 1.0) * total as f64;
    let mut cum = 0u64;
    for (i, &c) in hist.counts.iter().enumerate() {
        cum += c;
        if cum as f64 >= target {
            return hist.edge(i + 1);
        }
    }
    hist.max
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_of_a_uniform() {
        // |x| uniform on [0, 1): 99.9% of the mass is below 0.999.
        let xs: Vec<f32> = (0..200_000).map(|i| i as f32 / 200_000.0).collect();
        let mut h = Histogram::new(2048, 1.0);
        h.add(&xs);
        let bin = h.bin_width() as f32;
        for p in [50.0, 99.0, 99.9, 99.99] {
            let t = threshold(&h, p);
            let want = (p / 100.0) as f32;
            assert!((t - want).abs() <= bin, "p{p}: {t} vs {want}");
        }
        assert_eq!(threshold(&h, 100.0), 1.0);
        assert_eq!(threshold(&Histogram::new(8, 0.0), 99.0), 0.0);
    }
}
