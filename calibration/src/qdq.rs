//! The QDQ rewrite, laid out so that ONNX Runtime's CPU QDQ selectors fuse it:
//!
//! - Conv (and MatMul) activation inputs read `DequantizeLinear(QuantizeLinear(x))`;
//! - a Conv's output is quantised too (with the scale of the Relu that follows it, if
//!   one does: `Conv -> Q -> DQ -> Relu`, exact since the zero point is 0), unless it
//!   reaches a graph output or an op kept float ([`FLOAT_ONLY`]: Resize, ArgMax, softmax,
//!   attention), so that `DQ(x), DQ(w), DQ(bias) -> Conv -> Q` becomes QLinearConv;
//! - weights are int8 behind DequantizeLinear (per output channel, axis 0, or per
//!   tensor), Conv biases int32 with scale `input_scale * weight_scale`, zero point 0 (as
//!   ONNX Runtime's quantiser and TensorRT do);
//! - in the portable layout, every consumer of a quantised activation gets its own Q/DQ
//!   pair (same scale): ORT's x86 kernels take uint8 activations, and its int8 -> uint8
//!   rewrite (QDQS8ToU8Transformer) only converts a QuantizeLinear with a single
//!   DequantizeLinear consumer; a shared pair leaves the consumers as DQ + float Conv.
//!   The ORT CPU layout writes uint8 itself: one pair per tensor, Relus folded into the
//!   quantised range, Adds quantised ([`Layout`]).
//!
//! What is quantised is the [`plan`]'s choice. Also builds the statistics model (the same
//! graph with the calibrated tensors as extra outputs).
//!
//! Names are derived from the tensor names (`<t>_quantized[_k]`, `<t>_dequantized[_k]`,
//! `<t>_scale`, `<t>_zero_point`) and nodes are emitted in a fixed order, so the same
//! thresholds give byte-identical models.

use std::collections::HashSet;

use segtool_onnx::builders::{self, attr_int};
use segtool_onnx::proto::{ModelProto, NodeProto, TensorProto};

use crate::CalibrationError;

mod constants;
mod layout;
mod plan;
mod quantise;
mod rewrite;

pub use constants::{constants_as_initializers, with_constants_as_initializers};
pub use layout::Layout;
pub use plan::{graph, plan, Plan, FLOAT_ONLY};
pub use quantise::{quantise_bias, quantise_weights, scale_of, WeightRange};
pub use rewrite::{quantised_reads, rewrite, QuantisedRead, QuantisedWeight};

/// Opset needed by per-axis DequantizeLinear.
pub const MIN_QDQ_OPSET: i64 = 13;

pub(crate) use segtool_onnx::builders::float_output;

/// A copy of `model` that also outputs `tensors` (graph inputs and existing outputs are
/// skipped: the caller has them already).
pub fn with_outputs(model: &ModelProto, tensors: &[String]) -> ModelProto {
    let mut m = model.clone();
    let g = m.graph.as_mut().expect("checked by plan");
    let mut present: HashSet<String> = g.output.iter().map(|o| o.name.clone()).collect();
    present.extend(g.input.iter().map(|i| i.name.clone()));
    for t in tensors {
        if present.insert(t.clone()) {
            g.output.push(float_output(t));
        }
    }
    m
}

fn node(op: &str, name: String, inputs: [&str; 3], output: String, axis: Option<i64>) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output],
        name,
        op_type: op.into(),
        attribute: axis.map(|a| attr_int("axis", a)).into_iter().collect(),
        ..Default::default()
    }
}

/// The float values of an initialiser (raw_data or float_data).
pub fn float_values(t: &TensorProto) -> Result<Vec<f32>, CalibrationError> {
    builders::float_values(t).ok_or_else(|| {
        CalibrationError::Model(format!(
            "{:?} is not float32 (or its raw data is cut)",
            t.name
        ))
    })
}
