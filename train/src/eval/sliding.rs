//! The evaluation protocol on one batch of same-size, normalised images: multi-scale,
//! flip, and sliding windows, as PyTorch-Encoding's `MultiEvalModule` (which produced
//! DANet's published numbers) does it, with mmsegmentation's window placement.
//!
//! Everything here works on logits and never applies a softmax: windows, flips and
//! scales are combined by averaging (or summing) raw logits, as the reference does.

use segtool_core::ModelSpec;
use tch::{Kind, Tensor};

use super::{EvalOptions, Mode};
use crate::model::DaNet;

/// Fused logits (N, K, H, W) of `images` (N, 3, H, W) under `opts`: for each scale the
/// resized batch goes through [`at_scale`], its logits are resized back to (H, W) and
/// summed over scales. Bilinear resizing uses align_corners=true, as PyTorch-Encoding.
pub fn predict(model: &DaNet, images: &Tensor, opts: &EvalOptions) -> Tensor {
    tch::no_grad(|| {
        let (_, _, h, w) = images.size4().expect("images are NCHW");
        let mut total: Option<Tensor> = None;
        for &s in &opts.scales {
            let (sh, sw) = (scaled(h, s), scaled(w, s));
            let logits = at_scale(model, &resize(images, sh, sw), opts);
            let logits = resize(&logits, h, w);
            total = Some(match total {
                Some(t) => t + logits,
                None => logits,
            });
        }
        total.expect("at least one scale")
    })
}

/// `len * scale`, rounded, at least one pixel.
fn scaled(len: i64, scale: f64) -> i64 {
    ((len as f64 * scale).round() as i64).max(1)
}

/// Bilinear resize with align_corners=true; a no-op (no copy, no rounding) when the size
/// already matches, so scale 1.0 is exact.
fn resize(x: &Tensor, h: i64, w: i64) -> Tensor {
    let (_, _, xh, xw) = x.size4().expect("NCHW");
    if (xh, xw) == (h, w) {
        x.shallow_clone()
    } else {
        x.upsample_bilinear2d([h, w], true, None, None)
    }
}

/// Logits of one scaled batch, at its own size. Whole mode runs the network on it as is:
/// DANet upsamples its outputs to the input size, so no padding to a multiple of the
/// output stride is needed.
pub fn at_scale(model: &DaNet, images: &Tensor, opts: &EvalOptions) -> Tensor {
    match opts.mode {
        Mode::Whole => forward_flip(model, images, opts.flip),
        Mode::Sliding { crop, stride } => {
            slide(model, images, crop, stride, opts.flip, opts.batch_size)
        }
    }
}

/// The network's fused logits; with `flip`, the mean of the logits of `x` and of its
/// horizontal mirror (mirrored back). Both halves share one forward pass.
pub fn forward_flip(model: &DaNet, x: &Tensor, flip: bool) -> Tensor {
    if !flip {
        return model.forward_all(x, false).fused;
    }
    let n = x.size()[0];
    let both = model
        .forward_all(&Tensor::cat(&[x, &x.flip([3])], 0), false)
        .fused;
    (both.narrow(0, 0, n) + both.narrow(0, n, n).flip([3])) / 2.0
}

pub use segtool_core::protocol::{window_starts, windows, Window};

/// How many windows cover each pixel, (1, 1, h, w) f32: the divisor that turns summed
/// window logits into a mean.
pub fn window_counts(windows: &[Window], h: i64, w: i64, device: tch::Device) -> Tensor {
    let counts = Tensor::zeros([1, 1, h, w], (Kind::Float, device));
    for win in windows {
        let mut region = narrow_window(&counts, win);
        region += 1.0;
    }
    counts
}

/// Sliding-window logits of `images` (N, 3, H, W): `crop` x `crop` windows `stride`
/// apart (see [`windows`]); windows sticking out of a small image are padded with zero
/// pixels to the full crop; `batch` windows share a forward pass; overlapping logits
/// are averaged. An image no larger than the crop is thus one padded window.
pub fn slide(
    model: &DaNet,
    images: &Tensor,
    crop: i64,
    stride: i64,
    flip: bool,
    batch: usize,
) -> Tensor {
    let (n, _, h, w) = images.size4().expect("images are NCHW");
    let k = model.spec.num_classes() as i64;
    let all = windows(h as usize, w as usize, crop as usize, stride as usize);
    let sum = Tensor::zeros([n, k, h, w], (Kind::Float, images.device()));
    for chunk in all.chunks(batch.max(1)) {
        let crops: Vec<Tensor> = chunk
            .iter()
            .map(|win| pad_to(&narrow_window(images, win), crop, crop, &model.spec))
            .collect();
        let logits = forward_flip(model, &Tensor::cat(&crops, 0), flip);
        for (j, win) in chunk.iter().enumerate() {
            let out = logits
                .narrow(0, j as i64 * n, n)
                .narrow(2, 0, win.h as i64)
                .narrow(3, 0, win.w as i64)
                .to_kind(Kind::Float);
            let mut region = narrow_window(&sum, win);
            region += out;
        }
    }
    sum / window_counts(&all, h, w, images.device())
}

/// The `win` region of an NCHW tensor (a view).
fn narrow_window(t: &Tensor, win: &Window) -> Tensor {
    t.narrow(2, win.y as i64, win.h as i64)
        .narrow(3, win.x as i64, win.w as i64)
}

/// `x` (N, 3, h, w) in the top-left corner of an `h` x `w` canvas of zero pixels, which
/// after normalisation are `-mean / std`. PyTorch-Encoding pads its windows the same way.
pub fn pad_to(x: &Tensor, h: i64, w: i64, spec: &ModelSpec) -> Tensor {
    let (n, c, xh, xw) = x.size4().expect("NCHW");
    if (xh, xw) == (h, w) {
        return x.shallow_clone();
    }
    let zero: Vec<f32> = (0..3).map(|i| -spec.mean[i] / spec.std[i]).collect();
    let canvas = Tensor::from_slice(&zero)
        .view([1, 3, 1, 1])
        .to_kind(x.kind())
        .to_device(x.device())
        .expand([n, c, h, w], false)
        .contiguous();
    canvas.narrow(2, 0, xh).narrow(3, 0, xw).copy_(x);
    canvas
}
