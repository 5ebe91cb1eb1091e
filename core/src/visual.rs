//! Small plots written as PNG with no font or plotting dependency: curves people would
//! rather look at than read (loss, mIoU). The numbers themselves go to CSV/JSON beside.

use image::{Rgb, RgbImage};

const MARGIN: u32 = 24;
const SERIES_COLOURS: [[u8; 3]; 4] = [[31, 119, 180], [255, 127, 14], [44, 160, 44], [214, 39, 40]];

/// Draws one or more series of (x, y) points on shared axes, with a light grid of 5x5
/// cells. Non-finite points are skipped.
pub fn line_plot(series: &[&[(f64, f64)]], width: u32, height: u32) -> RgbImage {
    let mut img = RgbImage::from_pixel(width, height, Rgb([255, 255, 255]));
    let points = series
        .iter()
        .flat_map(|s| s.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in points {
        x0 = x0.min(x);
        x1 = x1.max(x);
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if x0 > x1 {
        return img;
    }
    y0 = y0.min(0.0);
    let (xr, yr) = ((x1 - x0).max(1e-12), (y1 - y0).max(1e-12));
    let (pw, ph) = ((width - 2 * MARGIN) as f64, (height - 2 * MARGIN) as f64);
    let to_px = |x: f64, y: f64| {
        (
            MARGIN as f64 + (x - x0) / xr * pw,
            (height - MARGIN) as f64 - (y - y0) / yr * ph,
        )
    };
    for k in 0..=5 {
        let gx = MARGIN + (k * (width - 2 * MARGIN)) / 5;
        let gy = MARGIN + (k * (height - 2 * MARGIN)) / 5;
        let shade = if k == 0 || k == 5 { 0 } else { 220 };
        draw_line(
            &mut img,
            (gx as f64, MARGIN as f64),
            (gx as f64, (height - MARGIN) as f64),
            [shade; 3],
        );
        draw_line(
            &mut img,
            (MARGIN as f64, gy as f64),
            ((width - MARGIN) as f64, gy as f64),
            [shade; 3],
        );
    }
    for (s, pts) in series.iter().enumerate() {
        let colour = SERIES_COLOURS[s % SERIES_COLOURS.len()];
        let pts: Vec<_> = pts
            .iter()
            .filter(|(x, y)| x.is_finite() && y.is_finite())
            .collect();
        for pair in pts.windows(2) {
            draw_line(
                &mut img,
                to_px(pair[0].0, pair[0].1),
                to_px(pair[1].0, pair[1].1),
                colour,
            );
        }
    }
    img
}

fn draw_line(img: &mut RgbImage, a: (f64, f64), b: (f64, f64), colour: [u8; 3]) {
    let steps = ((b.0 - a.0).abs().max((b.1 - a.1).abs()).ceil() as usize).max(1);
    for i in 0..=steps {
        let t = i as f64 / steps as f64;
        let (x, y) = (a.0 + (b.0 - a.0) * t, a.1 + (b.1 - a.1) * t);
        if x >= 0.0 && y >= 0.0 && (x as u32) < img.width() && (y as u32) < img.height() {
            img.put_pixel(x as u32, y as u32, Rgb(colour));
        }
    }
}

/// Moving average over `window` points, for noisy per-iteration losses.
pub fn smooth(points: &[(f64, f64)], window: usize) -> Vec<(f64, f64)> {
    let window = window.max(1);
    (0..points.len())
        .map(|i| {
            let lo = i.saturating_sub(window - 1);
            let slice = &points[lo..=i];
            (
                points[i].0,
                slice.iter().map(|p| p.1).sum::<f64>() / slice.len() as f64,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn plot_draws_series() {
        let pts: Vec<(f64, f64)> = (0..50)
            .map(|i| (i as f64, 1.0 / (1.0 + i as f64)))
            .collect();
        let img = super::line_plot(&[&pts], 200, 120);
        assert!(img.pixels().any(|p| p.0 == [31, 119, 180]));
        let s = super::smooth(&[(0.0, 0.0), (1.0, 2.0), (2.0, 4.0)], 2);
        assert_eq!(s[2], (2.0, 3.0));
    }
}
