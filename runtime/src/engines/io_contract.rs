//! What a model takes and returns: the plain contract (normalised f32 NCHW in, f32 logits
//! out) or the deployment variants `segtool export --preprocess` (uint8 NHWC RGB in, the
//! normalisation inside the graph) and `--argmax` (a class map out).
//!
//! `segtool-onnx` owns the types; [`IoContract::resolve`] learns the contract from the exporter's metadata (`segtool.input_layout`,
//! `segtool.output`) and from the graph's own input/output element types and ranks as the
//! engine reports them ([`Engine::io_contract`](crate::Engine::io_contract)); the graph wins where the two disagree
//! (a hand-edited or re-exported model), metadata fills in when the engine cannot tell.
//!
//! The types only: engines take and return them ([`crate::engines`] depends on this module,
//! not the other way round); [`ContractAdapter`](crate::engines::contract_adapter::ContractAdapter)
//! makes any contract look like the plain one.

use image::RgbImage;
use ndarray::{Array3, Array4, ArrayView4, Axis};
use segtool_model_spec::ModelSpec;

use crate::segmentation::class_map::{ClassMap, MAX_CLASSES};
use crate::error::{Result, RuntimeError};
use crate::segmentation::postprocess::{argmax, resize_nearest};
use crate::normalise::normalise_batch;

pub use segtool_onnx::{InputLayout, IoContract, OutputKind};

