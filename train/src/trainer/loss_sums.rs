//! A step's loss values across micro-batches and ranks.

/// A step's loss values summed over its micro-batches, each weighted by 1/n.
#[derive(Default)]
pub(super) struct LossSums {
    pub(super) total: f64,
    /// Fused, position and channel terms.
    pub(super) terms: [f64; 3],
    pub(super) aux: Option<f64>,
}

impl LossSums {
    pub(super) fn add(&mut self, value: f64, parts: &[f64], scale: f64) {
        self.total += value * scale;
        for (t, p) in self.terms.iter_mut().zip(parts) {
            *t += p * scale;
        }
        if let Some(aux) = parts.get(3) {
            *self.aux.get_or_insert(0.0) += aux * scale;
        }
    }

    /// dist: the values the ranks average, in the order [`LossSums::from_values`] reads.
    pub(super) fn values(&self) -> Vec<f64> {
        let mut values = vec![self.total, self.terms[0], self.terms[1], self.terms[2]];
        values.extend(self.aux);
        values
    }

    pub(super) fn from_values(values: &[f64]) -> Self {
        Self {
            total: values[0],
            terms: [values[1], values[2], values[3]],
            aux: values.get(4).copied(),
        }
    }
}
