//! mmsegmentation's `PhotoMetricDistortion` (mmseg/datasets/transforms/transforms.py), on
//! 8-bit RGB: brightness, then contrast either second or last (a coin flip), saturation
//! and hue in OpenCV's 8-bit HSV between them; each step is applied with probability 0.5.
//!
//! The arithmetic is mmseg's: every step computes in f32 (`img.astype(np.float32) * alpha
//! + beta`), clips to [0, 255] and truncates to u8 (`astype(np.uint8)`); contrast is a
//! plain multiplication (no blend towards a mean), saturation multiplies HSV's S, hue adds
//! an integer in [-hue_delta, hue_delta) to H modulo 180. The HSV conversions are
//! OpenCV's 8-bit `COLOR_RGB2HSV` (fixed point, 12-bit tables) and `COLOR_HSV2RGB`
//! (OpenCV 4's float `HSV2RGB_b`, rounded to nearest); OpenCV 5.0's 8-bit HSV-to-RGB path
//! is a fixed-point approximation that differs from OpenCV 4's by at most 1 per channel.

use image::RgbImage;
use rand::Rng;

/// The distortion's parameters (mmseg's defaults: [`PhotoMetric::default`]).
#[derive(Clone, Debug, PartialEq)]
pub struct PhotoMetric {
    /// Brightness: every channel + U(-delta, delta).
    pub brightness_delta: f64,
    /// Contrast: every channel x U(lo, hi).
    pub contrast: (f64, f64),
    /// Saturation: HSV's S x U(lo, hi).
    pub saturation: (f64, f64),
    /// Hue: H + an integer in [-delta, delta), modulo 180.
    pub hue_delta: i32,
}

impl Default for PhotoMetric {
    /// mmseg's `PhotoMetricDistortion()`: 32, (0.5, 1.5), (0.5, 1.5), 18.
    fn default() -> Self {
        Self {
            brightness_delta: 32.0,
            contrast: (0.5, 1.5),
            saturation: (0.5, 1.5),
            hue_delta: 18,
        }
    }
}

/// One draw of the distortion's random choices: `None` for a step that is skipped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PhotoMetricDraw {
    pub brightness: Option<f64>,
    /// mmseg's `mode == 1`: contrast right after brightness, else after hue.
    pub contrast_first: bool,
    pub contrast: Option<f64>,
    pub saturation: Option<f64>,
    pub hue: Option<i32>,
}

/// U[lo, hi), or `lo` for an empty range (where numpy's `uniform` returns `lo` too).
fn uniform(rng: &mut impl Rng, lo: f64, hi: f64) -> f64 {
    if lo < hi {
        rng.gen_range(lo..hi)
    } else {
        lo
    }
}

impl PhotoMetric {
    /// Draws the random choices in mmseg's order (brightness coin and value, mode,
    /// contrast if first, saturation, hue, contrast if last).
    pub fn draw(&self, rng: &mut impl Rng) -> PhotoMetricDraw {
        let d = self.brightness_delta;
        let brightness = rng.gen_bool(0.5).then(|| uniform(rng, -d, d));
        let contrast_first = rng.gen_bool(0.5);
        let (clo, chi) = self.contrast;
        let mut contrast = None;
        if contrast_first && rng.gen_bool(0.5) {
            contrast = Some(uniform(rng, clo, chi));
        }
        let (slo, shi) = self.saturation;
        let saturation = rng.gen_bool(0.5).then(|| uniform(rng, slo, shi));
        let h = self.hue_delta;
        let hue = rng
            .gen_bool(0.5)
            .then(|| if h > 0 { rng.gen_range(-h..h) } else { 0 });
        if !contrast_first && rng.gen_bool(0.5) {
            contrast = Some(uniform(rng, clo, chi));
        }
        PhotoMetricDraw {
            brightness,
            contrast_first,
            contrast,
            saturation,
            hue,
        }
    }

    /// Draws and applies the distortion to `image`.
    pub fn apply(&self, image: &mut RgbImage, rng: &mut impl Rng) {
        let draw = self.draw(rng);
        apply_draw(image, &draw);
    }
}

/// mmseg's `convert`: `clip(f32(v) * alpha + beta, 0, 255)` truncated to u8.
fn convert(v: u8, alpha: f32, beta: f32) -> u8 {
    (v as f32 * alpha + beta).clamp(0.0, 255.0) as u8
}

/// Applies the distortion `draw` describes, as mmseg's `transform` does.
pub fn apply_draw(image: &mut RgbImage, draw: &PhotoMetricDraw) {
    let map = |image: &mut RgbImage, alpha: f32, beta: f32| {
        for px in image.pixels_mut() {
            px.0 = px.0.map(|v| convert(v, alpha, beta));
        }
    };
    if let Some(beta) = draw.brightness {
        map(image, 1.0, beta as f32);
    }
    let contrast = draw.contrast.map(|a| a as f32);
    if let (true, Some(alpha)) = (draw.contrast_first, contrast) {
        map(image, alpha, 0.0);
    }
    if let Some(alpha) = draw.saturation {
        for px in image.pixels_mut() {
            let [h, s, v] = rgb_to_hsv(px.0);
            px.0 = hsv_to_rgb([h, convert(s, alpha as f32, 0.0), v]);
        }
    }
    if let Some(delta) = draw.hue {
        for px in image.pixels_mut() {
            let [h, s, v] = rgb_to_hsv(px.0);
            let h = (h as i32 + delta).rem_euclid(180) as u8;
            px.0 = hsv_to_rgb([h, s, v]);
        }
    }
    if let (false, Some(alpha)) = (draw.contrast_first, contrast) {
        map(image, alpha, 0.0);
    }
}

const HSV_SHIFT: u32 = 12;

