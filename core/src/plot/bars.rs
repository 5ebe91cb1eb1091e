//! Bar charts: one bar per class (per-class IoU).

use image::RgbImage;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{class_names_below, frame, render, rgb, BackendCoord, COLOURS, FAMILY};

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
