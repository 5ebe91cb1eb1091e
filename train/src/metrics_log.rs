//! The run's `metrics.jsonl` (one JSON record per line, appended as the run goes) and the
//! PNG curves drawn from it. A resumed run first drops the records past its checkpoint,
//! so the log reads as if the run had never stopped.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `train` (a window of iterations) or `val`.
    pub kind: String,
    /// Iterations completed when the record was taken.
    pub iteration: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub it_per_s: Option<f64>,
    /// Fraction of the window's wall time the step waited for data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_wait: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miou: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pixel_accuracy: Option<f64>,
    /// fp16 loss scaling: optimiser steps skipped (inf/NaN gradients) in this window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skipped_steps: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f64>,
}

impl Record {
    pub fn val(iteration: usize, miou: f64, pixel_accuracy: f64) -> Self {
        Self {
            kind: "val".into(),
            iteration,
            loss: None,
            lr: None,
            it_per_s: None,
            data_wait: None,
            grad_norm: None,
            miou: Some(miou),
            pixel_accuracy: Some(pixel_accuracy),
            skipped_steps: None,
            loss_scale: None,
        }
    }

    /// One line for logs without a terminal.
    pub fn describe(&self, total: usize) -> String {
        let f = |v: Option<f64>| v.unwrap_or(f64::NAN);
        format!(
            "it {}/{total} loss {:.4} lr {:.2e} {:.2} it/s data-wait {:.0}%",
            self.iteration,
            f(self.loss),
            f(self.lr),
            f(self.it_per_s),
            f(self.data_wait) * 100.0
        )
    }
}

pub struct MetricsLog {
    path: PathBuf,
    records: Vec<Record>,
    /// Only the main process writes.
    write: bool,
}

impl MetricsLog {
    /// Opens the log for a run resuming after `iteration` completed iterations (0: a
    /// fresh run, any old log is replaced).
    pub fn open(path: &Path, iteration: usize, write: bool) -> Result<Self> {
        let mut records = Vec::new();
        if iteration > 0 && path.exists() {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            for (n, line) in text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
            {
                let record: Record = serde_json::from_str(line).with_context(|| {
                    format!("{}:{}: not a metrics record", path.display(), n + 1)
                })?;
                if record.iteration <= iteration {
                    records.push(record);
                }
            }
        }
        let log = Self {
            path: path.to_path_buf(),
            records,
            write,
        };
        if write {
            let mut text = String::new();
            for r in &log.records {
                text.push_str(&serde_json::to_string(r)?);
                text.push('\n');
            }
            segtool_core::io::write_atomic(path, text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(log)
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    pub fn push(&mut self, record: Record) -> Result<()> {
        if self.write {
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&self.path)
                .with_context(|| format!("opening {}", self.path.display()))?;
            writeln!(file, "{}", serde_json::to_string(&record)?)
                .with_context(|| format!("appending to {}", self.path.display()))?;
        }
        self.records.push(record);
        Ok(())
    }

    /// `loss.png` (raw and smoothed), `lr.png` and, once validated, `val_miou.png`.
    pub fn plot(&self, dir: &Path) -> Result<()> {
        let series = |kind: &str, field: fn(&Record) -> Option<f64>| -> Vec<(f64, f64)> {
            self.records
                .iter()
                .filter(|r| r.kind == kind)
                .filter_map(|r| Some((r.iteration as f64, field(r)?)))
                .collect()
        };
        let loss = series("train", |r| r.loss);
        let smooth = segtool_core::visual::smooth(&loss, 10);
        write_plot(&dir.join("loss.png"), &[&loss, &smooth])?;
        write_plot(&dir.join("lr.png"), &[&series("train", |r| r.lr)])?;
        let miou = series("val", |r| r.miou);
        if !miou.is_empty() {
            write_plot(&dir.join("val_miou.png"), &[&miou])?;
        }
        Ok(())
    }
}

fn write_plot(path: &Path, series: &[&[(f64, f64)]]) -> Result<()> {
    let png = segtool_core::visual::line_plot(series, 640, 360);
    let bytes = segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(png));
    segtool_core::io::write_atomic_unsynced(path, &bytes)
        .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn train(iteration: usize) -> Record {
        Record {
            kind: "train".into(),
            iteration,
            loss: Some(1.0 / iteration as f64),
            lr: Some(0.01),
            it_per_s: None,
            data_wait: None,
            grad_norm: None,
            miou: None,
            pixel_accuracy: None,
            skipped_steps: None,
            loss_scale: None,
        }
    }

    #[test]
    fn resume_drops_records_past_the_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("metrics.jsonl");
        let mut log = MetricsLog::open(&path, 0, true).unwrap();
        for it in [10, 20, 30] {
            log.push(train(it)).unwrap();
        }
        log.push(Record::val(30, 0.5, 0.9)).unwrap();
        log.plot(dir.path()).unwrap();
        assert!(dir.path().join("val_miou.png").exists());
        let resumed = MetricsLog::open(&path, 20, true).unwrap();
        assert_eq!(resumed.records(), &[train(10), train(20)]);
        let reread = MetricsLog::open(&path, 100, false).unwrap();
        assert_eq!(reread.records().len(), 2);
    }
}
