//! Online hard example mining for cross-entropy, as mmsegmentation's `OHEMPixelSampler`
//! (thresholded form) does it: keep the pixels whose predicted probability of their true
//! class is below `thresh`, but at least the `min_kept` hardest ones, and average the
//! cross-entropy over the kept pixels only.

use segtool_core::IGNORE_LABEL;
use tch::{Kind, Reduction, Tensor};

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ohem {
    /// Pixels predicted with probability below this are "hard".
    pub thresh: f64,
    /// At least this many pixels per batch are kept (the hardest ones).
    pub min_kept: usize,
}

impl Ohem {
    /// Mean CE over the kept pixels of `logits` (N, K, H, W) against `target` (N, H, W).
    pub fn loss(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        let keep = tch::no_grad(|| self.keep_mask(logits, target));
        let per_pixel = logits.cross_entropy_loss::<Tensor>(
            target,
            None,
            Reduction::None,
            IGNORE_LABEL as i64,
            0.0,
        );
        let kept = keep.sum(Kind::Float).clamp_min(1.0);
        (per_pixel * keep).sum(Kind::Float) / kept
    }

    /// 1.0 where a pixel is kept, 0.0 elsewhere (ignored pixels never are).
    pub fn keep_mask(&self, logits: &Tensor, target: &Tensor) -> Tensor {
        let valid = target.ne(IGNORE_LABEL as i64);
        let safe_target = target.where_self(&valid, &target.zeros_like());
        let prob = logits
            .detach()
            .softmax(1, Kind::Float)
            .gather(1, &safe_target.unsqueeze(1), false)
            .squeeze_dim(1);
        let valid_prob = prob.masked_select(&valid);
        let count = valid_prob.numel();
        let threshold = if count == 0 {
            self.thresh
        } else {
            let sorted = valid_prob.sort(0, false).0;
            let k = self.min_kept.min(count - 1) as i64;
            sorted.double_value(&[k]).max(self.thresh)
        };
        (prob.lt(threshold).logical_and(&valid)).to_kind(Kind::Float)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_hard_pixels_and_at_least_min_kept() {
        // Two classes, four pixels: probabilities of the true class 0.5, 0.73, 0.88, ignored.
        let logits = Tensor::from_slice(&[0f32, 0., 0., 0., 0., 1., 2., 5.]).view([1, 2, 2, 2]);
        let target = Tensor::from_slice(&[1i64, 1, 1, 255]).view([1, 2, 2]);
        let only_hard = Ohem {
            thresh: 0.7,
            min_kept: 0,
        };
        let keep = Vec::<f32>::try_from(only_hard.keep_mask(&logits, &target).view(-1)).unwrap();
        assert_eq!(keep, [1., 0., 0., 0.]);
        let two = Ohem {
            thresh: 0.7,
            min_kept: 2,
        };
        let keep = Vec::<f32>::try_from(two.keep_mask(&logits, &target).view(-1)).unwrap();
        assert_eq!(keep, [1., 1., 0., 0.]);
        // The loss is the mean CE of the two kept pixels.
        let expected = -(0.5f64.ln() + (1f64.exp() / (1.0 + 1f64.exp())).ln()) / 2.0;
        let loss = two.loss(&logits, &target).double_value(&[]);
        assert!((loss - expected).abs() < 1e-6, "{loss} vs {expected}");
    }
}
