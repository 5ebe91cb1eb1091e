//! The protocol's entry points: [`predict_images`] from pixels and [`predict`] from
//! normalised tensors, each dispatching to DANet's order of operations
//! ([`super::stitch`]) or mmseg's ([`super::mmseg`]).

use image::RgbImage;

use super::stitch::{self, Stitch};
use super::{mmseg, Protocol, ProtocolOptions};

/// Scores `(N, K, H, W)` of same-size `images` under `opts` (validated by the caller: see
/// [`ProtocolOptions::validate`]), from their pixels: the entry point of evaluation.
/// DANet normalises them with [`Stitch::normalise`] and runs [`predict`]; mmseg resizes
/// the uint8 pixels as `cv2.resize` does and normalises as mmseg ([`super::mmseg`]).
pub fn predict_images<S: Stitch>(
    s: &mut S,
    images: &[&RgbImage],
    opts: &ProtocolOptions,
) -> Result<S::Map, S::Error> {
    match opts.protocol {
        Protocol::Danet => {
            let x = s.normalise(images)?;
            predict(s, &x, opts)
        }
        Protocol::Mmseg => {
            let Some(first) = images.first().map(|i| i.dimensions()) else {
                // No image: the backend's own error (the runtime's names the problem).
                return s.normalise(images);
            };
            if images.iter().any(|i| i.dimensions() != first) {
                return s.normalise(images);
            }
            let (h, w) = (first.1 as usize, first.0 as usize);
            mmseg::predict(s, (h, w), opts, |s, th, tw| {
                let data = mmseg::prepare(images, th, tw, s.spec());
                Ok(s.upload(data, [images.len(), 3, th, tw]))
            })
        }
    }
}

/// Scores `(N, K, H, W)` of normalised `images` `(N, 3, H, W)` under `opts` (validated
/// by the caller: see [`ProtocolOptions::validate`]): DANet's summed `exp` scores, or
/// mmseg's logits / mean softmax ([`super::mmseg`]); the argmax over `K` is the
/// prediction. mmseg resizes images in uint8 ([`predict_images`]); from floats its input
/// resizes are float bilinear (`align_corners=false`, OpenCV's formula without its
/// fixed-point rounding).
pub fn predict<S: Stitch>(
    s: &mut S,
    images: &S::Map,
    opts: &ProtocolOptions,
) -> Result<S::Map, S::Error> {
    if opts.protocol == Protocol::Mmseg {
        let [_, _, h, w] = s.dims(images);
        return mmseg::predict(s, (h, w), opts, |s, th, tw| {
            Ok(s.resize(images, th, tw, false))
        });
    }
    stitch::danet_predict(s, images, opts)
}
