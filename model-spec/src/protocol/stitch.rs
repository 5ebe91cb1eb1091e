//! The protocol's tensor backend ([`Stitch`]), window stitching ([`slide`]) and DANet's
//! multi-scale order ([`danet_predict`]); [`predict`](super::predict) dispatches here or
//! to [`super::mmseg`].
//!
//! A backend ([`Stitch`]) supplies the network and a dozen primitives on NCHW maps
//! (resize, crop, pad, flip, concatenate, add, exp, softmax); the order of operations —
//! which decides the float32 result — lives here (and in [`super::mmseg`]) alone, so the
//! training crate's evaluation and the runtime's accuracy mode cannot drift apart.

use image::RgbImage;

use super::{danet_windows, scaled_size, window_counts, ProtocolOptions, Tiling, Window};
use crate::ModelSpec;

/// NCHW tensor primitives and the network, for [`predict`](super::predict). Images are normalised
/// `(N, 3, H, W)`; score maps `(N, K, H, W)` float32.
pub trait Stitch {
    type Map;
    type Error;

    /// The model's spec (its `align_corners`, normalisation and zero pixel).
    fn spec(&self) -> &ModelSpec;
    /// `(N, C, H, W)`.
    fn dims(&self, x: &Self::Map) -> [usize; 4];
    /// The network's raw logits of a batch of images, at the images' size.
    fn run(&mut self, images: &Self::Map) -> Result<Self::Map, Self::Error>;
    /// Same-size images normalised as the model was trained (`(x / 255 - mean) / std`),
    /// `(N, 3, H, W)`, on the backend's device.
    fn normalise(&mut self, images: &[&RgbImage]) -> Result<Self::Map, Self::Error>;
    /// A map of `dims` from row-major float32 values, on the backend's device.
    fn upload(&mut self, data: Vec<f32>, dims: [usize; 4]) -> Self::Map;
    /// Bilinear resize (PyTorch's, with `align_corners` as given); `x` itself (exactly)
    /// when the size already matches.
    fn resize(&mut self, x: &Self::Map, h: usize, w: usize, align_corners: bool) -> Self::Map;
    /// The region `win` of images `x`, in the top-left corner of an `h` x `w` canvas of
    /// zero pixels (`-mean/std`); `h`, `w` are at least the window's extent.
    fn crop_padded(&mut self, x: &Self::Map, win: Window, h: usize, w: usize) -> Self::Map;
    /// The region `win` of a map.
    fn crop(&mut self, x: &Self::Map, win: Window) -> Self::Map;
    /// Concatenation along the batch axis.
    fn cat(&mut self, parts: &[&Self::Map]) -> Self::Map;
    /// Items `start..start + len` of the batch.
    fn narrow_batch(&mut self, x: &Self::Map, start: usize, len: usize) -> Self::Map;
    /// Mirror along the width.
    fn flip_w(&mut self, x: &Self::Map) -> Self::Map;
    fn add(&mut self, a: Self::Map, b: &Self::Map) -> Self::Map;
    fn mul(&mut self, a: Self::Map, by: f32) -> Self::Map;
    /// `a / by`, a true division (not a multiplication by the reciprocal).
    fn div(&mut self, a: Self::Map, by: f32) -> Self::Map;
    fn exp(&mut self, a: Self::Map) -> Self::Map;
    /// Softmax over the class axis (1), as PyTorch's.
    fn softmax(&mut self, a: Self::Map) -> Self::Map;
    /// Float32 zeros `(n, k, h, w)`, on the device `like` lives on.
    fn zeros(&mut self, like: &Self::Map, dims: [usize; 4]) -> Self::Map;
    /// `sum[:, :, y.., x..] += part` over `part`'s extent.
    fn add_region(&mut self, sum: &mut Self::Map, part: &Self::Map, y: usize, x: usize);
    /// `sum / counts`, `counts` one `h` x `w` row-major plane shared by every image and
    /// channel.
    fn divide(&mut self, sum: Self::Map, counts: &[f32]) -> Self::Map;
}

