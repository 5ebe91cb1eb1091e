//! numpy arrays in and out: checking what Python handed in (dtype, shape), and the
//! runtime's [`Frame`] of an array's pixels (RGB or BGR), which the runtime reads in
//! place.

use image::RgbImage;
use ndarray::{Array3, ArrayView3};
use numpy::{IntoPyArray, PyReadonlyArray2, PyReadonlyArray3};
use pyo3::prelude::*;
use segtool_runtime::{ClassMap, ClassMapView, Frame, FrameError, PixelFormat};

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

/// A class map argument: HxW uint8, or uint16 (a model of more than 256 classes).
pub(crate) enum MaskArg<'py> {
    U8(PyReadonlyArray2<'py, u8>),
    U16(PyReadonlyArray2<'py, u16>),
}

impl MaskArg<'_> {
    /// The ids, as the runtime's colouring takes them.
    pub(crate) fn view(&self) -> ClassMapView<'_> {
        match self {
            MaskArg::U8(m) => m.as_array().into(),
            MaskArg::U16(m) => m.as_array().into(),
        }
    }
}

/// `obj` as an HxW uint8 or uint16 class map.
pub(crate) fn mask_arg<'py>(obj: &Bound<'py, PyAny>) -> PyResult<MaskArg<'py>> {
    if let Ok(m) = obj.extract::<PyReadonlyArray2<'py, u8>>() {
        return Ok(MaskArg::U8(m));
    }
    obj.extract::<PyReadonlyArray2<'py, u16>>()
        .map(MaskArg::U16)
        .map_err(|_| errors::input("an HxW uint8 or uint16 class map", describe(obj)))
}

/// A class map as a numpy array: uint8 for a model of at most 256 classes, uint16 above
/// (the runtime's buffer moved, not copied).
pub(crate) fn class_map_to_array(py: Python<'_>, mask: ClassMap) -> Py<PyAny> {
    match mask {
        ClassMap::U8(m) => m.into_pyarray(py).into_any().unbind(),
        ClassMap::U16(m) => m.into_pyarray(py).into_any().unbind(),
    }
}

/// An HxWx3 array in standard layout as the runtime's [`Frame`] (read in place).
pub(crate) fn frame(view: ArrayView3<'_, u8>, color: Color) -> Result<Frame<'_>, FrameError> {
    let (h, w, _) = view.dim();
    let format = match color {
        Color::Rgb => PixelFormat::Rgb8,
        Color::Bgr => PixelFormat::Bgr8,
    };
    let data = view.to_slice().expect("a standard-layout array");
    Frame::new(data, w as u32, h as u32, 0, format)
}

/// The pixels as an owned RGB image (for the batch server and live streams, which keep
/// frames past the call): the runtime's [`Frame`] of the array's rows (a strided array is
/// packed first).
pub(crate) fn to_rgb_image(view: ArrayView3<u8>, color: Color) -> RgbImage {
    let packed = view.as_standard_layout();
    frame(packed.view(), color)
        .expect("image_arg checked an HxWx3 array with H, W >= 1")
        .to_rgb()
}

/// An owned RGB image as an HxWx3 array (its buffer moved, not copied).
pub(crate) fn rgb_to_array(img: RgbImage) -> Array3<u8> {
    let (w, h) = img.dimensions();
    Array3::from_shape_vec((h as usize, w as usize, 3), img.into_raw()).expect("h * w * 3 bytes")
}
