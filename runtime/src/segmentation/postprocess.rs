//! Model output -> masks and pictures: argmax, nearest-neighbour mask resize, bilinear
//! logit resize (PyTorch's `upsample_bilinear2d`, either corner convention), per-class
//! probabilities (softmax), colour masks and overlays.
//!
//! Masks are `(H, W)` [`ClassMap`]s: `u8` class indices (the layout of training labels)
//! for models of at most 256 classes, `u16` above, so they go straight into
//! `segtool_core`'s confusion matrix.

use image::RgbImage;
use ndarray::{Array2, Array4, ArrayView2, ArrayView3, ArrayView4, Axis, Zip};

pub use crate::segmentation::class_map::resize_nearest;
use crate::segmentation::class_map::{ClassMap, ClassMapView, MAX_CLASSES};

/// Blend factor used by the CLI for overlays: half image, half class colour.
pub const DEFAULT_ALPHA: f32 = 0.5;

/// Per-pixel argmax over the class axis of `[N, C, H, W]` logits: one `(H, W)` mask per
/// image, `u8` ids for at most 256 classes and `u16` above. Ties resolve to the lowest
/// class index, like `torch.argmax`; a NaN score never wins over a number (a broken class
/// should not paint the whole image).
///
/// # Panics
/// With more than 65536 classes (a `u16` id cannot hold them).
pub fn argmax(logits: ArrayView4<f32>) -> Vec<ClassMap> {
    let c = logits.dim().1;
    assert!(c <= MAX_CLASSES, "{c} classes do not fit a u16 mask");
    logits
        .outer_iter()
        .map(|scores| match ClassMap::bits_for(c) {
            8 => ClassMap::U8(argmax_one(scores, |k| k as u8)),
            _ => ClassMap::U16(argmax_one(scores, |k| k as u16)),
        })
        .collect()
}

/// The argmax of one image's `[C, H, W]` scores, ids made by `id`.
fn argmax_one<T: Copy + Default>(scores: ArrayView3<f32>, id: impl Fn(usize) -> T) -> Array2<T> {
    let (_, h, w) = scores.dim();
    let mut best = scores.index_axis(Axis(0), 0).to_owned();
    let mut mask = Array2::<T>::default((h, w));
    for (k, plane) in scores.outer_iter().enumerate().skip(1) {
        let k = id(k);
        Zip::from(&mut best)
            .and(&mut mask)
            .and(&plane)
            .for_each(|b, m, &v| {
                if v > *b || (b.is_nan() && !v.is_nan()) {
                    *b = v;
                    *m = k;
                }
            });
    }
    mask
}

/// How logits reach another size before the argmax.
///
/// # Example
///
/// ```
/// use ndarray::Array4;
/// use segtool_runtime::expert::{prepare, PrepareOptions, Upsample};
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// // The model runs on the 6x8 image shrunk to 3x4; masks come back at 6x8.
/// let options = PrepareOptions::new().with_resize(3, 4);
/// let prepared = prepare(&[image::RgbImage::new(8, 6)], &spec, &options)?;
/// // Stand-in for the model's logits at 3x4: class 1 ("car") on the right half.
/// let car_on_right = |(_, c, _, x): (usize, usize, usize, usize)| f32::from((x >= 2) == (c == 1));
/// let logits = Array4::from_shape_fn((1, 2, 3, 4), car_on_right);
/// for upsample in [Upsample::Bilinear, Upsample::Nearest] {
///     let masks = prepared.restore_masks(logits.view(), upsample);
///     assert_eq!(masks[0].dim(), (6, 8));
///     let row0: Vec<u16> = masks[0].iter().take(8).collect();
///     assert_eq!(row0, [0, 0, 0, 0, 1, 1, 1, 1]);
/// }
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Upsample {
    /// Resize the logits bilinearly, then take the argmax at the target size (smooth
    /// class boundaries; what evaluation does).
    #[default]
    Bilinear,
    /// Take the argmax at the model's size, then resize the labels nearest-neighbour
    /// (cheaper: one plane instead of one per class).
    Nearest,
}

