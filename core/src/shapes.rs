//! `shapes`: a synthetic segmentation dataset, deterministic from a seed.
//!
//! Each image holds a few geometric shapes on a textured, noisy background. The class is
//! decided by the shape alone: colour, size, position and rotation are drawn per instance,
//! so a model must learn geometry, not colour. Later shapes occlude earlier ones. Some
//! instances carry an ignore band (label 255) along their boundary, as Cityscapes and VOC
//! do, so ignore handling is exercised. Sample `i` depends only on (seed, i), so the
//! on-the-fly stream and a dataset written to disk are identical.

use image::{GrayImage, Rgb, RgbImage};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::IGNORE_LABEL;

pub const CLASSES: [&str; 5] = ["background", "circle", "square", "triangle", "cross"];

#[derive(Clone, Debug, PartialEq)]
pub struct ShapesConfig {
    pub width: u32,
    pub height: u32,
    pub seed: u64,
    pub min_objects: usize,
    pub max_objects: usize,
    /// Probability that an instance gets an ignore band along its boundary.
    pub ignore_band_probability: f64,
}

impl ShapesConfig {
    /// Square `size` x `size` images from `seed`, the other settings at their defaults:
    /// what `--shapes-size` / `--shapes-seed` and a run's `[data]` section ask for.
    pub fn square(size: u32, seed: u64) -> Self {
        Self {
            width: size,
            height: size,
            seed,
            ..Default::default()
        }
    }
}

impl Default for ShapesConfig {
    fn default() -> Self {
        Self {
            width: 96,
            height: 96,
            seed: 0,
            min_objects: 1,
            max_objects: 4,
            ignore_band_probability: 0.3,
        }
    }
}

pub struct Sample {
    pub image: RgbImage,
    /// Class per pixel, 255 = ignore.
    pub mask: GrayImage,
}

#[derive(Clone, Copy, Debug)]
enum Kind {
    Circle,
    Square,
    Triangle,
    Cross,
}

impl Kind {
    fn class(self) -> u8 {
        match self {
            Kind::Circle => 1,
            Kind::Square => 2,
            Kind::Triangle => 3,
            Kind::Cross => 4,
        }
    }

    /// Signed distance (pixels, negative inside) of a point already in the shape's frame.
    fn sdf(self, x: f32, y: f32, r: f32, aspect: f32) -> f32 {
        match self {
            Kind::Circle => (x * x + y * y).sqrt() - r,
            Kind::Square => box_sdf(x, y, r * 0.85, r * 0.85 * aspect),
            Kind::Triangle => {
                // Equilateral triangle with circumradius r: intersection of 3 half-planes.
                (0..3)
                    .map(|k| {
                        let a = std::f32::consts::PI / 2.0
                            + k as f32 * 2.0 * std::f32::consts::PI / 3.0;
                        x * a.cos() + y * a.sin() - r * 0.5
                    })
                    .fold(f32::MIN, f32::max)
            }
            Kind::Cross => {
                let arm = r * 0.33;
                box_sdf(x, y, r, arm).min(box_sdf(x, y, arm, r))
            }
        }
    }
}

fn box_sdf(x: f32, y: f32, half_w: f32, half_h: f32) -> f32 {
    let dx = x.abs() - half_w;
    let dy = y.abs() - half_h;
    let outside = (dx.max(0.0).powi(2) + dy.max(0.0).powi(2)).sqrt();
    outside + dx.max(dy).min(0.0)
}

struct Instance {
    kind: Kind,
    cx: f32,
    cy: f32,
    r: f32,
    aspect: f32,
    cos: f32,
    sin: f32,
    colour: [f32; 3],
    shade: [f32; 2],
    band: Option<f32>,
}

impl Instance {
    fn sdf(&self, px: f32, py: f32) -> f32 {
        let (dx, dy) = (px - self.cx, py - self.cy);
        let x = self.cos * dx + self.sin * dy;
        let y = -self.sin * dx + self.cos * dy;
        self.kind.sdf(x, y, self.r, self.aspect)
    }
}

fn sample_rng(seed: u64, index: u64) -> ChaCha8Rng {
    // splitmix64 of the index, so neighbouring indices give unrelated streams
    let mut z = index.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ChaCha8Rng::seed_from_u64(seed ^ z ^ (z >> 31))
}

fn random_colour(rng: &mut ChaCha8Rng) -> [f32; 3] {
    [
        rng.gen_range(0.0..255.0),
        rng.gen_range(0.0..255.0),
        rng.gen_range(0.0..255.0),
    ]
}

