//! Line charts over shared axes: training curves, raw values under their smoothed curve.

use image::RgbImage;
use plotters::prelude::*;

use super::{frame, pale, render, rgb, tick_label, FAMILY};

/// One curve of a [`LineChart`].
#[derive(Clone, Debug)]
pub struct Series {
    /// Legend entry; empty: not in the legend.
    pub name: String,
    pub points: Vec<(f64, f64)>,
    pub colour: [u8; 3],
    /// Drawn thin and pale (raw values under their smoothed curve).
    pub faint: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>, colour: [u8; 3]) -> Self {
        Self {
            name: name.into(),
            points,
            colour,
            faint: false,
        }
    }

    pub fn faint(mut self) -> Self {
        self.faint = true;
        self
    }
}

/// A line chart over shared axes.
#[derive(Clone, Debug, Default)]
pub struct LineChart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub series: Vec<Series>,
    /// Include y = 0 in the range (losses, accuracies).
    pub y_from_zero: bool,
    /// Fixed y range (e.g. 0..100 for percentages); overrides the data's.
    pub y_range: Option<(f64, f64)>,
}

/// Draws `chart`; non-finite points are skipped. A chart without points still has its
/// frame, title and labels (and says "no data").
pub fn line_chart(chart: &LineChart, width: u32, height: u32) -> Result<RgbImage, String> {
    render(width, height, |root| {
        let area = frame(root, &chart.title, &chart.x_label, &chart.y_label)?;
        let finite = |&&(x, y): &&(f64, f64)| x.is_finite() && y.is_finite();
        let pts: Vec<(f64, f64)> = chart
            .series
            .iter()
            .flat_map(|s| s.points.iter().filter(finite).copied())
            .collect();
        let (x0, x1, y0, y1) = axis_ranges(chart, &pts);
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let mut ctx = ChartBuilder::on(&area)
            .x_label_area_size(22)
            .y_label_area_size(58)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(e)?;
        let ticks = TextStyle::from((FAMILY, 12).into_font()).color(&BLACK);
        ctx.configure_mesh()
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(215, 215, 215))
            .axis_style(BLACK)
            .x_labels(7)
            .y_labels(6)
            .x_label_formatter(&|v| tick_label(*v))
            .y_label_formatter(&|v| tick_label(*v))
            .label_style(ticks)
            .draw()
            .map_err(e)?;
        if pts.is_empty() {
            ctx.draw_series(std::iter::once(Text::new(
                "no data",
                ((x0 + x1) / 2.0, (y0 + y1) / 2.0),
                (FAMILY, 14).into_font(),
            )))
            .map_err(e)?;
        }
        let mut legend = false;
        // Faint series first, so the smoothed curves are drawn over them.
        let mut order: Vec<&Series> = chart.series.iter().collect();
        order.sort_by_key(|s| !s.faint);
        for s in order {
            let points: Vec<(f64, f64)> = s.points.iter().filter(finite).copied().collect();
            let style = if s.faint {
                pale(s.colour).stroke_width(1)
            } else {
                rgb(s.colour).stroke_width(2)
            };
            let drawn = if points.len() == 1 {
                ctx.draw_series(std::iter::once(Circle::new(points[0], 3, style.filled())))
                    .map_err(e)?
            } else {
                ctx.draw_series(LineSeries::new(points, style)).map_err(e)?
            };
            if !s.name.is_empty() {
                legend = true;
                drawn.label(s.name.clone()).legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], style.stroke_width(2))
                });
            }
        }
        if legend {
            let corner = legend_corner(&pts, (x0, x1, y0, y1));
            ctx.configure_series_labels()
                .position(corner)
                .background_style(WHITE.mix(0.85))
                .border_style(RGBColor(160, 160, 160))
                .label_font(TextStyle::from((FAMILY, 12).into_font()).color(&BLACK))
                .draw()
                .map_err(e)?;
        }
        Ok(())
    })
}

/// The axes' ranges `(x0, x1, y0, y1)` over the finite points: `y_range` when given,
/// else the data's, padded by 4% (from zero with `y_from_zero`), and widened where
/// the data are flat.
fn axis_ranges(chart: &LineChart, pts: &[(f64, f64)]) -> (f64, f64, f64, f64) {
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if pts.is_empty() {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if chart.y_from_zero {
        y0 = y0.min(0.0);
        y1 = y1.max(0.0);
    }
    if let Some((lo, hi)) = chart.y_range {
        (y0, y1) = (lo, hi);
    }
    if x1 - x0 < 1e-12 {
        (x0, x1) = (x0 - 0.5, x1 + 0.5);
    }
    if y1 - y0 < 1e-12 * y0.abs().max(1.0) {
        let pad = 0.05 * y0.abs().max(1e-6);
        (y0, y1) = (y0 - pad, y1 + pad);
    } else if chart.y_range.is_none() {
        let pad = 0.04 * (y1 - y0);
        y1 += pad;
        if !(chart.y_from_zero && y0 == 0.0) {
            y0 -= pad;
        }
    }
    (x0, x1, y0, y1)
}

/// Where the legend goes: the place (corners first, then the right and left middles)
/// with the fewest points under it.
fn legend_corner(
    pts: &[(f64, f64)],
    (x0, x1, y0, y1): (f64, f64, f64, f64),
) -> SeriesLabelPosition {
    let crowd = |right: bool, band: (f64, f64)| {
        pts.iter()
            .filter(|(x, y)| {
                let fx = (x - x0) / (x1 - x0);
                let fy = (y - y0) / (y1 - y0);
                (if right { fx > 0.55 } else { fx < 0.45 }) && (band.0..=band.1).contains(&fy)
            })
            .count()
    };
    let (top, bottom, middle) = ((0.62, 1.0), (0.0, 0.38), (0.3, 0.7));
    let corners = [
        (SeriesLabelPosition::UpperRight, crowd(true, top)),
        (SeriesLabelPosition::LowerRight, crowd(true, bottom)),
        (SeriesLabelPosition::UpperLeft, crowd(false, top)),
        (SeriesLabelPosition::LowerLeft, crowd(false, bottom)),
        (SeriesLabelPosition::MiddleRight, crowd(true, middle)),
        (SeriesLabelPosition::MiddleLeft, crowd(false, middle)),
    ];
    corners.into_iter().min_by_key(|c| c.1).unwrap().0
}
