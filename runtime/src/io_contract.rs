//! What a model takes and returns: the plain contract (normalised f32 NCHW in, f32 logits
//! out) or the deployment variants `segtool export --preprocess` (uint8 NHWC RGB in, the
//! normalisation inside the graph) and `--argmax` (a class map out).
//!
//! `segtool-onnx` owns the types; [`IoContract::resolve`] learns the contract from the exporter's metadata (`segtool.input_layout`,
//! `segtool.output`) and from the graph's own input/output element types and ranks as the
//! engine reports them ([`Engine::io_contract`]); the graph wins where the two disagree
//! (a hand-edited or re-exported model), metadata fills in when the engine cannot tell.
//!
//! [`ContractAdapter`] makes any contract look like the plain one, so code that only knows
//! `Engine::run` (the [`BatchServer`](crate::BatchServer) workers, accuracy mode) still
//! works: it turns the normalised tensor back into the exact uint8 pixels for `--preprocess`
//! graphs and a class map into one-hot "logits" for `--argmax` graphs.

use image::RgbImage;
use ndarray::{Array2, Array3, Array4, ArrayView4, Axis, Zip};
use segtool_spec::ModelSpec;

use crate::engine::Engine;
use crate::error::{Result, RuntimeError};
use crate::postprocess::{argmax, resize_nearest};
use crate::preprocess::normalise_batch;

pub use segtool_onnx::metadata::{
    INPUT_LAYOUT_KEY, LAYOUT_NCHW_F32, LAYOUT_NHWC_U8, OUTPUT_KIND_KEY,
};
pub use segtool_onnx::{InputLayout, IoContract, OutputKind};

/// A batch in the layout an engine takes.
#[derive(Clone, Copy, Debug)]
pub enum EngineInput<'a> {
    /// Normalised f32 `[N, 3, H, W]`.
    NchwF32(ArrayView4<'a, f32>),
    /// Raw uint8 RGB `[N, H, W, 3]`.
    NhwcU8(ArrayView4<'a, u8>),
}

impl EngineInput<'_> {
    /// `(N, H, W)`.
    pub fn dims(&self) -> (usize, usize, usize) {
        match self {
            EngineInput::NchwF32(x) => (x.dim().0, x.dim().2, x.dim().3),
            EngineInput::NhwcU8(x) => (x.dim().0, x.dim().1, x.dim().2),
        }
    }
}

/// An owned [`EngineInput`] (what a decoding thread hands to the engine thread).
#[derive(Clone, Debug)]
pub enum EngineTensor {
    /// Normalised f32 `[N, 3, H, W]`.
    NchwF32(Array4<f32>),
    /// Raw uint8 RGB `[N, H, W, 3]` (`--preprocess` graphs).
    NhwcU8(Array4<u8>),
}

impl EngineTensor {
    /// Same-size images in the layout `layout` (normalised with `spec` for f32 NCHW).
    pub fn from_images(imgs: &[RgbImage], spec: &ModelSpec, layout: InputLayout) -> Result<Self> {
        Ok(match layout {
            InputLayout::NchwF32 => EngineTensor::NchwF32(normalise_batch(imgs, spec)?),
            InputLayout::NhwcU8 => EngineTensor::NhwcU8(pack_nhwc(imgs)?),
        })
    }

    /// Borrows it as the [`EngineInput`] that [`Engine::run`] takes.
    pub fn view(&self) -> EngineInput<'_> {
        match self {
            EngineTensor::NchwF32(x) => EngineInput::NchwF32(x.view()),
            EngineTensor::NhwcU8(x) => EngineInput::NhwcU8(x.view()),
        }
    }
}

/// What an engine returns.
#[derive(Clone, Debug)]
pub enum EngineOutput {
    /// f32 `[N, classes, H, W]`.
    Logits(Array4<f32>),
    /// Class per pixel `[N, H, W]`.
    Mask(Array3<u8>),
}

impl EngineOutput {
    /// Batch size of the output.
    pub fn len(&self) -> usize {
        match self {
            EngineOutput::Logits(l) => l.dim().0,
            EngineOutput::Mask(m) => m.dim().0,
        }
    }