/// Generates sample `index` of the stream defined by `cfg`.
pub fn generate(cfg: &ShapesConfig, index: u64) -> Sample {
    let mut rng = sample_rng(cfg.seed, index);
    let (w, h) = (cfg.width, cfg.height);
    let side = w.min(h) as f32;

    // Background: a base colour modulated by a few random low-frequency waves.
    let base = random_colour(&mut rng);
    let waves: Vec<([f32; 3], f32, f32, f32)> = (0..3)
        .map(|_| {
            let amp = [
                rng.gen_range(10.0..45.0),
                rng.gen_range(10.0..45.0),
                rng.gen_range(10.0..45.0),
            ];
            let angle: f32 = rng.gen_range(0.0..std::f32::consts::TAU);
            let freq = rng.gen_range(0.02..0.25);
            (amp, angle, freq, rng.gen_range(0.0..std::f32::consts::TAU))
        })
        .collect();
    let noise_sigma: f32 = rng.gen_range(4.0..18.0);

    let count = rng.gen_range(cfg.min_objects..=cfg.max_objects.max(cfg.min_objects));
    let instances: Vec<Instance> = (0..count)
        .map(|_| {
            let kind = match rng.gen_range(0..4) {
                0 => Kind::Circle,
                1 => Kind::Square,
                2 => Kind::Triangle,
                _ => Kind::Cross,
            };
            let theta: f32 = rng.gen_range(0.0..std::f32::consts::TAU);
            Instance {
                kind,
                cx: rng.gen_range(0.1..0.9) * w as f32,
                cy: rng.gen_range(0.1..0.9) * h as f32,
                r: rng.gen_range(0.12..0.28) * side,
                aspect: rng.gen_range(0.75..1.0),
                cos: theta.cos(),
                sin: theta.sin(),
                colour: random_colour(&mut rng),
                shade: [rng.gen_range(-0.6..0.6), rng.gen_range(-0.6..0.6)],
                band: rng
                    .gen_bool(cfg.ignore_band_probability)
                    .then(|| rng.gen_range(1.0..2.5)),
            }
        })
        .collect();

    let mut image = RgbImage::new(w, h);
    let mut mask = GrayImage::new(w, h);
    for y in 0..h {
        for x in 0..w {
            let (px, py) = (x as f32 + 0.5, y as f32 + 0.5);
            let mut rgb = base;
            for (amp, angle, freq, phase) in &waves {
                let t = ((px * angle.cos() + py * angle.sin()) * freq + phase).sin();
                for c in 0..3 {
                    rgb[c] += amp[c] * t;
                }
            }
            let mut label = 0u8;
            for inst in &instances {
                let d = inst.sdf(px, py);
                // Anti-aliased coverage over one pixel.
                let cover = (0.5 - d).clamp(0.0, 1.0);
                if cover > 0.0 {
                    let shade = 1.0
                        + (inst.shade[0] * (px - inst.cx) + inst.shade[1] * (py - inst.cy)) / side;
                    for c in 0..3 {
                        rgb[c] = rgb[c] * (1.0 - cover) + inst.colour[c] * shade * cover;
                    }
                }
                if d < 0.0 {
                    label = inst.kind.class();
                }
                if let Some(band) = inst.band {
                    if d.abs() < band {
                        label = IGNORE_LABEL;
                    }
                }
            }
            let noise: [f32; 3] = std::array::from_fn(|_| gaussian(&mut rng) * noise_sigma);
            image.put_pixel(
                x,
                y,
                Rgb(std::array::from_fn(|c| {
                    (rgb[c] + noise[c]).round().clamp(0.0, 255.0) as u8
                })),
            );
            mask.put_pixel(x, y, image::Luma([label]));
        }
    }
    Sample { image, mask }
}

fn gaussian(rng: &mut ChaCha8Rng) -> f32 {
    // Box-Muller; one of the pair is enough here.
    let u1: f32 = rng.gen_range(f32::EPSILON..1.0);
    let u2: f32 = rng.gen_range(0.0..1.0);
    (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_index_dependent() {
        let cfg = ShapesConfig {
            width: 48,
            height: 40,
            seed: 7,
            ..Default::default()
        };
        let a = generate(&cfg, 3);
        let b = generate(&cfg, 3);
        assert_eq!(a.image.as_raw(), b.image.as_raw());
        assert_eq!(a.mask.as_raw(), b.mask.as_raw());
        assert_eq!(a.image.dimensions(), (48, 40));
        let c = generate(&cfg, 4);
        assert_ne!(a.image.as_raw(), c.image.as_raw());
        let other_seed = generate(&ShapesConfig { seed: 8, ..cfg }, 3);
        assert_ne!(a.image.as_raw(), other_seed.image.as_raw());
    }

    #[test]
    fn labels_are_classes_or_ignore_and_shapes_appear() {
        let cfg = ShapesConfig {
            ignore_band_probability: 1.0,
            ..Default::default()
        };
        let mut seen = [false; 256];
        for i in 0..40 {
            for &v in generate(&cfg, i).mask.as_raw() {
                seen[v as usize] = true;
            }
        }
        for (v, s) in seen.iter().enumerate() {
            if *s {
                assert!(v < CLASSES.len() || v == IGNORE_LABEL as usize, "label {v}");
            }
        }
        assert!((0..CLASSES.len()).all(|c| seen[c]) && seen[255]);
    }

    #[test]
    fn sdf_signs() {
        for kind in [Kind::Circle, Kind::Square, Kind::Triangle, Kind::Cross] {
            assert!(
                kind.sdf(0.0, 0.0, 10.0, 1.0) < 0.0,
                "{kind:?} centre inside"
            );
            assert!(
                kind.sdf(30.0, 30.0, 10.0, 1.0) > 0.0,
                "{kind:?} far point outside"
            );
        }
    }
}
