//! Typed, shape-checked access to checkpoint tensors.
//!
//! The exporter states the shape each parameter must have (derived from the spec) and
//! gets f32 values back or an error naming the key; nothing is inferred from the file,
//! so a checkpoint that does not match its own spec can never produce a silently wrong
//! graph.

use safetensors::{Dtype, SafeTensors};

use crate::error::ExportError;

pub struct Weights<'a, 'data> {
    st: &'a SafeTensors<'data>,
}

impl<'a, 'data> Weights<'a, 'data> {
    pub fn new(st: &'a SafeTensors<'data>) -> Self {
        Self { st }
    }

    /// The tensor `key` as f32 values in row-major order; it must have exactly `shape`.
    pub fn f32(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, ExportError> {
        let view = self
            .st
            .tensor(key)
            .map_err(|_| ExportError::MissingTensor {
                key: key.to_string(),
            })?;
        if view.shape() != shape {
            return Err(ExportError::WrongShape {
                key: key.to_string(),
                expected: shape.to_vec(),
                actual: view.shape().to_vec(),
            });
        }
        if view.dtype() != Dtype::F32 {
            return Err(ExportError::WrongDtype {
                key: key.to_string(),
                actual: format!("{:?}", view.dtype()),
            });
        }
        // safetensors stores little-endian; the data slice carries no alignment promise,
        // so decode bytewise rather than casting.
        Ok(view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::tensor::TensorView;

    #[test]
    fn checks_presence_shape_and_dtype() {
        let f: Vec<u8> = [1.5f32, -2.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let i: Vec<u8> = 7i64.to_le_bytes().to_vec();
        let bytes = safetensors::serialize(
            [
                ("a", TensorView::new(Dtype::F32, vec![2], &f).expect("view")),
                ("n", TensorView::new(Dtype::I64, vec![], &i).expect("view")),
            ],
            None,
        )
        .expect("serialize");
        let st = SafeTensors::deserialize(&bytes).expect("deserialize");
        let w = Weights::new(&st);
        assert_eq!(w.f32("a", &[2]).expect("ok"), [1.5, -2.0]);
        let e = w.f32("a", &[1, 2]).unwrap_err().to_string();
        assert!(
            e.contains("`a`") && e.contains("[2]") && e.contains("[1, 2]"),
            "{e}"
        );
        let e = w.f32("b", &[2]).unwrap_err().to_string();
        assert!(e.contains("`b`"), "{e}");
        assert!(matches!(
            w.f32("n", &[]),
            Err(ExportError::WrongDtype { .. })
        ));
    }
}
