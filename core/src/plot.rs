//! Charts with text, drawn with plotters into RGB images: line charts (training curves),
//! bar charts (per-class IoU) and heatmaps (normalised confusion matrices). Every chart
//! has a title, axes with tick numbers, axis labels with units and, for several series, a
//! legend. The font (DejaVu Sans, cut down to Latin-1: `core/fonts/`) is compiled into
//! the binary, so plots have their text on a machine without any system font.
//!
//! Layout: the title sits in the top [`TITLE_BAND`] pixels, the x-axis label in the
//! bottom [`X_LABEL_BAND`] pixels and the (rotated) y-axis label in the left
//! [`Y_LABEL_BAND`] pixels; tick numbers sit between those bands and the plot area.

use std::sync::Once;

use image::{Rgb, RgbImage};
/// A pixel position on the drawing backend.
type BackendCoord = (i32, i32);
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

/// The embedded font (see `core/fonts/README.md`).
pub static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans-subset.ttf");

/// Height of the band at the top that holds the title.
pub const TITLE_BAND: u32 = 30;
/// Height of the band at the bottom that holds the x-axis label.
pub const X_LABEL_BAND: u32 = 24;
/// Width of the band at the left that holds the y-axis label.
pub const Y_LABEL_BAND: u32 = 24;

/// Distinct series colours (matplotlib's tab10 order).
pub const COLOURS: [[u8; 3]; 8] = [
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
];

const FAMILY: &str = "sans-serif";

/// Registers the embedded font with plotters (once per process).
fn ensure_font() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        for style in [FontStyle::Normal, FontStyle::Bold] {
            if plotters::style::register_font(FAMILY, style, FONT).is_err() {
                panic!("the embedded plot font does not parse");
            }
        }
    });
}

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

/// Tick numbers that stay short whatever the magnitude: whole numbers as such (iterations),
/// 0.001 and 12345.6 as `1.0e-3`, `1.2e4`.
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if v == 0.0 {
        "0".into()
    } else if v.fract() == 0.0 && a < 1e6 {
        format!("{v:.0}")
    } else if !(1e-2..1e4).contains(&a) {
        format!("{v:.1e}")
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn rgb(c: [u8; 3]) -> RGBColor {
    RGBColor(c[0], c[1], c[2])
}

fn pale(c: [u8; 3]) -> RGBColor {
    let mix = |v: u8| ((v as u16 + 2 * 255) / 3) as u8;
    RGBColor(mix(c[0]), mix(c[1]), mix(c[2]))
}

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;

/// Title in the top band, the x-axis label in the bottom band and the y-axis label
/// (rotated) in the left band; returns the rest of the area.
fn frame<'a>(
    root: &Area<'a>,
    title: &str,
    x_label: &str,
    y_label: &str,
) -> Result<Area<'a>, String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
    let (w, h) = root.dim_in_pixel();
    root.fill(&WHITE).map_err(e)?;
    let centre = Pos::new(HPos::Center, VPos::Center);
    let title_style = TextStyle::from((FAMILY, 17).into_font().style(FontStyle::Bold))
        .color(&BLACK)
        .pos(centre);
    root.draw(&Text::new(
        title.to_string(),
        (w as i32 / 2, TITLE_BAND as i32 / 2),
        title_style,
    ))
    .map_err(e)?;
    let label = TextStyle::from((FAMILY, 14).into_font())
        .color(&BLACK)
        .pos(centre);
    root.draw(&Text::new(
        x_label.to_string(),
        (
            (Y_LABEL_BAND + (w - Y_LABEL_BAND) / 2) as i32,
            (h - X_LABEL_BAND / 2) as i32,
        ),
        label.clone(),
    ))
    .map_err(e)?;
    root.draw(&Text::new(
        y_label.to_string(),
        (
            Y_LABEL_BAND as i32 / 2,
            (TITLE_BAND + (h - TITLE_BAND - X_LABEL_BAND) / 2) as i32,
        ),
        label.transform(FontTransform::Rotate270),
    ))
    .map_err(e)?;
    Ok(root.margin(TITLE_BAND, X_LABEL_BAND, Y_LABEL_BAND, 12))
}