/// Source index and weights of one output coordinate: `(i0, i1, w0, w1)`.
fn linear_taps(
    in_len: usize,
    out_len: usize,
    align_corners: bool,
) -> Vec<(usize, usize, f32, f32)> {
    // PyTorch's area_pixel_compute_scale / _source_index, in f32 as its CPU kernel.
    let scale = if align_corners {
        if out_len > 1 {
            (in_len - 1) as f32 / (out_len - 1) as f32
        } else {
            0.0
        }
    } else {
        in_len as f32 / out_len as f32
    };
    (0..out_len)
        .map(|d| {
            let src = if align_corners {
                scale * d as f32
            } else {
                (scale * (d as f32 + 0.5) - 0.5).max(0.0)
            };
            let i0 = (src as usize).min(in_len - 1);
            let l1 = (src - i0 as f32).clamp(0.0, 1.0);
            let i1 = if i0 < in_len - 1 { i0 + 1 } else { i0 };
            (i0, i1, 1.0 - l1, l1)
        })
        .collect()
}

/// Bilinear resize of `[N, C, H, W]` to `(height, width)`, numerically PyTorch's
/// `F.interpolate(x, mode="bilinear", align_corners=...)` on the CPU. Same size: a copy.
///
/// # Panics
/// When an input or target dimension is zero.
pub fn resize_bilinear(
    x: ArrayView4<f32>,
    height: usize,
    width: usize,
    align_corners: bool,
) -> Array4<f32> {
    let (n, c, h, w) = x.dim();
    assert!(h > 0 && w > 0 && height > 0 && width > 0, "empty resize");
    if (h, w) == (height, width) {
        return x.to_owned();
    }
    let rows = linear_taps(h, height, align_corners);
    let cols = linear_taps(w, width, align_corners);
    let x = x.as_standard_layout();
    let src = x.as_slice().expect("standard layout");
    let mut out = Array4::<f32>::zeros((n, c, height, width));
    let dst = out.as_slice_mut().expect("fresh array");
    for (plane, out_plane) in src
        .chunks_exact(h * w)
        .zip(dst.chunks_exact_mut(height * width))
    {
        for (&(y0, y1, wy0, wy1), out_row) in rows.iter().zip(out_plane.chunks_exact_mut(width)) {
            let (r0, r1) = (&plane[y0 * w..(y0 + 1) * w], &plane[y1 * w..(y1 + 1) * w]);
            for (&(x0, x1, wx0, wx1), o) in cols.iter().zip(out_row.iter_mut()) {
                let t0 = r0[x0] * wx0 + r0[x1] * wx1;
                let t1 = r1[x0] * wx0 + r1[x1] * wx1;
                *o = t0 * wy0 + t1 * wy1;
            }
        }
    }
    out
}

/// Per-class probabilities: softmax over the class axis of `[N, C, H, W]` logits.
pub fn softmax(logits: ArrayView4<f32>) -> Array4<f32> {
    let mut out = logits.to_owned();
    for mut scores in out.outer_iter_mut() {
        let mut max = scores.index_axis(Axis(0), 0).to_owned();
        for plane in scores.outer_iter().skip(1) {
            Zip::from(&mut max)
                .and(&plane)
                .for_each(|m, &v| *m = m.max(v));
        }
        let mut sum = Array2::<f32>::zeros(max.raw_dim());
        for mut plane in scores.outer_iter_mut() {
            Zip::from(&mut plane)
                .and(&max)
                .and(&mut sum)
                .for_each(|v, &m, s| {
                    *v = (*v - m).exp();
                    *s += *v;
                });
        }
        for mut plane in scores.outer_iter_mut() {
            Zip::from(&mut plane).and(&sum).for_each(|v, &s| *v /= s);
        }
    }
    out
}