/// OpenCV's `sdiv_table` and `hdiv_table180`: round((255 << 12) / i), round((180 << 12) /
/// (6 i)), 0 at i = 0 (`saturate_cast<int>` rounds half to even).
fn div_tables() -> &'static ([i32; 256], [i32; 256]) {
    static TABLES: std::sync::OnceLock<([i32; 256], [i32; 256])> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let (mut s, mut h) = ([0i32; 256], [0i32; 256]);
        for i in 1..256 {
            s[i] = (((255 << HSV_SHIFT) as f64) / i as f64).round_ties_even() as i32;
            h[i] = (((180 << HSV_SHIFT) as f64) / (6.0 * i as f64)).round_ties_even() as i32;
        }
        (s, h)
    })
}

/// OpenCV's 8-bit `COLOR_RGB2HSV` (H in 0..180, S and V in 0..=255), bit for bit.
pub fn rgb_to_hsv([r, g, b]: [u8; 3]) -> [u8; 3] {
    let (sdiv, hdiv) = div_tables();
    let (r, g, b) = (r as i32, g as i32, b as i32);
    let v = r.max(g).max(b);
    let diff = v - r.min(g).min(b);
    let vr = if v == r { -1 } else { 0 };
    let vg = if v == g { -1 } else { 0 };
    let half = 1 << (HSV_SHIFT - 1);
    let s = (diff * sdiv[v as usize] + half) >> HSV_SHIFT;
    let mut h = (vr & (g - b)) + (!vr & ((vg & (b - r + 2 * diff)) + (!vg & (r - g + 4 * diff))));
    h = (h * hdiv[diff as usize] + half) >> HSV_SHIFT;
    if h < 0 {
        h += 180;
    }
    [h.clamp(0, 255) as u8, s as u8, v as u8]
}

/// OpenCV 4's 8-bit `COLOR_HSV2RGB` (`HSV2RGB_b` over `HSV2RGB_native`, f32).
pub fn hsv_to_rgb([h, s, v]: [u8; 3]) -> [u8; 3] {
    const SECTORS: [[usize; 3]; 6] = [
        [1, 3, 0],
        [1, 0, 2],
        [3, 0, 1],
        [0, 2, 1],
        [0, 1, 3],
        [2, 1, 0],
    ];
    let (s, v) = (s as f32 * (1.0 / 255.0), v as f32 * (1.0 / 255.0));
    let (b, g, r) = if s == 0.0 {
        (v, v, v)
    } else {
        let mut h = (h as f32 * (6.0f32 / 180.0)) % 6.0;
        if h < 0.0 {
            h += 6.0;
        }
        let mut sector = h.floor() as i32;
        h -= sector as f32;
        if !(0..6).contains(&sector) {
            sector = 0;
            h = 0.0;
        }
        let tab = [
            v,
            v * (1.0 - s),
            v * (1.0 - s * h),
            v * (1.0 - s * (1.0 - h)),
        ];
        let [bi, gi, ri] = SECTORS[sector as usize];
        (tab[bi], tab[gi], tab[ri])
    };
    // `saturate_cast<uchar>`: round half to even, clamp.
    [r, g, b].map(|c| (c * 255.0).round_ties_even().clamp(0.0, 255.0) as u8)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn hsv_round_trip_of_greys_and_primaries() {
        for px in [
            [0, 0, 0],
            [255, 255, 255],
            [77, 77, 77],
            [255, 0, 0],
            [0, 255, 0],
            [0, 0, 255],
        ] {
            assert_eq!(hsv_to_rgb(rgb_to_hsv(px)), px, "{px:?}");
        }
        assert_eq!(rgb_to_hsv([255, 0, 0]), [0, 255, 255]);
        assert_eq!(rgb_to_hsv([0, 255, 0]), [60, 255, 255]);
        assert_eq!(rgb_to_hsv([0, 0, 255]), [120, 255, 255]);
    }

    #[test]
    fn draws_follow_the_probabilities_and_ranges() {
        let p = PhotoMetric::default();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let draws: Vec<_> = (0..4000).map(|_| p.draw(&mut rng)).collect();
        let frac = |f: &dyn Fn(&PhotoMetricDraw) -> bool| {
            draws.iter().filter(|d| f(d)).count() as f64 / draws.len() as f64
        };
        for f in [
            frac(&|d| d.brightness.is_some()),
            frac(&|d| d.contrast_first),
            frac(&|d| d.contrast.is_some()),
            frac(&|d| d.saturation.is_some()),
            frac(&|d| d.hue.is_some()),
        ] {
            assert!((f - 0.5).abs() < 0.04, "{f}");
        }
        for d in &draws {
            assert!(d.brightness.is_none_or(|b| (-32.0..32.0).contains(&b)));
            assert!(d.contrast.is_none_or(|a| (0.5..1.5).contains(&a)));
            assert!(d.saturation.is_none_or(|a| (0.5..1.5).contains(&a)));
            assert!(d.hue.is_none_or(|h| (-18..18).contains(&h)));
        }
    }

    #[test]
    fn steps_truncate_like_mmseg() {
        let mut img = RgbImage::from_pixel(1, 1, image::Rgb([100, 200, 250]));
        let draw = PhotoMetricDraw {
            brightness: Some(10.7),
            contrast_first: true,
            contrast: Some(1.1),
            saturation: None,
            hue: None,
        };
        apply_draw(&mut img, &draw);
        // 100 + 10.7 = 110.7 -> 110, x 1.1 = 121.0 -> 121; 210 x 1.1 = 231; 260 -> 255 x 1.1.
        let expect = [(110.0f32 * 1.1) as u8, (210.0f32 * 1.1) as u8, 255];
        assert_eq!(img.get_pixel(0, 0).0, expect);
    }
}