fn render(
    width: u32,
    height: u32,
    draw: impl FnOnce(&Area<'_>) -> Result<(), String>,
) -> Result<RgbImage, String> {
    ensure_font();
    let mut buf = vec![255u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        draw(&root)?;
        root.present().map_err(|e| e.to_string())?;
    }
    RgbImage::from_raw(width, height, buf).ok_or_else(|| "plot buffer size".to_string())
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
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in &pts {
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
            // The place (corners first, then the right and left middles) with the
            // fewest points under it.
            let crowd = |right: bool, band: (f64, f64)| {
                pts.iter()
                    .filter(|(x, y)| {
                        let fx = (x - x0) / (x1 - x0);
                        let fy = (y - y0) / (y1 - y0);
                        (if right { fx > 0.55 } else { fx < 0.45 })
                            && (band.0..=band.1).contains(&fy)
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
            let corner = corners.into_iter().min_by_key(|c| c.1).unwrap().0;
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

/// One bar per class (`None`: the class never occurred; drawn as "n/a"), values in
/// `0..=1` shown in percent.
pub fn bar_chart(
    title: &str,
    y_label: &str,
    bars: &[(String, Option<f64>)],
    width: u32,
    height: u32,
) -> Result<RgbImage, String> {
    render(width, height, |root| {
        let area = frame(root, title, "class", y_label)?;
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let n = bars.len().max(1);
        let longest = bars
            .iter()
            .map(|(s, _)| s.chars().count())
            .max()
            .unwrap_or(1);
        // Class names run along the x axis, turned when they would collide.
        let turned = longest * 7 > (width as usize - 100) / n;
        let mut ctx = ChartBuilder::on(&area)
            .x_label_area_size(if turned {
                (longest * 7 + 8).min(120) as u32
            } else {
                22
            })
            .y_label_area_size(44)
            .build_cartesian_2d(0f64..n as f64, 0f64..100f64)
            .map_err(e)?;
        let ticks = TextStyle::from((FAMILY, 12).into_font()).color(&BLACK);
        ctx.configure_mesh()
            .disable_x_mesh()
            .light_line_style(RGBColor(238, 238, 238))
            .bold_line_style(RGBColor(215, 215, 215))
            .axis_style(BLACK)
            .x_labels(0)
            .y_labels(6)
            .y_label_formatter(&|v| format!("{v:.0}"))
            .y_label_style(ticks.clone())
            .draw()
            .map_err(e)?;
        let at: Vec<BackendCoord> = (0..bars.len())
            .map(|i| ctx.backend_coord(&(i as f64 + 0.5, 0.0)))
            .collect();
        let names: Vec<&str> = bars.iter().map(|(s, _)| s.as_str()).collect();
        class_names_below(root, &names, &at, turned, &ticks)?;
        for (i, (_, v)) in bars.iter().enumerate() {
            let colour = rgb(COLOURS[i % COLOURS.len()]);
            match v {
                Some(v) => {
                    let v = v.clamp(0.0, 1.0) * 100.0;
                    ctx.draw_series(std::iter::once(Rectangle::new(
                        [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v)],
                        colour.filled(),
                    )))
                    .map_err(e)?;
                    ctx.draw_series(std::iter::once(Text::new(
                        format!("{v:.1}"),
                        (i as f64 + 0.5, (v + 6.0).min(99.0)),
                        TextStyle::from((FAMILY, 11).into_font())
                            .color(&BLACK)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )))
                    .map_err(e)?;
                }
                None => {
                    ctx.draw_series(std::iter::once(Text::new(
                        "n/a",
                        (i as f64 + 0.5, 4.0),
                        TextStyle::from((FAMILY, 11).into_font())
                            .color(&RGBColor(120, 120, 120))
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )))
                    .map_err(e)?;
                }
            }
        }
        Ok(())
    })
}

/// Confusion matrix `counts[truth][prediction]` normalised per row (each ground-truth
/// class sums to 100 %), with class names on both axes and the percentages in the cells.
pub fn confusion_heatmap(
    title: &str,
    classes: &[String],
    counts: &[Vec<u64>],
    size: u32,
) -> Result<RgbImage, String> {
    let n = classes.len().max(1);
    let longest = classes.iter().map(|s| s.chars().count()).max().unwrap_or(1);
    let name_px = (longest * 7 + 10).clamp(30, 130) as u32;
    let legend_w = 70u32;
    let width = size + legend_w;
    render(width, size, |root| {
        let (main, side) = root.split_horizontally(size);
        let area = frame(&main, title, "predicted class", "ground-truth class")?;
        let e = |e: DrawingAreaErrorKind<_>| e.to_string();
        let turned = longest * 7 > size as usize / n;
        let mut ctx = ChartBuilder::on(&area)
            .x_label_area_size(if turned { name_px } else { 24 })
            .y_label_area_size(name_px)
            .build_cartesian_2d(0f64..n as f64, 0f64..n as f64)
            .map_err(e)?;
        let ticks = TextStyle::from((FAMILY, 12).into_font()).color(&BLACK);
        let name_at = |v: &f64| {
            let centre = (v - v.floor() - 0.5).abs() < 1e-6;
            let i = n.wrapping_sub(1).wrapping_sub(v.floor() as usize);
            match classes.get(i) {
                Some(name) if centre => name.clone(),
                _ => String::new(),
            }
        };
        ctx.configure_mesh()
            .disable_mesh()
            .axis_style(BLACK)
            .x_labels(0)
            .y_labels(n * 2 + 1)
            .y_label_formatter(&name_at)
            .y_label_style(ticks.clone())
            .draw()
            .map_err(e)?;
        let at: Vec<BackendCoord> = (0..classes.len())
            .map(|i| ctx.backend_coord(&(i as f64 + 0.5, 0.0)))
            .collect();
        let names: Vec<&str> = classes.iter().map(|s| s.as_str()).collect();
        class_names_below(root, &names, &at, turned, &ticks)?;
        let cell_px = (size.saturating_sub(TITLE_BAND + X_LABEL_BAND + name_px)) as usize / n;
        let name_px = if turned { name_px } else { 24 };
        for (t, row) in counts.iter().enumerate().take(n) {
            let total: u64 = row.iter().sum();
            for (p, &c) in row.iter().enumerate().take(n) {
                let frac = if total == 0 {
                    0.0
                } else {
                    c as f64 / total as f64
                };
                let y = (n - 1 - t) as f64;
                ctx.draw_series(std::iter::once(Rectangle::new(
                    [(p as f64, y), (p as f64 + 1.0, y + 1.0)],
                    heat(frac).filled(),
                )))
                .map_err(e)?;
                if cell_px >= 26 {
                    let ink = if frac > 0.55 { WHITE } else { BLACK };
                    ctx.draw_series(std::iter::once(Text::new(
                        format!("{:.0}", frac * 100.0),
                        (p as f64 + 0.5, y + 0.5),
                        TextStyle::from((FAMILY, 11).into_font())
                            .color(&ink)
                            .pos(Pos::new(HPos::Center, VPos::Center)),
                    )))
                    .map_err(e)?;
                }
            }
        }
        // Colour scale: 0 .. 100 % of the ground-truth class's pixels.
        let (_, sh) = side.dim_in_pixel();
        let top = TITLE_BAND as i32 + 10;
        let bottom = sh as i32 - X_LABEL_BAND as i32 - name_px as i32;
        let steps = 50;
        for k in 0..steps {
            let f0 = k as f64 / steps as f64;
            let y_hi = bottom - ((bottom - top) as f64 * (f0 + 1.0 / steps as f64)) as i32;
            let y_lo = bottom - ((bottom - top) as f64 * f0) as i32;
            side.draw(&Rectangle::new([(8, y_hi), (24, y_lo)], heat(f0).filled()))
                .map_err(e)?;
        }
        side.draw(&Rectangle::new(
            [(8, top), (24, bottom)],
            BLACK.stroke_width(1),
        ))
        .map_err(e)?;
        let small = TextStyle::from((FAMILY, 11).into_font())
            .color(&BLACK)
            .pos(Pos::new(HPos::Left, VPos::Center));
        for pct in [0, 50, 100] {
            let y = bottom - ((bottom - top) as f64 * pct as f64 / 100.0) as i32;
            side.draw(&Text::new(format!("{pct} %"), (28, y), small.clone()))
                .map_err(e)?;
        }
        Ok(())
    })
}

/// Class names under an x axis at the backend positions `at`, turned to read upwards
/// (ending at the axis) when `turned`.
fn class_names_below(
    root: &Area<'_>,
    names: &[&str],
    at: &[BackendCoord],
    turned: bool,
    style: &TextStyle<'_>,
) -> Result<(), String> {
    let style = if turned {
        style
            .clone()
            .transform(FontTransform::Rotate270)
            .pos(Pos::new(HPos::Right, VPos::Center))
    } else {
        style.clone().pos(Pos::new(HPos::Center, VPos::Top))
    };
    for (name, &(x, y)) in names.iter().zip(at) {
        root.draw(&Text::new(name.to_string(), (x, y + 6), style.clone()))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// White (0) to dark blue (1).
fn heat(f: f64) -> RGBColor {
    let f = f.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}

/// Counts pixels darker than `threshold` (all channels) in the rectangle `x0..x1` x
/// `y0..y1`: text and lines in a region of an otherwise white chart.
pub fn dark_pixels(img: &RgbImage, x0: u32, x1: u32, y0: u32, y1: u32, threshold: u8) -> usize {
    let mut n = 0;
    for y in y0..y1.min(img.height()) {
        for x in x0..x1.min(img.width()) {
            let Rgb(p) = *img.get_pixel(x, y);
            n += p.iter().all(|&c| c < threshold) as usize;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(title: &str, x: &str, y: &str) -> RgbImage {
        let pts: Vec<(f64, f64)> = (0..50)
            .map(|i| (i as f64 * 10.0, 2.0 / (1.0 + i as f64)))
            .collect();
        let smooth = crate::visual::smooth(&pts, 5);
        line_chart(
            &LineChart {
                title: title.into(),
                x_label: x.into(),
                y_label: y.into(),
                series: vec![
                    Series::new("", pts, COLOURS[0]).faint(),
                    Series::new("fused", smooth, COLOURS[0]),
                ],
                y_from_zero: true,
                y_range: None,
            },
            640,
            360,
        )
        .unwrap()
    }

    /// The title, x-label and y-label bands hold text exactly when there is text to
    /// show, and the series colour is drawn.
    #[test]
    fn label_regions_hold_text() {
        let (w, h) = (640, 360);
        let with = chart("run: loss", "iteration", "loss (cross-entropy)");
        let without = chart("", "", "");
        let title = |img: &RgbImage| dark_pixels(img, 0, w, 0, TITLE_BAND, 110);
        let xlab = |img: &RgbImage| dark_pixels(img, Y_LABEL_BAND, w, h - X_LABEL_BAND, h, 110);
        let ylab =
            |img: &RgbImage| dark_pixels(img, 0, Y_LABEL_BAND, TITLE_BAND, h - X_LABEL_BAND, 110);
        assert!(title(&with) > 40, "title band empty: {}", title(&with));
        assert!(xlab(&with) > 40, "x-label band empty: {}", xlab(&with));
        assert!(ylab(&with) > 40, "y-label band empty: {}", ylab(&with));
        assert_eq!((title(&without), xlab(&without), ylab(&without)), (0, 0, 0));
        // Tick numbers: dark pixels left of the plot area, between the bands.
        assert!(
            dark_pixels(
                &with,
                Y_LABEL_BAND,
                Y_LABEL_BAND + 50,
                TITLE_BAND,
                h - X_LABEL_BAND - 22,
                110
            ) > 40
        );
        assert!(with.pixels().any(|p| p.0 == COLOURS[0]));
    }

    #[test]
    fn bar_chart_and_heatmap_draw() {
        let bars = vec![
            ("background".to_string(), Some(0.95)),
            ("circle".to_string(), Some(0.5)),
            ("square".to_string(), None),
        ];
        let img = bar_chart("per-class IoU", "IoU (%)", &bars, 640, 360).unwrap();
        assert!(img.pixels().any(|p| p.0 == COLOURS[1]));
        let names: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
        let counts = vec![vec![90, 10, 0], vec![5, 5, 0], vec![0, 0, 0]];
        let img = confusion_heatmap("confusion", &names, &counts, 480).unwrap();
        assert_eq!(img.dimensions(), (550, 480));
        assert!(dark_pixels(&img, 0, 480, 0, TITLE_BAND, 110) > 40);
    }

    #[test]
    fn ticks_stay_short() {
        assert_eq!(tick_label(0.0), "0");
        assert_eq!(tick_label(0.001), "1.0e-3");
        assert_eq!(tick_label(250.0), "250");
        assert_eq!(tick_label(20.0), "20");
        assert_eq!(tick_label(20000.0), "20000");
        assert_eq!(tick_label(0.5), "0.500");
    }
}