/// Masks at `(height, width)` from logits of any size: bilinear (half-pixel centres,
/// `align_corners=false`) logits then argmax, or argmax then nearest labels.
pub fn masks_at_size(
    logits: ArrayView4<f32>,
    height: usize,
    width: usize,
    upsample: Upsample,
) -> Vec<ClassMap> {
    match upsample {
        Upsample::Bilinear => argmax(resize_bilinear(logits, height, width, false).view()),
        Upsample::Nearest => argmax(logits)
            .into_iter()
            .map(|m| m.resized(height, width))
            .collect(),
    }
}

/// Colour picture of a mask (a [`ClassMap`], or a `u8`/`u16` label array). Labels without
/// a palette entry (e.g. 255, ignore) are black.
pub fn colorize<'a>(mask: impl Into<ClassMapView<'a>>, palette: &[[u8; 3]]) -> RgbImage {
    let mask = mask.into();
    let (h, w) = mask.dim();
    let mut out = Vec::with_capacity(h * w * 3);
    match mask {
        ClassMapView::U8(m) => {
            let mut lut = [[0u8; 3]; 256];
            lut.iter_mut().zip(palette).for_each(|(slot, c)| *slot = *c);
            m.iter()
                .for_each(|&c| out.extend_from_slice(&lut[c as usize]));
        }
        ClassMapView::U16(m) => m.iter().for_each(|&c| {
            out.extend_from_slice(palette.get(usize::from(c)).unwrap_or(&[0, 0, 0]))
        }),
    }
    RgbImage::from_raw(w as u32, h as u32, out).expect("h x w x 3 bytes")
}

/// `img` blended with the mask's colours: `(1 - alpha) * img + alpha * colour`, rounded.
/// Pixels whose label has no palette entry keep the image colour. A mask of another size
/// is resized (nearest) to the image first. The mask is a [`ClassMap`] or a `u8`/`u16`
/// label array.
pub fn overlay<'a>(
    img: &RgbImage,
    mask: impl Into<ClassMapView<'a>>,
    palette: &[[u8; 3]],
    alpha: f32,
) -> RgbImage {
    let mask = mask.into();
    let (w, h) = img.dimensions();
    if mask.dim() != (h as usize, w as usize) {
        let resized = mask.to_owned().resized(h as usize, w as usize);
        return overlay(img, &resized, palette, alpha);
    }
    match mask {
        ClassMapView::U8(ids) => blend(img, ids, palette, alpha),
        ClassMapView::U16(ids) => blend(img, ids, palette, alpha),
    }
}

