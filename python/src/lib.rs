//! `segtool._segtool`: the segtool runtime as a Python extension module (PyO3, abi3).
//!
//! The Python package `segtool` (python/py/segtool) wraps these classes: it finds ONNX
//! Runtime (`SEGTOOL_ORT_LIB`, the `onnxruntime` package's bundled library, the system's)
//! and hands the candidates here, and it sends fallbacks to Python's `logging`. Nothing
//! here prints. Inference runs with the GIL released; waits poll for signals so that
//! Ctrl-C raises `KeyboardInterrupt` promptly.

mod errors;
mod pixels;
mod segmenter;
mod serve;

use numpy::{IntoPyArray, PyArray2, PyArray3};
use pyo3::prelude::*;

use errors::{EngineError, Error, InputError, ModelError, StreamClosedError};

/// Palette rows `(r, g, b)` from a sequence of triples or an `(N, 3)` uint8 array.
fn palette_arg(palette: &Bound<'_, PyAny>) -> PyResult<Vec<[u8; 3]>> {
    if let Ok(arr) = palette.extract::<numpy::PyReadonlyArray2<'_, u8>>() {
        let a = arr.as_array();
        if a.ncols() == 3 && a.nrows() > 0 {
            return Ok(a.outer_iter().map(|r| [r[0], r[1], r[2]]).collect());
        }
    } else if let Ok(rows) = palette.extract::<Vec<(u8, u8, u8)>>() {
        if !rows.is_empty() {
            return Ok(rows.into_iter().map(|(r, g, b)| [r, g, b]).collect());
        }
    }
    Err(errors::input(
        "a palette: a non-empty sequence of (r, g, b) triples of 0..255, or an (N, 3) uint8 array",
        pixels::describe(palette),
    ))
}

/// `colorize(mask, palette)`: an HxWx3 uint8 RGB image, each class in its palette colour
/// (classes past the palette's end wrap around).
#[pyfunction]
fn colorize<'py>(
    py: Python<'py>,
    mask: &Bound<'py, PyAny>,
    palette: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray3<u8>>> {
    let mask = pixels::mask_arg(mask)?;
    let palette = palette_arg(palette)?;
    let img = segtool_runtime::colorize(mask.view(), &palette);
    Ok(pixels::rgb_to_array(img).into_pyarray(py))
}

/// `overlay(img, mask, alpha=0.5, palette=None)`: the mask's colours blended over the
/// RGB image (`alpha` is the mask's weight); `palette=None` is the default palette.
#[pyfunction]
#[pyo3(signature = (img, mask, alpha = 0.5, palette = None))]
fn overlay<'py>(
    py: Python<'py>,
    img: &Bound<'py, PyAny>,
    mask: &Bound<'py, PyAny>,
    alpha: f32,
    palette: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray3<u8>>> {
    if !(0.0..=1.0).contains(&alpha) {
        return Err(errors::input("alpha in [0, 1]", format!("{alpha}")));
    }
    let image = pixels::image_arg(img)?;
    let rgb = pixels::to_rgb_image(image.as_array(), pixels::Color::Rgb);
    let mask = pixels::mask_arg(mask)?;
    let m = mask.view();
    if m.dim() != (rgb.height() as usize, rgb.width() as usize) {
        return Err(errors::input(
            format!(
                "a mask of the image's size {}x{}",
                rgb.height(),
                rgb.width()
            ),
            format!("a mask {}x{}", m.dim().0, m.dim().1),
        ));
    }
    let palette = match palette {
        Some(p) => palette_arg(p)?,
        None => segtool_model_spec::palette::default_palette(
            usize::from(m.iter().max().unwrap_or(0)) + 1,
        ),
    };
    let out = segtool_runtime::overlay(&rgb, m, &palette, alpha);
    Ok(pixels::rgb_to_array(out).into_pyarray(py))
}

/// `default_palette(n)`: the palette segtool gives `n` classes without one of their own.
#[pyfunction]
fn default_palette<'py>(py: Python<'py>, n: usize) -> Bound<'py, PyArray2<u8>> {
    let rows = segtool_model_spec::palette::default_palette(n);
    let flat: Vec<u8> = rows.iter().flatten().copied().collect();
    ndarray::Array2::from_shape_vec((rows.len(), 3), flat)
        .expect("three channels per row")
        .into_pyarray(py)
}

#[pymodule]
fn _segtool(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("ModelError", py.get_type::<ModelError>())?;
    m.add("InputError", py.get_type::<InputError>())?;
    m.add("EngineError", py.get_type::<EngineError>())?;
    m.add("StreamClosedError", py.get_type::<StreamClosedError>())?;
    m.add_class::<segmenter::Segmenter>()?;
    m.add_class::<segmenter::Segmentation>()?;
    m.add_class::<segmenter::Timings>()?;
    m.add_class::<serve::BatchServer>()?;
    m.add_class::<serve::Pending>()?;
    m.add_class::<serve::LiveStream>()?;
    m.add_class::<serve::LiveResult>()?;
    m.add_class::<serve::MultiStream>()?;
    m.add_function(wrap_pyfunction!(colorize, m)?)?;
    m.add_function(wrap_pyfunction!(overlay, m)?)?;
    m.add_function(wrap_pyfunction!(default_palette, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
