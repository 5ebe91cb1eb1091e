//! The run's `metrics.jsonl` (one JSON record per line, appended as the run goes), the
//! PNG curves drawn from it, and (optionally) the same numbers as TensorBoard scalars,
//! with validation overlays as images and the resolved config as text. A resumed run
//! first drops the records past its checkpoint, so the log reads as if the run had never
//! stopped; its TensorBoard file tells the reader to do the same.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use image::RgbImage;
use segtool_core::plot::{self, LineChart, Series, COLOURS};
use serde::{Deserialize, Serialize};

use crate::tensorboard::EventWriter;

/// IoU of one class at a validation; `None`: the class occurs in neither the ground
/// truth nor the predictions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ClassIou {
    pub class: String,
    pub iou: Option<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// `train` (a window of iterations) or `val`.
    pub kind: String,
    /// Iterations completed when the record was taken.
    pub iteration: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss: Option<f64>,
    /// The loss's terms (weighted, so they sum to `loss`): fused head, position (PAM)
    /// head, channel (CAM) head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_fused: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_pam: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_cam: Option<f64>,
    /// The auxiliary head's weighted term (mmsegmentation's `aux.loss_ce`), when the
    /// model has one; `loss` includes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_aux: Option<f64>,
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
    /// Validation: IoU per class, in class order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class_iou: Option<Vec<ClassIou>>,
    /// QAT: the activation thresholds (ranges) at the record, smallest, median and
    /// largest (each tensor's is a TensorBoard scalar `qat/threshold/<tensor>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qat_threshold_min: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qat_threshold_median: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qat_threshold_max: Option<f64>,
    /// QAT: how far the ranges moved since the previous record (EMA or LSQ), the mean
    /// of |log(T_now / T_before)| over the tensors (0.01: about 1%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qat_range_movement: Option<f64>,
}

impl Record {
    /// A record of `kind` at `iteration` with no values.
    pub fn empty(kind: &str, iteration: usize) -> Self {
        Self {
            kind: kind.into(),
            iteration,
            loss: None,
            loss_fused: None,
            loss_pam: None,
            loss_cam: None,
            loss_aux: None,
            lr: None,
            it_per_s: None,
            data_wait: None,
            grad_norm: None,
            miou: None,
            pixel_accuracy: None,
            skipped_steps: None,
            loss_scale: None,
            class_iou: None,
            qat_threshold_min: None,
            qat_threshold_median: None,
            qat_threshold_max: None,
            qat_range_movement: None,
        }
    }

    pub fn val(iteration: usize, miou: f64, pixel_accuracy: f64) -> Self {
        Self {
            miou: Some(miou),
            pixel_accuracy: Some(pixel_accuracy),
            ..Self::empty("val", iteration)
        }
    }

    /// The record's numbers as TensorBoard scalars: `<kind>/<field>` (the JSON field
    /// name) and `<kind>/iou/<class>` for each class with an IoU.
    pub fn scalars(&self) -> Vec<(String, f64)> {
        let fields = [
            ("loss", self.loss),
            ("loss_fused", self.loss_fused),
            ("loss_pam", self.loss_pam),
            ("loss_cam", self.loss_cam),
            ("loss_aux", self.loss_aux),
            ("lr", self.lr),
            ("it_per_s", self.it_per_s),
            ("data_wait", self.data_wait),
            ("grad_norm", self.grad_norm),
            ("miou", self.miou),
            ("pixel_accuracy", self.pixel_accuracy),
            ("skipped_steps", self.skipped_steps.map(|n| n as f64)),
            ("loss_scale", self.loss_scale),
            ("qat_threshold_min", self.qat_threshold_min),
            ("qat_threshold_median", self.qat_threshold_median),
            ("qat_threshold_max", self.qat_threshold_max),
            ("qat_range_movement", self.qat_range_movement),
        ];
        let mut out: Vec<(String, f64)> = fields
            .into_iter()
            .filter_map(|(name, v)| Some((format!("{}/{name}", self.kind), v?)))
            .collect();
        for c in self.class_iou.iter().flatten() {
            if let Some(iou) = c.iou {
                out.push((format!("{}/iou/{}", self.kind, c.class), iou));
            }
        }
        out
    }

