//! The evaluation protocol on one batch of same-size images: multi-scale, flip and
//! sliding windows, DANet's `MultiEvalModule` or mmsegmentation's test pipeline, as
//! `segtool_model_spec::protocol` implements them once; this module is its tch backend.

use image::RgbImage;
use segtool_model_spec::protocol::{self, Stitch};
use segtool_model_spec::ModelSpec;
use tch::{Device, Kind, Tensor};

use super::EvalOptions;
use crate::data::images_to_tensor;
use crate::model::DaNet;

pub use segtool_model_spec::protocol::{window_starts, windows, Window};

/// Fused scores (N, K, H, W) of normalised `images` (N, 3, H, W) under `opts`: summed
/// `exp` scores (DANet), logits or mean softmax (mmseg, with float input resizes); see
/// `segtool_model_spec::protocol`.
pub fn predict(model: &DaNet, images: &Tensor, opts: &EvalOptions) -> Tensor {
    let mut backend = TchStitch {
        model,
        device: images.device(),
    };
    tch::no_grad(|| match protocol::predict(&mut backend, images, opts) {
        Ok(scores) => scores,
        Err(never) => match never {},
    })
}

/// Fused scores (N, K, H, W) of same-size `images` under `opts`, on `device`: what
/// evaluation runs. DANet normalises them as training does and runs [`predict`]; mmseg
/// resizes their uint8 pixels as `cv2.resize` and normalises as mmseg
/// (`segtool_model_spec::protocol::mmseg`).
pub fn predict_images(
    model: &DaNet,
    images: &[&RgbImage],
    opts: &EvalOptions,
    device: Device,
) -> Tensor {
    let mut backend = TchStitch { model, device };
    tch::no_grad(
        || match protocol::predict_images(&mut backend, images, opts) {
            Ok(scores) => scores,
            Err(never) => match never {},
        },
    )
}

/// The network's fused logits; with `flip`, the mean of the logits of `x` and of its
/// horizontal mirror (mirrored back), mmsegmentation's combination. Both halves share one
/// forward pass.
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

/// How many windows cover each pixel, (1, 1, h, w) f32.
pub fn window_counts(windows: &[Window], h: i64, w: i64, device: tch::Device) -> Tensor {
    let counts = protocol::window_counts(windows, h as usize, w as usize);
    Tensor::from_slice(&counts)
        .view([1, 1, h, w])
        .to_device(device)
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

/// The `win` region of an NCHW tensor (a view).
fn narrow_window(t: &Tensor, win: &Window) -> Tensor {
    t.narrow(2, win.y as i64, win.h as i64)
        .narrow(3, win.x as i64, win.w as i64)
}

/// The protocol's primitives on tch tensors, on the model's device; scores are float32
/// (an autocast model's half logits are widened when accumulated).
struct TchStitch<'a> {
    model: &'a DaNet,
    device: Device,
}

impl Stitch for TchStitch<'_> {
    type Map = Tensor;
    type Error = std::convert::Infallible;

    fn spec(&self) -> &ModelSpec {
        &self.model.spec
    }

    fn dims(&self, x: &Tensor) -> [usize; 4] {
        let (n, c, h, w) = x.size4().expect("NCHW");
        [n as usize, c as usize, h as usize, w as usize]
    }

    fn normalise(&mut self, images: &[&RgbImage]) -> Result<Tensor, std::convert::Infallible> {
        Ok(images_to_tensor(images, &self.model.spec, self.device))
    }

    fn upload(&mut self, data: Vec<f32>, dims: [usize; 4]) -> Tensor {
        Tensor::from_slice(&data)
            .view(dims.map(|d| d as i64))
            .to_device(self.device)
    }

    fn run(&mut self, images: &Tensor) -> Result<Tensor, std::convert::Infallible> {
        Ok(self
            .model
            .forward_all(images, false)
            .fused
            .to_kind(Kind::Float))
    }

    fn resize(&mut self, x: &Tensor, h: usize, w: usize, align_corners: bool) -> Tensor {
        let [_, _, xh, xw] = self.dims(x);
        if (xh, xw) == (h, w) {
            x.shallow_clone()
        } else {
            x.upsample_bilinear2d([h as i64, w as i64], align_corners, None, None)
        }
    }

    fn crop_padded(&mut self, x: &Tensor, win: Window, h: usize, w: usize) -> Tensor {
        pad_to(
            &narrow_window(x, &win),
            h as i64,
            w as i64,
            &self.model.spec,
        )
    }

    fn crop(&mut self, x: &Tensor, win: Window) -> Tensor {
        narrow_window(x, &win)
    }

    fn cat(&mut self, parts: &[&Tensor]) -> Tensor {
        Tensor::cat(parts, 0)
    }

    fn narrow_batch(&mut self, x: &Tensor, start: usize, len: usize) -> Tensor {
        x.narrow(0, start as i64, len as i64)
    }

    fn flip_w(&mut self, x: &Tensor) -> Tensor {
        x.flip([3])
    }

    fn add(&mut self, a: Tensor, b: &Tensor) -> Tensor {
        a + b
    }

    fn mul(&mut self, a: Tensor, by: f32) -> Tensor {
        a * f64::from(by)
    }

    fn div(&mut self, a: Tensor, by: f32) -> Tensor {
        a / f64::from(by)
    }

    fn exp(&mut self, a: Tensor) -> Tensor {
        a.exp()
    }

    fn softmax(&mut self, a: Tensor) -> Tensor {
        a.softmax(1, Kind::Float)
    }

    fn zeros(&mut self, like: &Tensor, dims: [usize; 4]) -> Tensor {
        let dims = dims.map(|d| d as i64);
        Tensor::zeros(dims, (Kind::Float, like.device()))
    }

    fn add_region(&mut self, sum: &mut Tensor, part: &Tensor, y: usize, x: usize) {
        let [_, _, h, w] = self.dims(part);
        let mut region = narrow_window(sum, &Window { y, x, h, w });
        region += part;
    }

    fn divide(&mut self, sum: Tensor, counts: &[f32]) -> Tensor {
        let [_, _, h, w] = self.dims(&sum);
        let counts = Tensor::from_slice(counts)
            .view([1, 1, h as i64, w as i64])
            .to_device(sum.device());
        sum / counts
    }
}
