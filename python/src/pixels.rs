//! numpy arrays in and out: checking what Python handed in (dtype, shape), reading images
//! in place (any strides, RGB or BGR), and the model's input built from them without an
//! intermediate copy.

use image::RgbImage;
use ndarray::{Array3, Array4, ArrayView3, ArrayViewMut3, Axis};
use numpy::{PyReadonlyArray2, PyReadonlyArray3};
use pyo3::prelude::*;
use segtool_runtime::{EngineInput, Frame, InputLayout, PixelFormat};
use segtool_spec::ModelSpec;

use crate::errors;

/// The channel order of the arrays handed in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Color {
    Rgb,
    Bgr,
}

impl Color {
    pub(crate) fn parse(s: &str) -> PyResult<Self> {
        match s {
            "rgb" | "RGB" => Ok(Color::Rgb),
            "bgr" | "BGR" => Ok(Color::Bgr),
            other => Err(errors::input(
                "color \"rgb\" or \"bgr\"",
                format!("{other:?}"),
            )),
        }
    }

    /// The array channel holding RGB channel `c`.
    fn source(self, c: usize) -> usize {
        match self {
            Color::Rgb => c,
            Color::Bgr => 2 - c,
        }
    }
}

pub(crate) const IMAGE_EXPECTED: &str =
    "an HxWx3 uint8 numpy array (RGB, or BGR with color=\"bgr\"), H and W at least 1";

/// What `obj` is, for error messages: `a float32 array of shape (32, 48, 3)`.
pub(crate) fn describe(obj: &Bound<'_, PyAny>) -> String {
    let attr = |name: &str| {
        obj.getattr(name)
            .ok()
            .and_then(|v| v.str().ok())
            .map(|s| s.to_string())
    };
    match (attr("dtype"), attr("shape")) {
        (Some(dtype), Some(shape)) => format!("a {dtype} array of shape {shape}"),
        _ => match obj.get_type().name() {
            Ok(name) => format!("a {name}"),
            Err(_) => "an object of unknown type".into(),
        },
    }
}

/// `obj` as a readable HxWx3 uint8 array (no copy), or an [`InputError`](crate::errors::InputError)
/// naming what was expected.
pub(crate) fn image_arg<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray3<'py, u8>> {
    match obj.extract::<PyReadonlyArray3<'py, u8>>() {
        Ok(arr) => {
            let (h, w, c) = arr.as_array().dim();
            if c == 3 && h > 0 && w > 0 {
                Ok(arr)
            } else {
                Err(errors::input(IMAGE_EXPECTED, describe(obj)))
            }
        }
        Err(_) => Err(errors::input(IMAGE_EXPECTED, describe(obj))),
    }
}

/// `obj` as an HxW uint8 class map.
pub(crate) fn mask_arg<'py>(obj: &Bound<'py, PyAny>) -> PyResult<PyReadonlyArray2<'py, u8>> {
    obj.extract::<PyReadonlyArray2<'py, u8>>()
        .map_err(|_| errors::input("an HxW uint8 class map", describe(obj)))
}

/// The pixels as an owned RGB image (for the batch server and live streams, which keep
/// frames past the call): the runtime's [`Frame`] of the array's rows (a strided array is
/// packed first).
pub(crate) fn to_rgb_image(view: ArrayView3<u8>, color: Color) -> RgbImage {
    let (h, w, _) = view.dim();
    let packed = view.as_standard_layout();
    let format = match color {
        Color::Rgb => PixelFormat::Rgb8,
        Color::Bgr => PixelFormat::Bgr8,
    };
    let data = packed.as_slice().expect("a standard-layout array");
    Frame::new(data, w as u32, h as u32, 0, format)
        .expect("image_arg checked an HxWx3 array with H, W >= 1")
        .to_rgb()
}

/// An owned RGB image as an HxWx3 array (its buffer moved, not copied).
pub(crate) fn rgb_to_array(img: RgbImage) -> Array3<u8> {
    let (w, h) = img.dimensions();
    Array3::from_shape_vec((h as usize, w as usize, 3), img.into_raw()).expect("h * w * 3 bytes")
}

/// Per channel and byte value, `(x / 255 - mean) / std`: the runtime's formula, so the
/// values are bit-identical to `segtool infer`'s.
pub(crate) struct Normaliser([[f32; 256]; 3]);

impl Normaliser {
    pub(crate) fn new(spec: &ModelSpec) -> Self {
        let mut t = [[0f32; 256]; 3];
        for (c, row) in t.iter_mut().enumerate() {
            for (x, v) in row.iter_mut().enumerate() {
                *v = (x as f32 / 255.0 - spec.mean[c]) / spec.std[c];
            }
        }
        Self(t)
    }

    /// Writes `img` (HxWx3, any strides) into `out` `(3, H, W)`.
    fn fill(&self, img: ArrayView3<u8>, color: Color, mut out: ArrayViewMut3<f32>) {
        for (c, table) in self.0.iter().enumerate() {
            let src = img.index_axis(Axis(2), color.source(c));
            let mut plane = out.index_axis_mut(Axis(0), c);
            ndarray::Zip::from(&mut plane)
                .and(&src)
                .for_each(|d, &s| *d = table[s as usize]);
        }
    }
}

/// The model's input for same-size images: owned, or borrowing the caller's pixels.
pub(crate) enum Prepared<'a> {
    F32(Array4<f32>),
    U8(Array4<u8>),
    /// One C-contiguous RGB image handed to a `--preprocess` graph as it is.
    Borrowed(ndarray::ArrayView4<'a, u8>),
}

impl Prepared<'_> {
    pub(crate) fn view(&self) -> EngineInput<'_> {
        match self {
            Prepared::F32(x) => EngineInput::NchwF32(x.view()),
            Prepared::U8(x) => EngineInput::NhwcU8(x.view()),
            Prepared::Borrowed(x) => EngineInput::NhwcU8(x.view()),
        }
    }
}

/// Same-size `imgs` in the layout the graph takes: normalised f32 NCHW (read in place,
/// any strides, one pass), or uint8 NHWC (the caller's buffer itself for one contiguous
/// RGB image).
pub(crate) fn prepare<'a>(
    imgs: &[ArrayView3<'a, u8>],
    color: Color,
    layout: InputLayout,
    norm: &Normaliser,
) -> Prepared<'a> {
    let (h, w, _) = imgs[0].dim();
    match layout {
        InputLayout::NchwF32 => {
            let mut out = Array4::zeros((imgs.len(), 3, h, w));
            for (img, slot) in imgs.iter().zip(out.outer_iter_mut()) {
                norm.fill(img.view(), color, slot);
            }
            Prepared::F32(out)
        }
        InputLayout::NhwcU8 => {
            if let [one] = imgs {
                if color == Color::Rgb && one.is_standard_layout() {
                    return Prepared::Borrowed(one.clone().insert_axis(Axis(0)));
                }
            }
            let mut out = Array4::zeros((imgs.len(), h, w, 3));
            for (img, mut slot) in imgs.iter().zip(out.outer_iter_mut()) {
                for c in 0..3 {
                    slot.index_axis_mut(Axis(2), c)
                        .assign(&img.index_axis(Axis(2), color.source(c)));
                }
            }
            Prepared::U8(out)
        }
    }
}
