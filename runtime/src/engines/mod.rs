//! What every inference backend offers, and reading the model's spec.
//!
//! The spec (classes, palette, normalisation) lives in the ONNX file's `metadata_props`
//! under `segtool.spec`; `segtool-onnx` reads it with a streaming scanner that seeks past
//! the weights, so it costs a few reads whatever the model size, needs neither ONNX
//! Runtime nor tract, and works in every feature combination.

pub(crate) mod contract_adapter;
pub(crate) mod io_contract;
#[cfg(feature = "openvino")]
pub(crate) mod openvino;
pub mod openvino_options;
#[cfg(feature = "ort")]
pub(crate) mod ort;
pub(crate) mod ort_report;
#[cfg(feature = "tract")]
pub(crate) mod tract;
pub(crate) mod tract_options;

use std::path::Path;

use ndarray::{Array4, ArrayView4};
use segtool_model_spec::ModelSpec;
use segtool_onnx::ModelFile;

use crate::error::{fmt_shape, Result, RuntimeError};
use crate::engines::io_contract::{EngineInput, EngineOutput, IoContract};
use segtool_onnx::ModelFileError;

/// An inference backend holding one loaded model.
///
/// `run` takes `&mut self` because ONNX Runtime's `Session::run` does: one engine per
/// worker thread, no lock on the hot path. `Send` so an engine can move into a worker.
///
/// # Example
///
/// A stand-in model (tests, a backend of your own); a real one comes from
/// `OrtEngine::open`, `TractEngine::open` or `OpenVinoEngine::open`.
///
/// ```
/// use ndarray::Array4;
/// use segtool_runtime::expert::{run_logits, Engine, EngineInput, EngineOutput};
/// use segtool_runtime::{Result, RuntimeError};
/// /// Class 1 scores the red channel, class 0 scores nothing.
/// struct Red;
/// impl Engine for Red {
///     fn name(&self) -> &str { "red" }
///     fn provider(&self) -> &str { "cpu" }
///     fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
///         let EngineInput::NchwF32(x) = input else {
///             let (expected, got) = ("f32 NCHW".into(), "uint8 NHWC".into());
///             return Err(RuntimeError::InputShape { expected, got });
///         };
///         let (n, _, h, w) = x.dim();
///         let red = |(i, c, y, z): (usize, usize, usize, usize)| c as f32 * x[[i, 0, y, z]];
///         Ok(EngineOutput::Logits(Array4::from_shape_fn((n, 2, h, w), red)))
///     }
/// }
/// let logits = run_logits(&mut Red, Array4::from_elem((1, 3, 2, 2), 1.5).view())?;
/// assert_eq!(logits[[0, 1, 0, 0]], 1.5);
/// # Ok::<(), RuntimeError>(())
/// ```
pub trait Engine: Send {
    /// Backend name, e.g. `"onnxruntime"` or `"tract"`.
    fn name(&self) -> &str;
    /// The execution provider actually in use (`"cpu"`, `"cuda:0"`, `"tensorrt:0"`), which
    /// may differ from the one asked for: see [`Engine::fallback_reason`].
    fn provider(&self) -> &str;
    /// Runs a batch in the layout the graph takes (normalised f32 NCHW, or uint8 NHWC for
    /// `--preprocess` exports) and returns what it outputs (logits, or a class map for
    /// `--argmax` exports). An input in the other layout is refused, naming both.
    fn run(&mut self, input: EngineInput<'_>) -> Result<EngineOutput>;
    /// Why the engine runs on another provider than the first one requested, if it does.
    fn fallback_reason(&self) -> Option<&str> {
        None
    }
    /// The graph's input layout and output kind as the engine sees them (element types
    /// and ranks of the first input and output); `None` when the engine cannot tell, in
    /// which case the model's metadata decides (see [`IoContract::resolve`]).
    fn io_contract(&self) -> Option<IoContract> {
        None
    }
    /// What precision the graph's nodes ran in, after a run, when the engine can tell
    /// (OpenVINO: `nodes by precision: bf16 118, f32 9`).
    fn ran_in(&self) -> Option<String> {
        None
    }
}

/// Runs a plain model: normalised `[N, 3, H, W]` in, logits `[N, classes, H, W]` out
/// (an error for a graph that answers a class map).
pub fn run_logits(engine: &mut dyn Engine, input: ArrayView4<f32>) -> Result<Array4<f32>> {
    expect_logits(engine.run(EngineInput::NchwF32(input))?)
}

/// Checks a uint8 NHWC input shape against the model's declared `[N, H, W, 3]`.
pub(crate) fn check_nhwc_shape(got: &[usize], declared: &[Option<usize>]) -> Result<()> {
    check_image_shape(got, declared, 3, ["N", "H", "W", "3"], "uint8", "RGB, NHWC")
}

/// Checks that a class-map output is `[N, h, w]` for a batch of `n`.
pub(crate) fn check_mask_shape(n: usize, output: &[usize]) -> Result<()> {
    if output.len() == 3 && output[0] == n {
        Ok(())
    } else {
        Err(RuntimeError::OutputShape {
            expected: format!("class map [{n}, H, W]"),
            got: fmt_shape(output),
        })
    }
}

/// A class map of any integer type as uint16 (fails on negative values and values over
/// 65535, which no class id can be).
pub(crate) fn mask_to_u16<T: Copy + TryInto<u16>>(
    mask: ndarray::ArrayViewD<T>,
) -> Result<ndarray::Array3<u16>> {
    // `[N, 1, H, W]` (mmdeploy's argmax with keepdims) is `[N, H, W]`.
    let mask = match mask.shape() {
        [_, 1, _, _] => mask.index_axis_move(ndarray::Axis(1), 0),
        _ => mask,
    };
    let mask =
        mask.into_dimensionality::<ndarray::Ix3>()
            .map_err(|e| RuntimeError::OutputShape {
                expected: "class map [N, H, W] or [N, 1, H, W]".into(),
                got: e.to_string(),
            })?;
    let mut out = ndarray::Array3::<u16>::zeros(mask.dim());
    for (o, &v) in out.iter_mut().zip(mask.iter()) {
        *o = v.try_into().map_err(|_| RuntimeError::OutputShape {
            expected: "class indices from 0 to 65535".into(),
            got: "a negative or larger class index".into(),
        })?;
    }
    Ok(out)
}

/// Checks an input shape against the model's declared one (`None` = dynamic dimension).
pub(crate) fn check_input_shape(got: &[usize], declared: &[Option<usize>]) -> Result<()> {
    check_image_shape(
        got,
        declared,
        1,
        ["N", "3", "H", "W"],
        "f32",
        "normalised RGB, NCHW",
    )
}

/// A rank-4 image batch with 3 channels on `channel_axis`, matching every declared
/// (fixed) dimension; the error spells the expected shape with `names` for free ones.
fn check_image_shape(
    got: &[usize],
    declared: &[Option<usize>],
    channel_axis: usize,
    names: [&str; 4],
    dtype: &str,
    layout: &str,
) -> Result<()> {
    // Three colour channels, or what the graph fixes (a one-channel model's card).
    let fits = got.len() == 4
        && (got[channel_axis] == 3 || declared.get(channel_axis) == Some(&Some(got[channel_axis])))
        && got.iter().all(|&d| d > 0)
        && declared
            .iter()
            .zip(got)
            .all(|(d, g)| d.is_none_or(|d| d == *g));
    if fits {
        return Ok(());
    }
    let expected = declared
        .iter()
        .zip(names)
        .map(|(d, name)| d.map_or(name.to_string(), |d| d.to_string()))
        .collect::<Vec<_>>()
        .join(", ");
    Err(RuntimeError::InputShape {
        expected: format!("{dtype} [{expected}] ({layout})"),
        got: fmt_shape(got),
    })
}

/// The logits of an [`Engine::run_io`] result, for [`Engine::run`]; a class map (a model
/// exported with `--argmax`) is an error pointing to `run_io`.
pub(crate) fn expect_logits(out: EngineOutput) -> Result<Array4<f32>> {
    match out {
        EngineOutput::Logits(l) => Ok(l),
        EngineOutput::Mask(_) => Err(RuntimeError::OutputShape {
            expected: "f32 logits (a plain model); models exported with --argmax answer a \
                       class map: drive them through a Segmenter"
                .into(),
            got: "a class map".into(),
        }),
    }
}

/// Checks that an engine's output is `[N, C, h, w]` logits for an `[N, 3, H, W]` input.
pub(crate) fn check_output_shape(input: &[usize], output: &[usize]) -> Result<()> {
    if output.len() == 4 && output[0] == input[0] && output[1] > 0 {
        Ok(())
    } else {
        Err(RuntimeError::OutputShape {
            expected: format!("logits [{}, classes, H, W]", input[0]),
            got: fmt_shape(output),
        })
    }
}

/// Fails with [`RuntimeError::ModelNotFound`] unless `path` is an existing file.
pub(crate) fn ensure_exists(path: &Path) -> Result<()> {
    if path.is_file() {
        Ok(())
    } else {
        Err(RuntimeError::File(ModelFileError::NotFound {
            path: path.to_path_buf(),
        }))
    }
}

/// Reads and validates the [`ModelSpec`] stored in an ONNX model's metadata (with the
/// rest of segtool's metadata: see [`ModelFile::read`], which also returns the graph's
/// I/O and is what [`Segmenter`](crate::Segmenter) opens).
pub fn load_spec(path: impl AsRef<Path>) -> Result<ModelSpec> {
    Ok(ModelFile::read(path)?.metadata.spec)
}

/// All `metadata_props` (key, value) pairs of an ONNX model, in file order.
///
/// Also a cheap structural check: garbage, truncated files and files without a graph are
/// reported as [`RuntimeError::InvalidModel`].
pub fn read_metadata(path: impl AsRef<Path>) -> Result<Vec<(String, String)>> {
    Ok(segtool_onnx::read_props(path)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use segtool_testkit::{tiny_model_bytes, tiny_spec};

    #[test]
    fn spec_roundtrips_through_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.onnx");
        let spec = tiny_spec(3);
        std::fs::write(
            &path,
            tiny_model_bytes(&spec, &[[1.0; 3], [0.0; 3], [-1.0; 3]], &[0.0; 3]),
        )
        .unwrap();
        assert_eq!(load_spec(&path).unwrap(), spec);
    }

    #[test]
    fn garbage_and_truncation_are_invalid_model_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.onnx");
        std::fs::write(&path, b"this is not a model\xff\xff").unwrap();
        let err = load_spec(&path).unwrap_err();
        assert!(
            matches!(err, RuntimeError::File(ModelFileError::Invalid { .. })),
            "{err}"
        );
        assert!(err.to_string().contains("bad.onnx"), "{err}");

        let spec = tiny_spec(2);
        let full = tiny_model_bytes(&spec, &[[1.0; 3], [0.0; 3]], &[0.0; 2]);
        std::fs::write(&path, &full[..full.len() / 2]).unwrap();
        let err = load_spec(&path).unwrap_err();
        assert!(
            err.to_string().contains("truncated") || err.to_string().contains("ends"),
            "{err}"
        );

        let missing = dir.path().join("nope.onnx");
        assert!(matches!(
            load_spec(&missing),
            Err(RuntimeError::File(ModelFileError::NotFound { .. }))
        ));
    }

    #[test]
    fn input_shape_errors_say_expected_and_got() {
        let err = check_input_shape(&[1, 4, 8, 8], &[None, Some(3), None, None]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("[N, 3, H, W]") && msg.contains("[1, 4, 8, 8]"),
            "{msg}"
        );
        assert!(check_input_shape(&[2, 3, 5, 7], &[None, Some(3), None, None]).is_ok());
        assert!(check_input_shape(&[1, 3, 5, 7], &[None, Some(3), Some(8), None]).is_err());
    }
}