/// DANet's scores `(N, K, H, W)` of normalised `images` `(N, 3, H, W)`: per scale, the
/// image resized, scored window by window ([`at_scale`]), resized back and summed.
pub(super) fn danet_predict<S: Stitch>(
    s: &mut S,
    images: &S::Map,
    opts: &ProtocolOptions,
) -> Result<S::Map, S::Error> {
    let [_, _, h, w] = s.dims(images);
    let mut total: Option<S::Map> = None;
    for &scale in &opts.scales {
        let (sh, sw) = scaled_size(opts.protocol, h, w, scale, opts.base_size);
        let resized = s.resize(images, sh, sw, true);
        let scores = at_scale(s, &resized, opts)?;
        let scores = s.resize(&scores, h, w, true);
        total = Some(match total {
            Some(t) => s.add(t, &scores),
            None => scores,
        });
    }
    Ok(total.expect("at least one scale (validated)"))
}

/// DANet's scores of one scaled batch at its own size.
fn at_scale<S: Stitch>(
    s: &mut S,
    images: &S::Map,
    opts: &ProtocolOptions,
) -> Result<S::Map, S::Error> {
    let [_, _, h, w] = s.dims(images);
    let (crop, stride) = match opts.tiling {
        Tiling::Whole => return infer(s, images, opts),
        Tiling::Sliding { crop, stride } => (crop, stride),
    };
    let whole = Window { y: 0, x: 0, h, w };
    match h.max(w) <= crop {
        true => {
            // Fits one crop: padded to it, run once, cut back.
            let padded = s.crop_padded(images, whole, crop, crop);
            let scores = infer(s, &padded, opts)?;
            Ok(s.crop(&scores, whole))
        }
        false => {
            // The short side is padded up to the crop first; windows are then placed on
            // the padded image, and the scores cut back to the image.
            let (ph, pw) = (h.max(crop), w.max(crop));
            let padded = if (ph, pw) == (h, w) {
                None
            } else {
                Some(s.crop_padded(images, whole, ph, pw))
            };
            let source = padded.as_ref().unwrap_or(images);
            let wins = danet_windows(ph, pw, crop, stride);
            let scores = slide(s, source, &wins, Some(crop), opts.batch_size, |s, batch| {
                infer(s, batch, opts)
            })?;
            Ok(if padded.is_some() {
                s.crop(&scores, whole)
            } else {
                scores
            })
        }
    }
}

/// Scores of `images` `(N, 3, H, W)` from `windows` (all of one extent), each cut out
/// (and padded to `pad` x `pad` when given), `batch_size` windows per run of `f`;
/// overlaps summed in window order and averaged by the count map.
pub(super) fn slide<S: Stitch>(
    s: &mut S,
    images: &S::Map,
    windows: &[Window],
    pad: Option<usize>,
    batch_size: usize,
    mut f: impl FnMut(&mut S, &S::Map) -> Result<S::Map, S::Error>,
) -> Result<S::Map, S::Error> {
    let [n, _, h, w] = s.dims(images);
    let mut sum: Option<S::Map> = None;
    for chunk in windows.chunks(batch_size.max(1)) {
        let crops: Vec<S::Map> = chunk
            .iter()
            .map(|win| match pad {
                Some(crop) => s.crop_padded(images, *win, crop, crop),
                None => s.crop(images, *win),
            })
            .collect();
        let batch = s.cat(&crops.iter().collect::<Vec<_>>());
        let scores = f(s, &batch)?;
        if sum.is_none() {
            let k = s.dims(&scores)[1];
            sum = Some(s.zeros(&scores, [n, k, h, w]));
        }
        let sum = sum.as_mut().expect("just set");
        for (j, win) in chunk.iter().enumerate() {
            let part = s.narrow_batch(&scores, j * n, n);
            let part = s.crop(&part, Window { y: 0, x: 0, ..*win });
            s.add_region(sum, &part, win.y, win.x);
        }
    }
    let sum = sum.expect("at least one window");
    Ok(s.divide(sum, &window_counts(windows, h, w)))
}

/// DANet's score of one network pass over `x`, with its mirror when asked:
/// `exp(f(x) + flip(f(flip(x))))`, or `exp(f(x))`. Both halves share one run.
fn infer<S: Stitch>(s: &mut S, x: &S::Map, opts: &ProtocolOptions) -> Result<S::Map, S::Error> {
    let logits = if opts.flip {
        let n = s.dims(x)[0];
        let mirrored = s.flip_w(x);
        let both = s.cat(&[x, &mirrored]);
        let out = s.run(&both)?;
        let direct = s.narrow_batch(&out, 0, n);
        let back = s.narrow_batch(&out, n, n);
        let back = s.flip_w(&back);
        s.add(direct, &back)
    } else {
        s.run(x)?
    };
    Ok(s.exp(logits))
}