/// A batch in the layout an engine takes.
///
/// # Example
///
/// ```
/// use ndarray::Array4;
/// use segtool_runtime::expert::EngineInput;
/// // Camera frames already packed as uint8 NHWC, for a `--preprocess` graph.
/// let pixels = Array4::<u8>::zeros((2, 480, 640, 3));
/// let input = EngineInput::NhwcU8(pixels.view());
/// assert_eq!(input.dims(), (2, 480, 640)); // (N, H, W) whatever the layout
/// // `engine.run(input)?` takes it by value: it only borrows the pixels.
/// ```
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
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::{EngineInput, EngineTensor};
/// use segtool_runtime::InputLayout;
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// let frames = vec![image::RgbImage::new(64, 48); 2];
/// // Normalised f32 NCHW for a plain graph (uint8 NHWC for a `--preprocess` one).
/// let tensor = EngineTensor::from_images(&frames, &spec, InputLayout::NchwF32)?;
/// let EngineTensor::NchwF32(x) = &tensor else { panic!("asked for NCHW") };
/// assert_eq!(x.shape(), [2, 3, 48, 64]);
/// // What `Engine::run` takes, borrowed.
/// assert!(matches!(tensor.view(), EngineInput::NchwF32(_)));
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
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

    /// [`EngineTensor::from_images`] of frames (any pixel format, strided rows), read in
    /// place: what a front end holding camera buffers or arrays hands over.
    pub fn from_frames(
        frames: &[crate::frame::Frame<'_>],
        spec: &ModelSpec,
        layout: InputLayout,
    ) -> Result<Self> {
        Ok(match layout {
            InputLayout::NchwF32 => {
                EngineTensor::NchwF32(crate::normalise::normalise_frames(frames, spec)?)
            }
            InputLayout::NhwcU8 => {
                let rgb: Vec<RgbImage> = frames.iter().map(|f| f.to_rgb()).collect();
                EngineTensor::NhwcU8(pack_nhwc(&rgb)?)
            }
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
///
/// # Example
///
/// ```
/// use ndarray::Array4;
/// use segtool_runtime::expert::EngineOutput;
/// use segtool_model_spec::{BackboneSpec, ModelSpec};
/// let spec = ModelSpec::new("demo", BackboneSpec::tiny(), vec!["road".into(), "car".into()]);
/// // 2x2 logits (a coarse output) of one 4x4 image; class 1 wins on the right half.
/// let logits = Array4::from_shape_vec((1, 2, 2, 2), vec![1., 0., 1., 0., 0., 1., 0., 1.])?;
/// let out = EngineOutput::Logits(logits);
/// out.check(1, &spec)?; // one image, the spec's two classes
/// let mask = out.mask(0, 2, 4, 4); // argmax (two classes: u8 ids), then resized to the image
/// assert_eq!(mask.as_u8().unwrap().row(0).to_vec(), [0, 0, 1, 1]);
/// assert_eq!(out.logits(0).map(|l| l.dim()), Some((2, 2, 2)));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug)]
pub enum EngineOutput {
    /// f32 `[N, classes, H, W]`.
    Logits(Array4<f32>),
    /// Class per pixel `[N, H, W]` (a graph's class map of any integer type, widened).
    Mask(Array3<u16>),
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
            EngineOutput::Logits(l) => {
                l.dim().0 != n || l.dim().1 != classes || classes > MAX_CLASSES
            }
            EngineOutput::Mask(m) => m.dim().0 != n || m.iter().any(|&c| usize::from(c) >= classes),
        };
        if !bad {
            return Ok(());
        }
        Err(RuntimeError::OutputShape {
            expected: format!(
                "logits [{n}, {classes} classes (the spec's, at most {MAX_CLASSES}), H, W] or a class \
                 map [{n}, H, W] with values below {classes}"
            ),
            got: match self {
                EngineOutput::Logits(l) => format!("logits {:?}", l.shape()),
                EngineOutput::Mask(m) => format!("class map {:?}", m.shape()),
            },
        })
    }

    /// The class map of image `i` at `(height, width)` (nearest resize when the model's
    /// output has another size), at the id width of a model of `classes` classes (the
    /// spec's, which [`check`](Self::check) compares the output with).
    pub fn mask(&self, i: usize, classes: usize, height: usize, width: usize) -> ClassMap {
        match self {
            EngineOutput::Logits(l) => {
                let mask = argmax(l.slice(ndarray::s![i..i + 1, .., .., ..]))
                    .pop()
                    .expect("one image");
                match mask.dim() == (height, width) {
                    true => mask,
                    false => mask.resized(height, width),
                }
            }
            EngineOutput::Mask(m) => {
                let plane = resize_nearest(m.index_axis(Axis(0), i), height, width);
                ClassMap::narrowed(plane, classes)
            }
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

#[cfg(test)]
mod tests {
    use super::*;
    use segtool_onnx::metadata::{
        INPUT_LAYOUT_KEY, LAYOUT_NCHW_F32, LAYOUT_NHWC_U8, OUTPUT_KIND_KEY,
    };
    use segtool_testkit::tiny_spec;

    #[test]
    fn metadata_contracts() {
        let props = |l: &str, o: &str| {
            vec![
                (
                    segtool_model_spec::SPEC_METADATA_KEY.to_string(),
                    tiny_spec(2).to_json(),
                ),
                (INPUT_LAYOUT_KEY.to_string(), l.to_string()),
                (OUTPUT_KIND_KEY.to_string(), o.to_string()),
            ]
        };
        let contract = |p: Vec<(String, String)>| {
            segtool_onnx::Metadata::from_props("m.onnx".as_ref(), &p).map(|m| m.contract)
        };
        assert_eq!(
            contract(props(LAYOUT_NCHW_F32, "logits")[..1].to_vec()).unwrap(),
            None
        );
        let c = contract(props(LAYOUT_NHWC_U8, "mask")).unwrap().unwrap();
        assert_eq!(
            c,
            IoContract {
                input: InputLayout::NhwcU8,
                output: OutputKind::Mask
            }
        );
        assert!(contract(props(LAYOUT_NCHW_F32, "logits"))
            .unwrap()
            .unwrap()
            .is_plain());
        assert!(contract(props("NCDHW", "logits")).is_err());
        assert!(contract(props(LAYOUT_NCHW_F32, "probs")).is_err());
        assert_eq!(IoContract::resolve(Some(c), None), c);
        assert!(IoContract::resolve(Some(c), Some(IoContract::default())).is_plain());
    }
}
