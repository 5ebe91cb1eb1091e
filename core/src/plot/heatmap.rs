//! Heatmaps: normalised confusion matrices with a colour scale.

use image::RgbImage;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{
    class_names_below, frame, render, Area, BackendCoord, FAMILY, TITLE_BAND, X_LABEL_BAND,
};

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
        colour_scale(&side, name_px)
    })
}

/// The colour scale beside the matrix: 0 .. 100 % of the ground-truth class's pixels,
/// between the title band and the class names (`name_px` high) below the matrix.
fn colour_scale(side: &Area<'_>, name_px: u32) -> Result<(), String> {
    let e = |e: DrawingAreaErrorKind<_>| e.to_string();
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
}

/// White (0) to dark blue (1).
fn heat(f: f64) -> RGBColor {
    let f = f.clamp(0.0, 1.0);
    let lerp = |a: f64, b: f64| (a + (b - a) * f).round() as u8;
    RGBColor(lerp(255.0, 8.0), lerp(255.0, 48.0), lerp(255.0, 107.0))
}
