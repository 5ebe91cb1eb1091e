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

    /// Adds one image. Targets equal to `ignore` or out of range are skipped. Labels and
    /// predictions are class ids of either width (`u8` up to 256 classes, `u16` above, as
    /// the runtime's class maps hold them).
    pub fn update<T, P>(&mut self, target: &[T], prediction: &[P], ignore: T)
    where
        T: Copy + PartialEq + Into<usize>,
        P: Copy + Into<usize>,
    {
        assert_eq!(
            target.len(),
            prediction.len(),
            "target and prediction sizes differ"
        );
        let k = self.num_classes;
        for (&t, &p) in target.iter().zip(prediction) {
            let t: usize = if t == ignore { continue } else { t.into() };
            if t >= k {
                continue;
            }
            let p = p.into().min(k - 1);
            self.counts[t * k + p] += 1;
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

/// Per-class tables and JSON: what every command that reports mIoU prints or saves, so
/// that `eval`, `demo` and training logs agree on the layout.
impl ConfusionMatrix {
    /// A matrix from row-major counts (row = ground truth); `None` unless there are
    /// exactly `num_classes^2` of them.
    pub fn from_counts(num_classes: usize, counts: Vec<u64>) -> Option<Self> {
        (counts.len() == num_classes * num_classes).then_some(Self {
            num_classes,
            counts,
        })
    }

    /// The counts as rows (one per ground-truth class).
    pub fn rows(&self) -> Vec<Vec<u64>> {
        self.counts
            .chunks(self.num_classes.max(1))
            .map(<[u64]>::to_vec)
            .collect()
    }

    /// Accuracy (recall) per class: correct pixels over ground-truth pixels; `None` for a
    /// class absent from the targets.
    pub fn accuracy_per_class(&self) -> Vec<Option<f64>> {
        let k = self.num_classes;
        (0..k)
            .map(|c| {
                let gt: u64 = (0..k).map(|p| self.get(c, p)).sum();
                (gt > 0).then(|| self.get(c, c) as f64 / gt as f64)
            })
            .collect()
    }

    /// A fixed-width table (class, IoU %, accuracy %), one row per class, then a `mean`
    /// row: mIoU and the mean class accuracy (mmsegmentation's mAcc). Classes without a
    /// name are called `class<i>`; absent classes show `-` and count in neither mean
    /// (see [`Self::mean_iou`]).
    pub fn class_table(&self, names: &[String]) -> String {
        let names: Vec<String> = (0..self.num_classes)
            .map(|c| class_name(names, c))
            .collect();
        let width = names.iter().map(String::len).max().unwrap_or(0).max(5);
        let pct = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.2}", v * 100.0));
        let row =
            |name: &str, iou: String, acc: String| format!("{name:<width$}  {iou:>7}  {acc:>7}\n");
        let mut out = row("class", "IoU".into(), "Acc".into());
        let accuracy = self.accuracy_per_class();
        for (name, (iou, acc)) in names
            .iter()
            .zip(self.iou_per_class().into_iter().zip(&accuracy))
        {
            out += &row(name, pct(iou), pct(*acc));
        }
        out += &format!("{}\n", "-".repeat(width + 18));
        let present: Vec<f64> = accuracy.into_iter().flatten().collect();
        let mean_acc =
            (!present.is_empty()).then(|| present.iter().sum::<f64>() / present.len() as f64);
        out += &row("mean", pct(Some(self.mean_iou())), pct(mean_acc));
        out
    }

    /// `{pixel_accuracy, mean_iou, per_class: [{name, iou, accuracy}], confusion}`, with
    /// `null` for an absent class. The raw counts make the file mergeable: shards
    /// evaluated by separate processes sum (see [`Self::from_json`]) to the whole.
    pub fn to_json(&self, names: &[String]) -> serde_json::Value {
        let per_class: Vec<serde_json::Value> = self
            .iou_per_class()
            .into_iter()
            .zip(self.accuracy_per_class())
            .enumerate()
            .map(|(c, (iou, accuracy))| {
                serde_json::json!({"name": class_name(names, c), "iou": iou, "accuracy": accuracy})
            })
            .collect();
        serde_json::json!({
            "pixel_accuracy": self.pixel_accuracy(),
            "mean_iou": self.mean_iou(),
            "per_class": per_class,
            "confusion": self.rows(),
        })
    }

    /// The matrix back from [`Self::to_json`]'s `confusion` field (other fields are
    /// derived and ignored).
    pub fn from_json(value: &serde_json::Value) -> Result<Self, String> {
        let rows: Vec<Vec<u64>> = serde_json::from_value(value["confusion"].clone())
            .map_err(|e| format!("confusion: {e}"))?;
        let k = rows.len();
        if rows.iter().any(|r| r.len() != k) {
            return Err(format!("confusion is not a square {k}x{k} matrix"));
        }
        Ok(Self {
            num_classes: k,
            counts: rows.concat(),
        })
    }
}

fn class_name(names: &[String], c: usize) -> String {
    names.get(c).cloned().unwrap_or_else(|| format!("class{c}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miou_by_hand() {
        let mut cm = ConfusionMatrix::new(3);
        // class 0: tp 2, fn 1 (->1); class 1: tp 1, fp 1; class 2 absent; one ignored pixel
        cm.update(&[0u8, 0, 0, 1, 255], &[0u8, 0, 1, 1, 2], 255);
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
        a.update(&[1u8, 1, 1, 1], &[1u8, 1, 1, 1], 255);
        let mut b = ConfusionMatrix::new(2);
        b.update(&[1u8], &[0u8], 255);
        a.merge(&b);
        assert_eq!(a.iou_per_class()[1], Some(0.8));
    }

    /// Ids above 255 (u16 labels and predictions, a 300-class model) count where they are.
    #[test]
    fn sixteen_bit_ids() {
        let mut cm = ConfusionMatrix::new(300);
        cm.update(&[299u16, 299, 256, 65535], &[299u16, 256, 256, 0], 65535);
        assert_eq!(
            (cm.get(299, 299), cm.get(299, 256), cm.get(256, 256)),
            (1, 1, 1)
        );
        // u8 labels against a u16 prediction.
        let mut cm = ConfusionMatrix::new(300);
        cm.update(&[7u8, 255], &[280u16, 3], 255);
        assert_eq!(cm.get(7, 280), 1);
    }

    #[test]
    fn json_roundtrip_and_table() {
        let mut cm = ConfusionMatrix::new(3);
        cm.update(&[0u8, 0, 0, 1, 255], &[0u8, 0, 1, 1, 2], 255);
        let names = vec!["road".to_string(), "sky".to_string()];
        let json = cm.to_json(&names);
        assert_eq!(ConfusionMatrix::from_json(&json).unwrap(), cm);
        assert_eq!(json["per_class"][1]["name"], "sky");
        assert_eq!(json["per_class"][2]["name"], "class2");
        assert!(json["per_class"][2]["iou"].is_null());
        assert_eq!(
            cm.accuracy_per_class(),
            vec![Some(2.0 / 3.0), Some(1.0), None]
        );
        let table = cm.class_table(&names);
        assert!(table.contains("road") && table.contains("66.67"), "{table}");
        assert_eq!(ConfusionMatrix::from_counts(2, vec![1, 2, 3]), None);
    }
}
