//! Small pictures with no font or plotting dependency: a bare curve (`line_plot`, kept
//! for callers without the `plot` feature), moving averages, and validation panels
//! (image | ground truth | prediction). Charts with axes, labels and legends are in
//! [`crate::plot`] (feature `plot`).

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

/// Image | ground truth | prediction, side by side: the masks blended over the image at
/// 50 %, labels without a palette entry (ignore, 255) left as the image. `prediction` is
/// (H, W) labels, row-major, the image's size.
pub fn overlay_panel(
    image: &RgbImage,
    truth: &image::GrayImage,
    prediction: &[u8],
    palette: &[[u8; 3]],
) -> RgbImage {
    let (w, h) = image.dimensions();
    let blend = |label: u8, px: Rgb<u8>| match palette.get(label as usize) {
        Some(c) => Rgb([0, 1, 2].map(|k| ((px.0[k] as u16 + c[k] as u16 + 1) / 2) as u8)),
        None => px,
    };
    let mut panel = RgbImage::new(w * 3, h);
    for (x, y, &px) in image.enumerate_pixels() {
        panel.put_pixel(x, y, px);
        let t = if truth.dimensions() == (w, h) {
            truth.get_pixel(x, y).0[0]
        } else {
            255
        };
        panel.put_pixel(w + x, y, blend(t, px));
        let p = prediction.get((y * w + x) as usize).copied().unwrap_or(255);
        panel.put_pixel(2 * w + x, y, blend(p, px));
    }
    panel
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

    #[test]
    fn overlay_panel_blends_labels() {
        let img = super::RgbImage::from_pixel(2, 1, super::Rgb([100, 100, 100]));
        let truth = image::GrayImage::from_raw(2, 1, vec![0, 255]).unwrap();
        let panel = super::overlay_panel(&img, &truth, &[1, 1], &[[0, 0, 0], [200, 200, 200]]);
        assert_eq!(panel.dimensions(), (6, 1));
        assert_eq!(panel.get_pixel(2, 0).0, [50, 50, 50]);
        assert_eq!(panel.get_pixel(3, 0).0, [100, 100, 100]);
        assert_eq!(panel.get_pixel(5, 0).0, [150, 150, 150]);
    }
}