    /// Whether the output holds no image.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks batch size and (for logits) the class count against the spec.
    pub fn check(&self, n: usize, spec: &ModelSpec) -> Result<()> {
        let classes = spec.num_classes();
        let bad = match self {
            EngineOutput::Logits(l) => l.dim().0 != n || l.dim().1 != classes || classes > 256,
            EngineOutput::Mask(m) => {
                m.dim().0 != n || classes > 256 || m.iter().any(|&c| usize::from(c) >= classes)
            }
        };
        if !bad {
            return Ok(());
        }
        Err(RuntimeError::OutputShape {
            expected: format!(
                "logits [{n}, {classes} classes (the spec's, at most 256), H, W] or a class \
                 map [{n}, H, W] with values below {classes}"
            ),
            got: match self {
                EngineOutput::Logits(l) => format!("logits {:?}", l.shape()),
                EngineOutput::Mask(m) => format!("class map {:?}", m.shape()),
            },
        })
    }

    /// The class map of image `i` at `(height, width)` (nearest resize when the model's
    /// output has another size).
    pub fn mask(&self, i: usize, height: usize, width: usize) -> Array2<u8> {
        let mask = match self {
            EngineOutput::Logits(l) => argmax(l.slice(ndarray::s![i..i + 1, .., .., ..]))
                .pop()
                .expect("one image"),
            EngineOutput::Mask(m) => m.index_axis(Axis(0), i).to_owned(),
        };
        if mask.dim() == (height, width) {
            mask
        } else {
            resize_nearest(mask.view(), height, width)
        }
    }

    /// The logits `(classes, h, w)` of image `i`, `None` for a class-map output.
    pub fn logits(&self, i: usize) -> Option<Array3<f32>> {
        match self {
            EngineOutput::Logits(l) => Some(l.index_axis(Axis(0), i).to_owned()),
            EngineOutput::Mask(_) => None,
        }
    }
}

/// Same-size images stacked as uint8 `[N, H, W, 3]` (a plain copy of the RGB buffers).
pub fn pack_nhwc(imgs: &[RgbImage]) -> Result<Array4<u8>> {
    let first = imgs.first().ok_or_else(|| RuntimeError::InputShape {
        expected: "at least one image".into(),
        got: "none".into(),
    })?;
    let (w, h) = first.dimensions();
    let mut data = Vec::with_capacity(imgs.len() * (w * h * 3) as usize);
    for img in imgs {
        if img.dimensions() != (w, h) {
            return Err(RuntimeError::InputShape {
                expected: format!("images of one size ({w}x{h})"),
                got: format!("{}x{}", img.width(), img.height()),
            });
        }
        data.extend_from_slice(img.as_raw());
    }
    Ok(Array4::from_shape_vec((imgs.len(), h as usize, w as usize, 3), data).expect("sized"))
}

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
    use super::*;
    use crate::testing::tiny_spec;

    #[test]
    fn metadata_contracts() {
        let props = |l: &str, o: &str| {
            vec![
                (segtool_spec::SPEC_METADATA_KEY.to_string(), tiny_spec(2).to_json()),
                (INPUT_LAYOUT_KEY.to_string(), l.to_string()),
                (OUTPUT_KIND_KEY.to_string(), o.to_string()),
            ]
        };
        let contract = |p: Vec<(String, String)>| {
            segtool_onnx::Metadata::from_props("m.onnx".as_ref(), &p).map(|m| m.contract)
        };
        assert_eq!(contract(props(LAYOUT_NCHW_F32, "logits")[..1].to_vec()).unwrap(), None);
        let c = contract(props(LAYOUT_NHWC_U8, "mask")).unwrap().unwrap();
        assert_eq!(
            c,
            IoContract {
                input: InputLayout::NhwcU8,
                output: OutputKind::Mask
            }
        );
        assert!(contract(props(LAYOUT_NCHW_F32, "logits")).unwrap().unwrap().is_plain());
        assert!(contract(props("NCDHW", "logits")).is_err());
        assert!(contract(props(LAYOUT_NCHW_F32, "probs")).is_err());
        assert_eq!(IoContract::resolve(Some(c), None), c);
        assert!(IoContract::resolve(Some(c), Some(IoContract::default())).is_plain());
    }

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
