//! mmsegmentation 1.2.2's test pipeline, exactly, generic over the tensor library (a
//! [`Stitch`] backend):
//! - single pass (scale 1.0, no flip): `Resize(scale=(long, short), keep_ratio=True)` when
//!   the options carry a scale (an imported config's test pipeline), then
//!   `EncoderDecoder.whole_inference` or `slide_inference`, then `postprocess_result`:
//!   the logits resized bilinearly back to the original image with the model's
//!   `align_corners`; the prediction is their argmax;
//! - TTA (other scales, or flip): `SegTTAModel` over mmseg's `tta_pipeline`: for every
//!   ratio `Resize(scale_factor=ratio, keep_ratio=True)` of the ORIGINAL image (the test
//!   scale does not apply, as in mmseg's configs), unflipped then flipped; each variant's
//!   logits are flipped back, resized to the original image and soft-maxed over classes;
//!   the mean of the probabilities is the score (`merge_preds`).
//!
//! `slide` windows start every stride and the last one is moved back to end at the edge
//! ([`windows`]); a window larger than the image is cut to it and run at that size, not
//! padded. Overlaps are summed in window order and divided by the count map.
//!
//! The uint8 path ([`predict_images`](super::predict_images)) resizes pixels as
//! `cv2.resize(INTER_LINEAR)` does ([`resize_linear_u8`]) and normalises as mmseg's
//! `SegDataPreProcessor`: `(x - mean) / std` on 0-255 values in float32.

use image::RgbImage;

use super::resize::{keep_ratio_size, ratio_size, resize_linear_u8};
use super::stitch::{slide, Stitch};
use super::{windows, ProtocolOptions, Tiling};
use crate::ModelSpec;

/// mmseg's TTA ratios (`img_ratios` in its Cityscapes, ADE20K and VOC configs), used
/// with flip.
pub const TTA_SCALES: [f64; 6] = [0.5, 0.75, 1.0, 1.25, 1.5, 1.75];

/// Whether `opts` is mmseg's TTA rather than its single-pass test pipeline.
pub fn is_tta(opts: &ProtocolOptions) -> bool {
    opts.flip || opts.scales != [1.0]
}

/// The network input sizes and flips, in `TestTimeAug`'s order (ratio by ratio,
/// unflipped first), for an `h` x `w` image.
pub fn variants(h: usize, w: usize, opts: &ProtocolOptions) -> Vec<(usize, usize, bool)> {
    if !is_tta(opts) {
        let (th, tw) = opts
            .resize
            .map_or((h, w), |scale| keep_ratio_size(h, w, scale));
        return vec![(th, tw, false)];
    }
    let flips: &[bool] = if opts.flip { &[false, true] } else { &[false] };
    opts.scales
        .iter()
        .flat_map(|&r| {
            let (th, tw) = ratio_size(h, w, r);
            flips.iter().map(move |&f| (th, tw, f))
        })
        .collect()
}

/// mmseg's `(mean, std)` on 0-255 values from the spec's 0-1 ones: mmseg's constants
/// have at most three decimals (123.675, 58.395, ...), which `x * 255` in float32 misses
/// by an ulp, so they are recovered by rounding to 1e-4.
pub fn mean_std_255(spec: &ModelSpec) -> ([f32; 3], [f32; 3]) {
    let to255 = |v: f32| ((f64::from(v) * 255.0 * 1e4).round() / 1e4) as f32;
    (spec.mean.map(to255), spec.std.map(to255))
}

/// Same-size images resized to `h` x `w` as `cv2.resize(INTER_LINEAR)` and normalised as
/// mmseg: `(N, 3, h, w)` row-major float32.
pub fn prepare(imgs: &[&RgbImage], h: usize, w: usize, spec: &ModelSpec) -> Vec<f32> {
    let (mean, std) = mean_std_255(spec);
    let plane = h * w;
    let mut out = vec![0f32; imgs.len() * 3 * plane];
    for (img, dst) in imgs.iter().zip(out.chunks_exact_mut(3 * plane)) {
        let (iw, ih) = img.dimensions();
        let resized;
        let pixels: &[u8] = if (ih as usize, iw as usize) == (h, w) {
            img.as_raw()
        } else {
            resized = resize_linear_u8(img.as_raw(), ih as usize, iw as usize, 3, h, w);
            &resized
        };
        for (i, px) in pixels.chunks_exact(3).enumerate() {
            for c in 0..3 {
                dst[c * plane + i] = (f32::from(px[c]) - mean[c]) / std[c];
            }
        }
    }
    out
}

/// mmseg's scores `(N, K, H, W)` of images of `h` x `w` (module docs): logits at the
/// original size (single pass) or the mean softmax (TTA). `input(s, th, tw)` gives the
/// normalised batch at `th` x `tw`.
pub(super) fn predict<S: Stitch>(
    s: &mut S,
    (h, w): (usize, usize),
    opts: &ProtocolOptions,
    mut input: impl FnMut(&mut S, usize, usize) -> Result<S::Map, S::Error>,
) -> Result<S::Map, S::Error> {
    let align_corners = s.spec().align_corners;
    let tta = is_tta(opts);
    let mut total: Option<S::Map> = None;
    let mut count = 0usize;
    let mut current: Option<((usize, usize), S::Map)> = None;
    for (th, tw, flip) in variants(h, w, opts) {
        let x = match current.take() {
            Some((size, x)) if size == (th, tw) => x,
            _ => input(s, th, tw)?,
        };
        let logits = if flip {
            let mirrored = s.flip_w(&x);
            let out = inference(s, &mirrored, opts)?;
            s.flip_w(&out)
        } else {
            inference(s, &x, opts)?
        };
        current = Some(((th, tw), x));
        let logits = s.resize(&logits, h, w, align_corners);
        if !tta {
            return Ok(logits);
        }
        let probs = s.softmax(logits);
        count += 1;
        total = Some(match total {
            Some(t) => s.add(t, &probs),
            None => probs,
        });
    }
    let total = total.expect("at least one variant (validated)");
    Ok(s.div(total, count as f32))
}

/// `EncoderDecoder.inference`: whole, or slide with unpadded edge-aligned windows,
/// `opts.batch_size` windows per run.
fn inference<S: Stitch>(s: &mut S, x: &S::Map, opts: &ProtocolOptions) -> Result<S::Map, S::Error> {
    match opts.tiling {
        Tiling::Whole => s.run(x),
        Tiling::Sliding { crop, stride } => {
            let [_, _, h, w] = s.dims(x);
            let wins = windows(h, w, crop, stride);
            slide(s, x, &wins, None, opts.batch_size, |s, batch| s.run(batch))
        }
    }
}
