//! [`ContractAdapter`] makes an engine of any [`IoContract`] look like the plain one, so
//! code that only knows `Engine::run` (the [`BatchServer`](crate::BatchServer) workers,
//! accuracy mode) still works: it turns the normalised tensor back into the exact uint8
//! pixels for `--preprocess` graphs and a class map into one-hot "logits" for `--argmax`
//! graphs.

use ndarray::{Array4, ArrayView4, Zip};
use segtool_model_spec::ModelSpec;

use crate::engines::Engine;
use crate::error::Result;
use crate::engines::io_contract::{EngineInput, EngineOutput, InputLayout, IoContract};

/// Makes an engine of any [`IoContract`] answer like a plain model (normalised f32 in,
/// logits out), for code that computes on normalised tensors: accuracy mode's resized
/// and padded tiles, and tensors handed to the batch server as tensors. Images never
/// pass through it: a [`Segmenter`](crate::Segmenter) feeds `--preprocess` graphs their
/// pixels directly.
///
/// `--preprocess` graphs get the uint8 pixels back from the normalised tensor
/// (`round((x * std + mean) * 255)`, exact for tensors made by
/// [`normalise_batch`]; tensors that are not normalised pixels, such as resized or padded
/// ones, are rounded to the nearest pixel value). `--argmax` graphs answer one-hot logits
/// (1 for the predicted class, 0 elsewhere), whose argmax is the graph's class map.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::{normalise, ContractAdapter};
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// let img = image::RgbImage::from_fn(4, 2, |x, y| image::Rgb([60 * x as u8, 100 * y as u8, 7]));
/// // What a `--preprocess` graph behind `ContractAdapter::wrap(engine, contract, &spec)`
/// // gets for a normalised tensor: the image's exact pixels, uint8 NHWC.
/// let x = normalise(&img, &spec);
/// let pixels = ContractAdapter::pixels(x.view(), &spec);
/// assert_eq!(pixels.dim(), (1, 2, 4, 3));
/// assert_eq!(pixels.as_slice(), Some(img.as_raw().as_slice()));
/// ```
pub struct ContractAdapter {
    inner: Box<dyn Engine>,
    contract: IoContract,
    mean: [f32; 3],
    std: [f32; 3],
    classes: usize,
}

impl ContractAdapter {
    /// Wraps `inner`, whose graph follows `contract`; `spec` gives the mean/std that
    /// turn tensors back into pixels and the class count of the one-hot logits.
    pub fn new(inner: Box<dyn Engine>, contract: IoContract, spec: &ModelSpec) -> Self {
        Self {
            inner,
            contract,
            mean: spec.mean,
            std: spec.std,
            classes: spec.num_classes(),
        }
    }

    /// `engine` itself when its contract is plain, else wrapped.
    pub fn wrap(
        engine: Box<dyn Engine>,
        contract: IoContract,
        spec: &ModelSpec,
    ) -> Box<dyn Engine> {
        if contract.is_plain() {
            engine
        } else {
            Box::new(Self::new(engine, contract, spec))
        }
    }

    /// The pixels a normalised `[N, 3, H, W]` tensor came from, as `[N, H, W, 3]`.
    pub fn denormalise(&self, x: ArrayView4<f32>) -> Array4<u8> {
        denormalise(x, self.mean, self.std)
    }

    /// [`ContractAdapter::denormalise`] with `spec`'s mean and std.
    pub fn pixels(x: ArrayView4<f32>, spec: &ModelSpec) -> Array4<u8> {
        denormalise(x, spec.mean, spec.std)
    }
}

fn denormalise(x: ArrayView4<f32>, mean: [f32; 3], std: [f32; 3]) -> Array4<u8> {
    let (n, _, h, w) = x.dim();
    let mut out = Array4::<u8>::zeros((n, h, w, 3));
    for c in 0..3 {
        let (m, s) = (mean[c], std[c]);
        Zip::from(out.slice_mut(ndarray::s![.., .., .., c]))
            .and(x.slice(ndarray::s![.., c, .., ..]))
            .for_each(|o, &v| *o = ((v * s + m) * 255.0).round().clamp(0.0, 255.0) as u8);
    }
    out
}

impl Engine for ContractAdapter {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn provider(&self) -> &str {
        self.inner.provider()
    }

    fn fallback_reason(&self) -> Option<&str> {
        self.inner.fallback_reason()
    }

    fn io_contract(&self) -> Option<IoContract> {
        Some(IoContract::default())
    }

    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        let out = match (input, self.contract.input) {
            (EngineInput::NchwF32(x), InputLayout::NhwcU8) => {
                let pixels = self.denormalise(x);
                self.inner.run(EngineInput::NhwcU8(pixels.view()))?
            }
            (input, _) => self.inner.run(input)?,
        };
        Ok(EngineOutput::Logits(match out {
            EngineOutput::Logits(l) => l,
            EngineOutput::Mask(m) => {
                let (n, h, w) = m.dim();
                let mut onehot = Array4::<f32>::zeros((n, self.classes, h, w));
                for ((i, y, x), &c) in m.indexed_iter() {
                    if usize::from(c) < self.classes {
                        onehot[[i, usize::from(c), y, x]] = 1.0;
                    }
                }
                onehot
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use image::RgbImage;

    use super::*;
    use crate::engines::io_contract::pack_nhwc;
    use crate::normalise::normalise_batch;
    use segtool_testkit::tiny_spec;

    #[test]
    fn denormalise_recovers_pixels_exactly() {
        let spec = tiny_spec(3);
        let img = RgbImage::from_fn(7, 5, |x, y| {
            image::Rgb([(x * 37 + y) as u8, (y * 51) as u8, (x * y * 13 + 255) as u8])
        });
        let x = normalise_batch(std::slice::from_ref(&img), &spec).unwrap();
        struct Nop;
        impl Engine for Nop {
            fn name(&self) -> &str {
                "nop"
            }
            fn provider(&self) -> &str {
                "cpu"
            }
            fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
                match input {
                    EngineInput::NchwF32(x) => Ok(EngineOutput::Logits(x.to_owned())),
                    EngineInput::NhwcU8(_) => unreachable!("plain contract"),
                }
            }
        }
        let a = ContractAdapter::new(Box::new(Nop), IoContract::default(), &spec);
        assert_eq!(a.denormalise(x.view()), pack_nhwc(&[img]).unwrap());
    }
}