/// [`overlay`] of an image-sized id array.
fn blend<T: Copy + Into<usize>>(
    img: &RgbImage,
    ids: ArrayView2<T>,
    palette: &[[u8; 3]],
    alpha: f32,
) -> RgbImage {
    let alpha = alpha.clamp(0.0, 1.0);
    // The blend of every (class, channel, value) once, by the same f32 formula: the same
    // bytes as blending pixel by pixel, without a float multiply per pixel. Past 256
    // colours only the classes the mask holds get a table (847 would be 650 kB of them).
    let mut wanted = vec![palette.len() <= 256; palette.len()];
    if palette.len() > 256 {
        for &c in ids.iter() {
            if let Some(slot) = wanted.get_mut(c.into()) {
                *slot = true;
            }
        }
    }
    let tables: Vec<Option<[[u8; 256]; 3]>> = palette
        .iter()
        .zip(&wanted)
        .map(|(colour, &wanted)| {
            wanted.then(|| {
                let mut t = [[0u8; 256]; 3];
                for (k, row) in t.iter_mut().enumerate() {
                    for (v, slot) in row.iter_mut().enumerate() {
                        *slot =
                            ((1.0 - alpha) * v as f32 + alpha * f32::from(colour[k])).round() as u8;
                    }
                }
                t
            })
        })
        .collect();
    let mut out = img.clone();
    for (px, &label) in out.as_mut().chunks_exact_mut(3).zip(ids.iter()) {
        if let Some(Some(t)) = tables.get(label.into()) {
            for (k, p) in px.iter_mut().enumerate() {
                *p = t[k][*p as usize];
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::Rgb;
    use ndarray::{arr2, Array4};

    /// The table-driven blend gives the bytes of the per-pixel formula, and labels without
    /// a colour keep the image (overlay) or turn black (colorize).
    #[test]
    fn overlay_and_colorize_match_the_per_pixel_formula() {
        let (h, w) = (7usize, 9usize);
        let img = RgbImage::from_fn(w as u32, h as u32, |x, y| {
            Rgb([
                (x * 29 + y * 7) as u8,
                (x * 3 + y * 41) as u8,
                (x * y * 13) as u8,
            ])
        });
        let mask = Array2::from_shape_fn((h, w), |(y, x)| ((x + 2 * y) % 5) as u8);
        let palette = [[255, 0, 10], [3, 200, 7], [90, 90, 250], [0, 0, 0]];
        for alpha in [0.0, 0.35, 0.5, 1.0] {
            let got = overlay(&img, mask.view(), &palette, alpha);
            for (x, y, px) in img.enumerate_pixels() {
                let label = mask[[y as usize, x as usize]] as usize;
                let want: [u8; 3] = match palette.get(label) {
                    Some(c) => std::array::from_fn(|k| {
                        ((1.0 - alpha) * f32::from(px.0[k]) + alpha * f32::from(c[k])).round() as u8
                    }),
                    None => px.0,
                };
                assert_eq!(got.get_pixel(x, y).0, want, "alpha {alpha} at ({x}, {y})");
            }
        }
        let colours = colorize(mask.view(), &palette);
        assert_eq!(colours.get_pixel(1, 0).0, palette[1]);
        assert_eq!(
            colours.get_pixel(4, 0).0,
            [0, 0, 0],
            "label 4 has no colour"
        );
    }

    #[test]
    fn argmax_picks_class_per_pixel_and_image() {
        // N=2, C=3, H=1, W=2
        let mut l = Array4::<f32>::zeros((2, 3, 1, 2));
        l[[0, 2, 0, 0]] = 5.0;
        l[[0, 1, 0, 1]] = 1.0;
        l[[1, 0, 0, 0]] = -1.0; // classes 1 and 2 tie at 0 -> 1
        l[[1, 0, 0, 1]] = f32::NAN;
        l[[1, 2, 0, 1]] = 3.0;
        let masks = argmax(l.view());
        assert_eq!(masks.len(), 2);
        assert_eq!(masks[0], ClassMap::U8(arr2(&[[2, 1]])));
        assert_eq!(masks[1], ClassMap::U8(arr2(&[[1, 2]])));
    }

    /// Row reuse when upscaling gives what the index formula gives, up and down.
    #[test]
    fn resize_nearest_follows_the_index_formula() {
        let m = Array2::from_shape_fn((7, 11), |(y, x)| (y * 11 + x) as u8);
        for (h, w) in [(20, 33), (3, 4), (7, 30), (15, 5)] {
            let got = resize_nearest(m.view(), h, w);
            for ((y, x), &v) in got.indexed_iter() {
                assert_eq!(
                    v,
                    m[[(y * 7 / h).min(6), (x * 11 / w).min(10)]],
                    "{h}x{w} ({y}, {x})"
                );
            }
        }
    }

    #[test]
    fn resize_nearest_keeps_labels() {
        let m = arr2(&[[1u8, 2], [3, 4]]);
        assert_eq!(
            resize_nearest(m.view(), 4, 4),
            arr2(&[[1, 1, 2, 2], [1, 1, 2, 2], [3, 3, 4, 4], [3, 3, 4, 4]])
        );
        assert_eq!(resize_nearest(m.view(), 1, 1), arr2(&[[1]]));
        assert_eq!(
            resize_nearest(m.view(), 2, 3),
            arr2(&[[1, 1, 2], [3, 3, 4]])
        );
    }

    #[test]
    fn colorize_and_overlay() {
        let palette = [[0, 0, 0], [255, 0, 0], [0, 255, 0]];
        let mask = arr2(&[[0u8, 1], [2, 255]]);
        let c = colorize(mask.view(), &palette);
        assert_eq!((c.width(), c.height()), (2, 2));
        assert_eq!(c.get_pixel(1, 0), &Rgb([255, 0, 0]));
        assert_eq!(c.get_pixel(0, 1), &Rgb([0, 255, 0]));
        assert_eq!(c.get_pixel(1, 1), &Rgb([0, 0, 0]));

        let img = RgbImage::from_pixel(2, 2, Rgb([100, 100, 100]));
        let o = overlay(&img, mask.view(), &palette, DEFAULT_ALPHA);
        assert_eq!(o.get_pixel(0, 0), &Rgb([50, 50, 50]));
        assert_eq!(o.get_pixel(1, 0), &Rgb([178, 50, 50])); // 177.5 rounds up
        assert_eq!(o.get_pixel(1, 1), &Rgb([100, 100, 100])); // ignore label: untouched
                                                              // A 1x1 mask is stretched over the 2x2 image.
        let o = overlay(&img, arr2(&[[2u8]]).view(), &palette, 1.0);
        assert!(o.pixels().all(|p| *p == Rgb([0, 255, 0])));
    }

    #[test]
    fn bilinear_matches_pytorch_conventions() {
        // 1x1x2x2 -> 3x3. align_corners=true: corners kept, centre is the mean.
        let x = Array4::from_shape_vec((1, 1, 2, 2), vec![0.0, 1.0, 2.0, 3.0]).unwrap();
        let y = resize_bilinear(x.view(), 3, 3, true);
        let want = [0.0, 0.5, 1.0, 1.0, 1.5, 2.0, 2.0, 2.5, 3.0];
        assert_eq!(y.iter().copied().collect::<Vec<_>>(), want);
        // align_corners=false, 2 -> 4 (values from torch.nn.functional.interpolate).
        let x = Array4::from_shape_vec((1, 1, 1, 2), vec![0.0, 1.0]).unwrap();
        let y = resize_bilinear(x.view(), 1, 4, false);
        assert_eq!(
            y.iter().copied().collect::<Vec<_>>(),
            [0.0, 0.25, 0.75, 1.0]
        );
        // Downsampling with align_corners=true picks the end points.
        let x = Array4::from_shape_fn((2, 1, 1, 5), |(n, _, _, i)| (n * 10 + i) as f32);
        let y = resize_bilinear(x.view(), 1, 2, true);
        assert_eq!(
            y.iter().copied().collect::<Vec<_>>(),
            [0.0, 4.0, 10.0, 14.0]
        );
        assert_eq!(resize_bilinear(x.view(), 1, 5, true), x);
    }

    #[test]
    fn softmax_and_masks_at_size() {
        let mut l = Array4::<f32>::zeros((1, 2, 1, 2));
        l[[0, 1, 0, 0]] = 2.0_f32.ln();
        l[[0, 0, 0, 1]] = 1000.0; // no overflow
        let p = softmax(l.view());
        assert!((p[[0, 0, 0, 0]] - 1.0 / 3.0).abs() < 1e-6);
        assert!((p[[0, 1, 0, 0]] - 2.0 / 3.0).abs() < 1e-6);
        assert_eq!(p[[0, 0, 0, 1]], 1.0);
        // Class 1 wins left, class 0 right: bilinear moves the boundary to the middle.
        let mut l = Array4::<f32>::zeros((1, 2, 1, 2));
        l[[0, 1, 0, 0]] = 1.0;
        l[[0, 0, 0, 1]] = 3.0;
        let bil = masks_at_size(l.view(), 1, 4, Upsample::Bilinear);
        let near = masks_at_size(l.view(), 1, 4, Upsample::Nearest);
        assert_eq!(bil[0], ClassMap::U8(arr2(&[[1, 0, 0, 0]])));
        assert_eq!(near[0], ClassMap::U8(arr2(&[[1, 1, 0, 0]])));
        let p = softmax(resize_bilinear(l.view(), 2, 4, false).view());
        assert_eq!(p.dim(), (1, 2, 2, 4));
        assert!(p
            .index_axis(Axis(1), 0)
            .iter()
            .zip(p.index_axis(Axis(1), 1).iter())
            .all(|(a, b)| (a + b - 1.0).abs() < 1e-6));
    }
}