    /// One line for logs without a terminal.
    pub fn describe(&self, total: usize) -> String {
        let f = |v: Option<f64>| v.unwrap_or(f64::NAN);
        let mut line = format!(
            "it {}/{total} loss {:.4} lr {:.2e} {:.2} it/s data-wait {:.0}%",
            self.iteration,
            f(self.loss),
            f(self.lr),
            f(self.it_per_s),
            f(self.data_wait) * 100.0
        );
        if let Some(median) = self.qat_threshold_median {
            line.push_str(&format!(
                " qat ranges {:.3}/{median:.3}/{:.3} (min/median/max) moved {:.2}%",
                f(self.qat_threshold_min),
                f(self.qat_threshold_max),
                f(self.qat_range_movement) * 100.0
            ));
        }
        line
    }
}

pub struct MetricsLog {
    path: PathBuf,
    records: Vec<Record>,
    /// Only the main process writes.
    write: bool,
    tensorboard: Option<EventWriter>,
}

/// Folder of the run directory holding the latest validation's overlays
/// (`00.png`, `01.png`, ...: image | ground truth | prediction).
pub const OVERLAY_DIR: &str = "val_overlays";

impl MetricsLog {
    /// Opens the log for a run resuming after `iteration` completed iterations (0: a
    /// fresh run, any old log is replaced).
    pub fn open(path: &Path, iteration: usize, write: bool) -> Result<Self> {
        let mut records = Vec::new();
        if iteration > 0 && path.exists() {
            records = read_records(path)?;
            records.retain(|r| r.iteration <= iteration);
        }
        let log = Self {
            path: path.to_path_buf(),
            records,
            write,
            tensorboard: None,
        };
        if write {
            let mut text = String::new();
            for r in &log.records {
                text.push_str(&serde_json::to_string(r)?);
                text.push('\n');
            }
            segtool_model_spec::io::write_atomic(path, text.as_bytes())
                .with_context(|| format!("writing {}", path.display()))?;
        }
        Ok(log)
    }

    /// Also writes TensorBoard events into `dir` (the main process only): a new event
    /// file for a run starting after `iteration` completed iterations (after 0: a
    /// resume, whose file drops the older files' events past `iteration`), and
    /// `config_text` (the resolved configuration) as text at that step.
    pub fn with_tensorboard(
        mut self,
        dir: &Path,
        iteration: usize,
        config_text: &str,
    ) -> Result<Self> {
        if !self.write {
            return Ok(self);
        }
        let resume_at = (iteration > 0).then_some(iteration as u64 + 1);
        let mut writer = EventWriter::create(dir, resume_at)?;
        if !config_text.is_empty() {
            let markdown = format!("```toml\n{config_text}\n```");
            writer.text("config", iteration as u64, &markdown)?;
        }
        writer.flush()?;
        self.tensorboard = Some(writer);
        Ok(self)
    }

    pub fn records(&self) -> &[Record] {
        &self.records
    }

