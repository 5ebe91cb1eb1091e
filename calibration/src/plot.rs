//! The `--auto` trade-off as a PNG, drawn by `segtool_core::plot` (title, tick numbers,
//! axis labels, legend; the embedded font, so it works headless). x: the latency of
//! one validation image in the search's engine (ms; the table order when untimed), y: the target metric
//! (agreement with fp32 or mIoU, %). The search path runs from all-INT8 through each
//! step; fp32, all-INT8 and the chosen mix are single marked points; the target is a
//! horizontal line.

use image::RgbImage;
use segtool_core::plot::{line_chart, LineChart, Series};

use crate::auto::{AutoResult, Row, RowKind, Target};
use crate::CalibrationError;

fn plot_err(e: impl std::fmt::Display) -> CalibrationError {
    CalibrationError::Input(format!("plot: {e}"))
}

/// The trade-off chart of `r` (width x height pixels).
pub fn tradeoff_png(r: &AutoResult, width: u32, height: u32) -> Result<RgbImage, CalibrationError> {
    let (metric, y_of): (&str, fn(&Row) -> f64) = match r.target {
        Target::MinAgreement(_) => ("argmax agreement with fp32 (%)", |row| {
            row.agreement * 100.0
        }),
        Target::MaxMiouDrop(_) => ("mIoU (%)", |row| row.miou.unwrap_or(0.0) * 100.0),
    };
    let timed = r.rows.iter().all(|row| row.latency_ms > 0.0);
    let pts: Vec<(f64, f64)> = r
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| (if timed { row.latency_ms } else { i as f64 }, y_of(row)))
        .collect();
    let point_of = |kind: RowKind| {
        r.rows
            .iter()
            .zip(&pts)
            .filter(|(row, _)| row.kind == kind)
            .map(|(_, &p)| p)
            .collect::<Vec<_>>()
    };
    let mut series = vec![
        Series::new(
            "search: all-INT8, then +1 float layer per step",
            pts[1..].to_vec(),
            [31, 119, 180],
        ),
        Series::new("fp32", point_of(RowKind::Fp32), [0, 0, 0]),
        Series::new("all-INT8", point_of(RowKind::Int8), [214, 39, 40]),
    ];
    if let Some(i) = r.chosen {
        series.push(Series::new(
            format!("chosen: {}", r.rows[i].label()),
            vec![pts[i]],
            [44, 160, 44],
        ));
    }
    let target = match r.target {
        Target::MinAgreement(a) => Some(a * 100.0),
        Target::MaxMiouDrop(p) => r.rows[0].miou.map(|m| m * 100.0 - p),
    };
    if let Some(t) = target {
        let (lo, hi) = pts.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.0), hi.max(p.0))
        });
        series.push(Series::new(
            format!("target {t:.2}%"),
            vec![(lo, t), (hi, t)],
            [150, 150, 150],
        ));
    }
    let chart = LineChart {
        title: "segtool calibrate --auto: accuracy against speed".into(),
        x_label: if timed {
            format!("{} latency per image (ms)", r.engine)
        } else {
            "table row (not timed)".into()
        },
        y_label: metric.into(),
        series,
        ..Default::default()
    };
    line_chart(&chart, width, height).map_err(plot_err)
}

/// [`tradeoff_png`] encoded as PNG bytes.
pub fn tradeoff_png_bytes(r: &AutoResult) -> Result<Vec<u8>, CalibrationError> {
    let img = tradeoff_png(r, 720, 480)?;
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .map_err(plot_err)?;
    Ok(out.into_inner())
}
