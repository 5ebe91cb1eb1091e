//! The validation images and their fp32 decisions, prepared once; each mix of the search
//! is then one ONNX Runtime pass over them (agreement with fp32, and mIoU with labels).

use std::path::{Path, PathBuf};

use ndarray::Array4;
use segtool_core::metrics::ConfusionMatrix;

use crate::session::OrtModel;
use crate::{read_image, CalibrationError, Feed};

/// The validation images and their fp32 reference, preloaded.
pub(super) struct Evaluator {
    pub(super) inputs: Vec<Array4<f32>>,
    reference: Vec<Vec<u8>>,
    labels: Option<Vec<Vec<u8>>>,
    classes: usize,
    feed: Feed,
    threads: Option<usize>,
    pub(super) miou_fp32: Option<f64>,
}

impl Evaluator {
    pub(super) fn new(
        fp32: &[u8],
        images: &[PathBuf],
        labels: Option<&Path>,
        feed: &Feed,
        threads: Option<usize>,
    ) -> Result<Self, CalibrationError> {
        let inputs: Vec<Array4<f32>> = images
            .iter()
            .map(|p| feed.tensor(&read_image(p)?))
            .collect::<Result<_, CalibrationError>>()?;
        let labels = match labels {
            None => None,
            // Scores of a card model come out at the model's own resolution, not the
            // labels'; its mIoU would need the card's decoding in the loop.
            Some(_) if matches!(feed, Feed::Card(_)) => {
                return Err(CalibrationError::Input(
                    "--labels (mIoU) is for segtool exports; a model from elsewhere is \
                     searched by --min-agreement"
                        .into(),
                ))
            }
            Some(dir) => Some(
                images
                    .iter()
                    .zip(&inputs)
                    .map(|(p, x)| {
                        let stem = p.file_stem().unwrap_or_default().to_string_lossy();
                        let path = dir.join(format!("{stem}.png"));
                        let l = crate::read_label(&path)?;
                        if l.len() != x.shape()[2] * x.shape()[3] {
                            return Err(CalibrationError::Input(format!(
                                "{}: label size differs from the image's",
                                path.display()
                            )));
                        }
                        Ok(l.into_raw())
                    })
                    .collect::<Result<Vec<_>, CalibrationError>>()?,
            ),
        };
        let mut ev = Self {
            inputs,
            reference: Vec::new(),
            labels,
            classes: feed.classes(),
            feed: feed.clone(),
            threads,
            miou_fp32: None,
        };
        let (pred, miou) = ev.predict(fp32)?;
        ev.reference = pred;
        ev.miou_fp32 = miou;
        Ok(ev)
    }

    fn predict(&self, model: &[u8]) -> Result<(Vec<Vec<u8>>, Option<f64>), CalibrationError> {
        let mut ort = OrtModel::new(model, self.threads)?;
        let mut out = Vec::with_capacity(self.inputs.len());
        let mut cm = ConfusionMatrix::new(self.classes);
        for (i, x) in self.inputs.iter().enumerate() {
            let o = ort.run(x.view(), &[])?;
            let scores = match self.feed.output() {
                Some(name) => o.get(name),
                None => o.values().next(),
            };
            let scores = scores.ok_or_else(|| {
                CalibrationError::Model("the model has no float output (logits)".into())
            })?;
            let pred = self.feed.decisions(scores);
            if let Some(l) = &self.labels {
                cm.update(&l[i], &pred, 255);
            }
            out.push(pred);
        }
        Ok((out, self.labels.as_ref().map(|_| cm.mean_iou())))
    }

    /// (agreement with fp32, mIoU against labels).
    pub(super) fn evaluate(&self, model: &[u8]) -> Result<(f64, Option<f64>), CalibrationError> {
        let (pred, miou) = self.predict(model)?;
        let (mut same, mut total) = (0u64, 0u64);
        for (p, r) in pred.iter().zip(&self.reference) {
            same += p.iter().zip(r).filter(|(a, b)| a == b).count() as u64;
            total += p.len() as u64;
        }
        Ok((same as f64 / total.max(1) as f64, miou))
    }
}