    /// Appends `record` to metrics.jsonl and, with TensorBoard on, its scalars (flushed:
    /// one push per log interval).
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
        if let Some(tb) = self.tensorboard.as_mut() {
            tb.scalars(record.iteration as u64, &record.scalars())?;
            tb.flush()?;
        }
        self.records.push(record);
        Ok(())
    }

    /// TensorBoard scalars that are not part of a record (QAT's threshold per tensor), at
    /// `iteration`; nothing without TensorBoard.
    pub fn tensorboard_scalars(
        &mut self,
        iteration: usize,
        values: &[(String, f64)],
    ) -> Result<()> {
        if let Some(tb) = self.tensorboard.as_mut() {
            tb.scalars(iteration as u64, values)?;
        }
        Ok(())
    }

    /// A validation record with its overlays (image | ground truth | prediction): the
    /// overlays replace `val_overlays/` beside metrics.jsonl and, with TensorBoard on,
    /// become images `val/overlay/<k>` at the record's iteration.
    pub fn push_validation(&mut self, record: Record, overlays: &[RgbImage]) -> Result<()> {
        if self.write && !overlays.is_empty() {
            let dir = self
                .path
                .parent()
                .unwrap_or(Path::new("."))
                .join(OVERLAY_DIR);
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for (k, img) in overlays.iter().enumerate() {
                let png = encode(img);
                let path = dir.join(format!("{k:02}.png"));
                segtool_model_spec::io::write_atomic_unsynced(&path, &png)
                    .with_context(|| format!("writing {}", path.display()))?;
                if let Some(tb) = self.tensorboard.as_mut() {
                    let (w, h) = img.dimensions();
                    tb.image(
                        &format!("val/overlay/{k}"),
                        record.iteration as u64,
                        png,
                        w,
                        h,
                    )?;
                }
            }
        }
        self.push(record)
    }

    /// `loss.png` (total and per output, raw and smoothed), `lr.png`, and once they
    /// exist `val_miou.png` (mIoU and pixel accuracy) and `loss_scale.png` (fp16).
    /// Titles name the run after `dir`.
    pub fn plot(&self, dir: &Path) -> Result<()> {
        let run = dir
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or("run")
            .to_string();
        for (name, chart) in charts(&run, &self.records) {
            write_chart(&dir.join(name), &chart)?;
        }
        Ok(())
    }
}

/// Every record of a metrics.jsonl (`amp_skip` lines included).
pub fn read_records(path: &Path) -> Result<Vec<Record>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line)
                .with_context(|| format!("{}:{}: not a metrics record", path.display(), n + 1))
        })
        .collect()
}

/// (file name, chart) of the run's curves: what [`MetricsLog::plot`] draws and the run
/// report shows.
pub fn charts(run: &str, records: &[Record]) -> Vec<(&'static str, LineChart)> {
    let series = |kind: &str, field: &dyn Fn(&Record) -> Option<f64>| -> Vec<(f64, f64)> {
        records
            .iter()
            .filter(|r| r.kind == kind)
            .filter_map(|r| Some((r.iteration as f64, field(r)?)))
            .collect()
    };
    let window = 10;
    let mut losses = Vec::new();
    let outputs: [(&str, &dyn Fn(&Record) -> Option<f64>); 4] = [
        ("total", &|r| r.loss),
        ("fused", &|r| r.loss_fused),
        ("PAM", &|r| r.loss_pam),
        ("CAM", &|r| r.loss_cam),
    ];
    for (k, (name, field)) in outputs.into_iter().enumerate() {
        let raw = series("train", field);
        if raw.is_empty() {
            continue;
        }
        let smooth = segtool_core::visual::smooth(&raw, window);
        losses.push(Series::new("", raw, COLOURS[k]).faint());
        losses.push(Series::new(
            format!("{name} (mean of {window})"),
            smooth,
            COLOURS[k],
        ));
    }
    let mut out = vec![
        (
            "loss.png",
            LineChart {
                title: format!("{run}: training loss (pale: per log interval)"),
                x_label: "iteration".into(),
                y_label: "loss (cross-entropy)".into(),
                series: losses,
                y_from_zero: true,
                y_range: None,
            },
        ),
        (
            "lr.png",
            LineChart {
                title: format!("{run}: learning rate"),
                x_label: "iteration".into(),
                y_label: "learning rate (backbone)".into(),
                series: vec![Series::new("", series("train", &|r| r.lr), COLOURS[0])],
                y_from_zero: true,
                y_range: None,
            },
        ),
    ];
    let pct = |f: fn(&Record) -> Option<f64>| -> Vec<(f64, f64)> {
        series("val", &|r| f(r).map(|v| v * 100.0))
    };
    let miou = pct(|r| r.miou);
    if !miou.is_empty() {
        out.push((
            "val_miou.png",
            LineChart {
                title: format!("{run}: validation"),
                x_label: "iteration".into(),
                y_label: "score (%)".into(),
                series: vec![
                    Series::new("mIoU", miou, COLOURS[0]),
                    Series::new("pixel accuracy", pct(|r| r.pixel_accuracy), COLOURS[1]),
                ],
                y_from_zero: false,
                y_range: Some((0.0, 100.0)),
            },
        ));
    }
    let median = series("train", &|r| r.qat_threshold_median);
    if !median.is_empty() {
        out.push((
            "qat_ranges.png",
            LineChart {
                title: format!("{run}: QAT activation ranges"),
                x_label: "iteration".into(),
                y_label: "threshold T".into(),
                series: vec![
                    Series::new("max", series("train", &|r| r.qat_threshold_max), COLOURS[2]),
                    Series::new("median", median, COLOURS[0]),
                    Series::new("min", series("train", &|r| r.qat_threshold_min), COLOURS[1]),
                ],
                y_from_zero: true,
                y_range: None,
            },
        ));
    }
    let scale = series("train", &|r| r.loss_scale);
    if !scale.is_empty() {
        out.push((
            "loss_scale.png",
            LineChart {
                title: format!("{run}: fp16 loss scale"),
                x_label: "iteration".into(),
                y_label: "loss scale".into(),
                series: vec![Series::new("", scale, COLOURS[3])],
                y_from_zero: true,
                y_range: None,
            },
        ));
    }
    out
}

