//! Charts with text, drawn with plotters into RGB images: line charts (training curves),
//! bar charts (per-class IoU) and heatmaps (normalised confusion matrices). Every chart
//! has a title, axes with tick numbers, axis labels with units and, for several series, a
//! legend. The font (DejaVu Sans, cut down to Latin-1: `core/fonts/`) is compiled into
//! the binary, so plots have their text on a machine without any system font.
//!
//! Layout: the title sits in the top [`TITLE_BAND`] pixels, the x-axis label in the
//! bottom [`X_LABEL_BAND`] pixels and the (rotated) y-axis label in the left
//! [`Y_LABEL_BAND`] pixels; tick numbers sit between those bands and the plot area.

mod bars;
mod heatmap;
mod line;

use std::sync::Once;

use image::{Rgb, RgbImage};
/// A pixel position on the drawing backend.
type BackendCoord = (i32, i32);
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use plotters::style::FontTransform;

pub use bars::bar_chart;
pub use heatmap::confusion_heatmap;
pub use line::{line_chart, LineChart, Series};

/// The embedded font (see `core/fonts/README.md`).
pub static FONT: &[u8] = include_bytes!("../../fonts/DejaVuSans-subset.ttf");

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
