//! Confusion matrix and mIoU, accumulated over a whole dataset (intersection and union
//! summed over every image before dividing), which is the number papers report.

#[derive(Clone, Debug, PartialEq)]
pub struct ConfusionMatrix {
    num_classes: usize,
    /// Row = ground truth, column = prediction.
    counts: Vec<u64>,
}

impl ConfusionMatrix {
    pub fn new(num_classes: usize) -> Self {
        Self {
            num_classes,
            counts: vec![0; num_classes * num_classes],
        }
    }

    pub fn num_classes(&self) -> usize {
        self.num_classes
    }

    /// Adds one image. Targets equal to `ignore` or out of range are skipped.
    pub fn update(&mut self, target: &[u8], prediction: &[u8], ignore: u8) {
        assert_eq!(
            target.len(),
            prediction.len(),
            "target and prediction sizes differ"
        );
        let k = self.num_classes;
        for (&t, &p) in target.iter().zip(prediction) {
            if t == ignore || t as usize >= k {
                continue;
            }
            let p = (p as usize).min(k - 1);
            self.counts[t as usize * k + p] += 1;
        }
    }

    pub fn merge(&mut self, other: &ConfusionMatrix) {
        assert_eq!(self.num_classes, other.num_classes);
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
    }

    pub fn get(&self, target: usize, prediction: usize) -> u64 {
        self.counts[target * self.num_classes + prediction]
    }

    /// IoU per class; `None` for a class absent from both targets and predictions.
    pub fn iou_per_class(&self) -> Vec<Option<f64>> {
        let k = self.num_classes;
        (0..k)
            .map(|c| {
                let tp = self.get(c, c);
                let gt: u64 = (0..k).map(|p| self.get(c, p)).sum();
                let pred: u64 = (0..k).map(|t| self.get(t, c)).sum();
                let union = gt + pred - tp;
                (union > 0).then(|| tp as f64 / union as f64)
            })
            .collect()
    }

    /// Mean IoU over classes present in targets or predictions.
    pub fn mean_iou(&self) -> f64 {
        let ious: Vec<f64> = self.iou_per_class().into_iter().flatten().collect();
        if ious.is_empty() {
            0.0
        } else {
            ious.iter().sum::<f64>() / ious.len() as f64
        }
    }

    pub fn pixel_accuracy(&self) -> f64 {
        let total: u64 = self.counts.iter().sum();
        let correct: u64 = (0..self.num_classes).map(|c| self.get(c, c)).sum();
        if total == 0 {
            0.0
        } else {
            correct as f64 / total as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miou_by_hand() {
        let mut cm = ConfusionMatrix::new(3);
        // class 0: tp 2, fn 1 (->1); class 1: tp 1, fp 1; class 2 absent; one ignored pixel
        cm.update(&[0, 0, 0, 1, 255], &[0, 0, 1, 1, 2], 255);
        let iou = cm.iou_per_class();
        assert_eq!(iou[0], Some(2.0 / 3.0));
        assert_eq!(iou[1], Some(1.0 / 2.0));
        assert_eq!(iou[2], None);
        assert!((cm.mean_iou() - (2.0 / 3.0 + 0.5) / 2.0).abs() < 1e-12);
        assert!((cm.pixel_accuracy() - 0.75).abs() < 1e-12);
    }

    #[test]
    fn accumulates_over_images_not_mean_of_images() {
        let mut a = ConfusionMatrix::new(2);
        a.update(&[1, 1, 1, 1], &[1, 1, 1, 1], 255);
        let mut b = ConfusionMatrix::new(2);
        b.update(&[1], &[0], 255);
        a.merge(&b);
        assert_eq!(a.iou_per_class()[1], Some(0.8));
    }
}
