//! What every inference backend offers, and reading the model's spec.
//!
//! The spec (classes, palette, normalisation) lives in the ONNX file's `metadata_props`
//! under [`SPEC_METADATA_KEY`]. [`load_spec`] reads it with a tiny protobuf scanner that
//! seeks past the graph instead of decoding it, so it costs a few reads whatever the model
//! size, needs neither ONNX Runtime nor tract, and works in every feature combination.

use std::path::Path;

use ndarray::{Array4, ArrayView4};
use segtool_core::{ModelSpec, SPEC_METADATA_KEY};

use crate::error::{fmt_shape, Result, RuntimeError};
use crate::io_contract::{EngineInput, EngineOutput, IoContract};
use crate::onnx_scan::{fields, ProtoReader, Value};

/// An inference backend holding one loaded model.
///
/// `run` takes `&mut self` because ONNX Runtime's `Session::run` does: one engine per
/// worker thread, no lock on the hot path. `Send` so an engine can move into a worker.
pub trait Engine: Send {
    /// Backend name, e.g. `"onnxruntime"` or `"tract"`.
    fn name(&self) -> &str;
    /// The execution provider actually in use (`"cpu"`, `"cuda:0"`, `"tensorrt:0"`), which
    /// may differ from the one asked for: see [`Engine::fallback_reason`].
    fn provider(&self) -> &str;
    /// `input`: normalised `[N, 3, H, W]`; returns logits `[N, classes, H, W]`.
    fn run(&mut self, input: ArrayView4<f32>) -> Result<Array4<f32>>;
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
    /// Runs a batch in whichever layout the graph takes and returns whatever it outputs
    /// (logits, or a class map for `--argmax` exports). The default handles the plain
    /// contract through [`Engine::run`] and refuses uint8 NHWC input; engines that load
    /// `--preprocess` / `--argmax` exports override it.
    fn run_io(&mut self, input: EngineInput<'_>) -> Result<EngineOutput> {
        match input {
            EngineInput::NchwF32(x) => self.run(x).map(EngineOutput::Logits),
            EngineInput::NhwcU8(x) => Err(RuntimeError::InputShape {
                expected: format!(
                    "f32 [N, 3, H, W] normalised input: the {} engine does not take uint8 \
                     NHWC images (models exported with --preprocess)",
                    self.name()
                ),
                got: format!("uint8 {}", fmt_shape(x.shape())),
            }),
        }
    }
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

/// A class map of any integer type as uint8 (fails on values over 255).
pub(crate) fn mask_to_u8<T: Copy + TryInto<u8>>(
    mask: ndarray::ArrayViewD<T>,
) -> Result<ndarray::Array3<u8>> {
    let mask =
        mask.into_dimensionality::<ndarray::Ix3>()
            .map_err(|e| RuntimeError::OutputShape {
                expected: "class map [N, H, W]".into(),
                got: e.to_string(),
            })?;
    let mut out = ndarray::Array3::<u8>::zeros(mask.dim());
    for (o, &v) in out.iter_mut().zip(mask.iter()) {
        *o = v.try_into().map_err(|_| RuntimeError::OutputShape {
            expected: "class indices below 256 (uint8 masks)".into(),
            got: "a larger class index".into(),
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
    let fits = got.len() == 4
        && got[channel_axis] == 3
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
            expected: "f32 logits (Engine::run); use Engine::run_io for models exported \
                       with --argmax"
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
        Err(RuntimeError::ModelNotFound {
            path: path.to_path_buf(),
        })
    }
}

/// Reads and validates the [`ModelSpec`] stored in an ONNX model's metadata.
pub fn load_spec(path: impl AsRef<Path>) -> Result<ModelSpec> {
    let path = path.as_ref();
    let json = read_metadata(path)?
        .into_iter()
        .find(|(k, _)| k == SPEC_METADATA_KEY)
        .map(|(_, v)| v)
        .ok_or_else(|| RuntimeError::MissingSpec {
            path: path.into(),
            key: SPEC_METADATA_KEY,
        })?;
    ModelSpec::from_json(&json).map_err(|source| RuntimeError::InvalidSpec {
        path: path.into(),
        source,
    })
}

/// All `metadata_props` (key, value) pairs of an ONNX model, in file order.
///
/// Also a cheap structural check: garbage, truncated files and files without a graph are
/// reported as [`RuntimeError::InvalidModel`].
pub fn read_metadata(path: impl AsRef<Path>) -> Result<Vec<(String, String)>> {
    let mut r = ProtoReader::open(path.as_ref())?;
    let mut props = Vec::new();
    let mut has_graph = false;
    while r.pos < r.len {
        let at = r.pos;
        let (field, wire) = r.key()?;
        match wire {
            0 => drop(r.varint()?),
            1 => skip(&mut r, 8)?,
            5 => skip(&mut r, 4)?,
            2 => {
                let n = r.varint()?;
                match field {
                    MODEL_METADATA_PROPS => {
                        // A length past the end is reported by `skip` (truncated file).
                        let entry = if n > r.len - r.pos {
                            skip(&mut r, n).map(|_| Vec::new())?
                        } else {
                            r.read(n)?
                        };
                        props.push(parse_entry(&entry).ok_or_else(|| {
                            r.invalid(format!("malformed metadata_props entry at byte {at}"))
                        })?);
                    }
                    _ => {
                        has_graph |= field == MODEL_GRAPH;
                        skip(&mut r, n)?;
                    }
                }
            }
            w => {
                return Err(r.invalid(format!("not an ONNX protobuf: wire type {w} at byte {at}")));
            }
        }
    }
    if !has_graph {
        return Err(r.invalid("no graph found (empty or not an ONNX model)".into()));
    }
    Ok(props)
}

/// ModelProto field numbers (onnx.proto3).
const MODEL_GRAPH: u64 = 7;
const MODEL_METADATA_PROPS: u64 = 14;

/// Skips `n` bytes, refusing to go past the end of the file.
fn skip(r: &mut ProtoReader, n: u64) -> Result<()> {
    if n > r.len - r.pos {
        return Err(r.invalid(format!(
            "a field at byte {} claims {n} bytes but only {} remain (file truncated?)",
            r.pos,
            r.len - r.pos
        )));
    }
    r.advance(n)
}

/// Decodes a `StringStringEntryProto { key = 1; value = 2; }`.
fn parse_entry(buf: &[u8]) -> Option<(String, String)> {
    let (mut key, mut value) = (String::new(), String::new());
    for (field, v) in fields(buf)? {
        let Value::Bytes(data) = v else {
            return None;
        };
        let s = String::from_utf8(data.to_vec()).ok()?;
        match field {
            1 => key = s,
            2 => value = s,
            _ => {}
        }
    }
    Some((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_model_bytes, tiny_spec};

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
        assert!(matches!(err, RuntimeError::InvalidModel { .. }), "{err}");
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
            Err(RuntimeError::ModelNotFound { .. })
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
