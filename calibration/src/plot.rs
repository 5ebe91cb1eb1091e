//! The `--auto` trade-off as a PNG (plotters' bitmap backend, no text: the numbers are in
//! the CSV/JSON beside it). x: ORT CPU latency (ms), y: the target metric (agreement or
//! mIoU). Black square: fp32; red circle: all-INT8; blue: the search's steps, joined in
//! order; green ring: the chosen point; grey horizontal line: the target (agreement);
//! light grid: 5 x 5 cells over the data range.

use image::RgbImage;
use plotters::prelude::*;

use crate::auto::{AutoResult, RowKind, Target};
use crate::CalibrationError;

fn plot_err(e: impl std::fmt::Display) -> CalibrationError {
    CalibrationError::Input(format!("plot: {e}"))
}

/// The trade-off chart of `r` (width x height pixels).
pub fn tradeoff_png(r: &AutoResult, width: u32, height: u32) -> Result<RgbImage, CalibrationError> {
    let y_of = |row: &crate::auto::Row| match r.target {
        Target::MinAgreement(_) => row.agreement * 100.0,
        Target::MaxMiouDrop(_) => row.miou.unwrap_or(0.0) * 100.0,
    };
    let timed = r.rows.iter().all(|row| row.latency_ms > 0.0);
    // Untimed: the rows are spread along x in table order.
    let x_of = |i: usize, row: &crate::auto::Row| {
        if timed {
            row.latency_ms
        } else {
            i as f64
        }
    };
    let pts: Vec<(f64, f64)> = r
        .rows
        .iter()
        .enumerate()
        .map(|(i, row)| (x_of(i, row), y_of(row)))
        .collect();
    let target_y = match r.target {
        Target::MinAgreement(a) => Some(a * 100.0),
        Target::MaxMiouDrop(p) => r.rows[0].miou.map(|m| m * 100.0 - p),
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts.iter().chain(target_y.map(|t| (pts[0].0, t)).iter()) {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    let pad = |a: f64, b: f64| ((b - a) * 0.08).max(1e-3);
    let (px, py) = (pad(x0, x1), pad(y0, y1));
    let (x0, x1, y0, y1) = (x0 - px, x1 + px, y0 - py, y1 + py);

    let mut buf = vec![255u8; (width * height * 3) as usize];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_err)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(24)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(plot_err)?;
        let grid = RGBColor(225, 225, 225);
        for k in 0..=5 {
            let x = x0 + (x1 - x0) * k as f64 / 5.0;
            let y = y0 + (y1 - y0) * k as f64 / 5.0;
            let c = if k == 0 || k == 5 { BLACK } else { grid };
            chart
                .draw_series(LineSeries::new([(x, y0), (x, y1)], c))
                .map_err(plot_err)?;
            chart
                .draw_series(LineSeries::new([(x0, y), (x1, y)], c))
                .map_err(plot_err)?;
        }
        if let Some(t) = target_y {
            chart
                .draw_series(LineSeries::new(
                    [(x0, t), (x1, t)],
                    RGBColor(150, 150, 150).stroke_width(2),
                ))
                .map_err(plot_err)?;
        }
        // The search path: int8, then each step.
        let path: Vec<(f64, f64)> = pts[1..].to_vec();
        chart
            .draw_series(LineSeries::new(
                path,
                RGBColor(31, 119, 180).stroke_width(2),
            ))
            .map_err(plot_err)?;
        for (i, (row, &(x, y))) in r.rows.iter().zip(&pts).enumerate() {
            match row.kind {
                RowKind::Fp32 => chart
                    .draw_series([EmptyElement::at((x, y))
                        + Rectangle::new([(-6, -6), (6, 6)], BLACK.filled())])
                    .map(|_| ()),
                RowKind::Int8 => chart
                    .draw_series([Circle::new((x, y), 6, RGBColor(214, 39, 40).filled())])
                    .map(|_| ()),
                RowKind::Step(_) => chart
                    .draw_series([Circle::new((x, y), 4, RGBColor(31, 119, 180).filled())])
                    .map(|_| ()),
            }
            .map_err(plot_err)?;
            if Some(i) == r.chosen {
                chart
                    .draw_series([Circle::new(
                        (x, y),
                        11,
                        RGBColor(44, 160, 44).stroke_width(3),
                    )])
                    .map_err(plot_err)?;
            }
        }
        root.present().map_err(plot_err)?;
    }
    RgbImage::from_raw(width, height, buf).ok_or_else(|| plot_err("buffer size"))
}

/// [`tradeoff_png`] encoded as PNG bytes.
pub fn tradeoff_png_bytes(r: &AutoResult) -> Result<Vec<u8>, CalibrationError> {
    let img = tradeoff_png(r, 720, 480)?;
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, image::ImageFormat::Png)
        .map_err(plot_err)?;
    Ok(out.into_inner())
}