/// Width and height of the run's charts.
pub const CHART_SIZE: (u32, u32) = (720, 400);

fn encode(img: &RgbImage) -> Vec<u8> {
    segtool_core::dataset::encode_png(&image::DynamicImage::ImageRgb8(img.clone()))
}

/// Draws `chart` at [`CHART_SIZE`] into a PNG file.
pub fn write_chart(path: &Path, chart: &LineChart) -> Result<()> {
    let img = plot::line_chart(chart, CHART_SIZE.0, CHART_SIZE.1)
        .map_err(|e| anyhow::anyhow!("drawing {}: {e}", path.display()))?;
    segtool_model_spec::io::write_atomic_unsynced(path, &encode(&img))
        .with_context(|| format!("writing {}", path.display()))
}

/// `<stem>.loss.png` (raw and smoothed over 25 iterations) and `<stem>.loss.csv` of
/// (iteration, loss) pairs, e.g. [`crate::Trainer::losses`].
pub fn write_loss_curve(stem: &Path, losses: &[(usize, f64)]) -> Result<()> {
    let points: Vec<(f64, f64)> = losses.iter().map(|&(i, l)| (i as f64, l)).collect();
    let smooth = segtool_core::visual::smooth(&points, 25);
    let run = stem
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("run");
    let chart = LineChart {
        title: format!("{run}: training loss"),
        x_label: "iteration".into(),
        y_label: "loss (cross-entropy, 3 outputs)".into(),
        series: vec![
            Series::new("per iteration", points, COLOURS[0]).faint(),
            Series::new("mean of 25", smooth, COLOURS[0]),
        ],
        y_from_zero: true,
        y_range: None,
    };
    write_chart(&stem.with_extension("loss.png"), &chart)?;
    let csv: String = std::iter::once("iteration,loss\n".to_string())
        .chain(losses.iter().map(|(i, l)| format!("{i},{l}\n")))
        .collect();
    let csv_path = stem.with_extension("loss.csv");
    segtool_model_spec::io::write_atomic(&csv_path, csv.as_bytes())
        .with_context(|| format!("writing {}", csv_path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn train(iteration: usize) -> Record {
        Record {
            loss: Some(1.0 / iteration as f64),
            lr: Some(0.01),
            ..Record::empty("train", iteration)
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
