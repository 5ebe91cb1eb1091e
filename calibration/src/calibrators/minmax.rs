//! Min-max: the threshold is the largest magnitude seen (no clipping).

use crate::stats::Range;

pub fn threshold(range: &Range) -> f32 {
    range.absmax()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minmax_is_exact_absmax() {
        let mut r = Range::default();
        let xs: Vec<f32> = (0..1000)
            .map(|i| (i as f32 * 0.37).sin() * 2.5 - 0.75)
            .collect();
        r.update(&xs);
        let want = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
        assert_eq!(threshold(&r), want);
        r.update(&[-7.25]);
        assert_eq!(threshold(&r), 7.25);
    }
}
