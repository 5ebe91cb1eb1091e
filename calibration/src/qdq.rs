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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use segtool_onnx::builders::{self, attr_int, tensor_f32, tensor_i32, tensor_i8};
use segtool_onnx::proto::{ModelProto, NodeProto, TensorProto};

use crate::CalibrationError;

mod layout;
mod plan;
mod quantise;

pub use layout::Layout;
use plan::{consumers, is_default_domain};
pub use plan::{graph, plan, Plan, FLOAT_ONLY};
pub use quantise::{quantise_bias, quantise_weights, scale_of, WeightRange};

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

/// Rewrites `model` into QDQ form. `thresholds` holds every activation of `plan`.
pub fn rewrite(
    model: &ModelProto,
    plan: &Plan,
    thresholds: &BTreeMap<String, f32>,
    per_channel: bool,
    weight_range: WeightRange,
    metadata: (&str, String),
) -> Result<ModelProto, CalibrationError> {
    let g = graph(model)?;
    let inits: HashMap<&str, &TensorProto> =
        g.initializer.iter().map(|t| (t.name.as_str(), t)).collect();
    let quantised_nodes: BTreeSet<usize> = plan.nodes.iter().copied().collect();
    let acts: HashSet<&str> = plan.activations.iter().map(String::as_str).collect();
    let cons = consumers(g);
    let layout = plan.layout;
    // Tensors that cannot be negative: Relu outputs (and, in the ORT CPU layout, what a
    // MaxPool makes of one; see below).
    let mut relu_output: HashSet<&str> = g
        .node
        .iter()
        .filter(|n| n.op_type == "Relu" && is_default_domain(n))
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let threshold = |t: &str| {
        thresholds
            .get(t)
            .copied()
            .ok_or_else(|| CalibrationError::Model(format!("no threshold for {t:?}")))
    };
    // Tensor -> tensor whose threshold gives its scale.
    let mut scale_source: HashMap<&str, &str> = HashMap::new();
    // Node index -> input slots read through a dedicated Q/DQ pair.
    let mut slots: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    for (t, src) in &plan.outputs {
        // Portable: `Conv -> Q -> DQ -> Relu` (exact: zero point 0). ORT CPU: `Conv ->
        // Relu -> Q` over [0, T], which ORT fuses into the Conv.
        let t = match layout {
            Layout::Portable => t.as_str(),
            Layout::OrtCpu => src.as_str(),
        };
        scale_source.insert(t, src.as_str());
        for &(i, slot) in cons.get(t).map(Vec::as_slice).unwrap_or(&[]) {
            slots.entry(i).or_default().insert(slot);
        }
    }
    for &idx in &quantised_nodes {
        let n = &g.node[idx];
        for (slot, name) in n.input.iter().enumerate() {
            if acts.contains(name.as_str())
                && (slot == 0 || n.op_type == "MatMul" || n.op_type == "Add")
            {
                scale_source.entry(name.as_str()).or_insert(name.as_str());
                slots.entry(idx).or_default().insert(slot);
            }
        }
    }
    // ORT CPU: a MaxPool between two quantised tensors gets its input's scale and zero
    // point on its output too, so that ORT runs `DQ -> MaxPool -> Q` as a uint8 MaxPool
    // (max commutes with a shared monotone quantisation: exact).
    if layout == Layout::OrtCpu {
        for n in g
            .node
            .iter()
            .filter(|n| n.op_type == "MaxPool" && is_default_domain(n))
        {
            let (Some(input), Some(output)) = (n.input.first(), n.output.first()) else {
                continue; // invalid ONNX; ONNX Runtime refused it before this runs
            };
            let (input, output) = (input.as_str(), output.as_str());
            if let (Some(&src), true) = (scale_source.get(input), acts.contains(output)) {
                scale_source.insert(output, src);
                if relu_output.contains(input) {
                    relu_output.insert(output);
                }
            }
        }
    }
    let bias_uses = |name: &str| cons.get(name).map_or(0, Vec::len);

    let mut new_inits: Vec<TensorProto> = Vec::new();
    let mut weight_nodes: Vec<NodeProto> = Vec::new();
    let mut replaced_weights: BTreeMap<String, String> = BTreeMap::new();
    let mut weight_scales: HashMap<String, Vec<f32>> = HashMap::new();
    let mut nodes: Vec<NodeProto> = Vec::new();
    // Activation scale/zero point initialisers written, and pairs per tensor so far.
    let mut pairs: BTreeMap<String, usize> = BTreeMap::new();
    // The ORT CPU layout's one pair per tensor: its DQ output and scale.
    let mut shared: HashMap<String, (String, f32)> = HashMap::new();

    for (idx, n) in g.node.iter().enumerate() {
        let mut n = n.clone();
        // Dedicated Q/DQ pairs for the activation inputs (one per tensor per node). Pair
        // k > 0 of a tensor gets its own scale initialiser, k ulps above the calibrated
        // scale: identical QuantizeLinear nodes would be merged back into one by ORT's
        // constant sharing and common-subexpression elimination.
        let mut rewired: BTreeMap<String, (String, f32)> = BTreeMap::new();
        for &slot in slots.get(&idx).into_iter().flatten() {
            let name = n.input[slot].clone();
            if let Some((deq, _)) = rewired.get(&name) {
                n.input[slot] = deq.clone();
                continue;
            }
            if let Some(pair) = shared.get(&name) {
                n.input[slot] = pair.0.clone();
                rewired.insert(name, pair.clone());
                continue;
            }
            let src = scale_source
                .get(name.as_str())
                .copied()
                .unwrap_or(name.as_str());
            let k = pairs.entry(name.clone()).or_insert(0);
            let suffix = if *k == 0 {
                String::new()
            } else {
                format!("_{k}")
            };
            let (s, z) = (
                format!("{name}_scale{suffix}"),
                format!("{name}_zero_point"),
            );
            let (scale, zero_point) =
                layout.activation(threshold(src)?, relu_output.contains(name.as_str()), &z);
            let scale = f32::from_bits(scale.to_bits() + *k as u32);
            new_inits.push(tensor_f32(s.clone(), &[], &[scale]));
            if *k == 0 {
                new_inits.push(zero_point);
            }
            *k += 1;
            let qn = format!("{name}_quantized{suffix}");
            let deq = format!("{name}_dequantized{suffix}");
            nodes.push(node(
                "QuantizeLinear",
                format!("{name}_QuantizeLinear{suffix}"),
                [&name, &s, &z],
                qn.clone(),
                None,
            ));
            nodes.push(node(
                "DequantizeLinear",
                format!("{name}_DequantizeLinear{suffix}"),
                [&qn, &s, &z],
                deq.clone(),
                None,
            ));
            if !layout.pair_per_consumer() {
                shared.insert(name.clone(), (deq.clone(), scale));
            }
            rewired.insert(name, (deq.clone(), scale));
            n.input[slot] = deq;
        }
        if !quantised_nodes.contains(&idx) {
            nodes.push(n);
            continue;
        }
        let original = &g.node[idx];
        let weight_slots: Vec<usize> = match n.op_type.as_str() {
            "Conv" => vec![1],
            _ => (0..n.input.len())
                .filter(|&i| inits.contains_key(original.input[i].as_str()))
                .collect(),
        };
        for &slot in &weight_slots {
            let name = original.input[slot].clone();
            let deq = format!("{name}_dequantized");
            if !replaced_weights.contains_key(&name) {
                let t = inits[name.as_str()];
                let w = float_values(t)?;
                // MatMul weights: per tensor (axis 0 is not their output channel).
                let pc = per_channel && n.op_type == "Conv";
                let (q, scales) = quantise_weights(&w, &t.dims, pc, weight_range);
                let sdims = if pc { vec![t.dims[0]] } else { vec![] };
                new_inits.push(tensor_i8(format!("{name}_quantized"), &t.dims, &q));
                new_inits.push(tensor_f32(format!("{name}_scale"), &sdims, &scales));
                new_inits.push(tensor_i8(
                    format!("{name}_zero_point"),
                    &sdims,
                    &vec![0i8; scales.len()],
                ));
                weight_nodes.push(node(
                    "DequantizeLinear",
                    format!("{name}_DequantizeLinear"),
                    [
                        &format!("{name}_quantized"),
                        &format!("{name}_scale"),
                        &format!("{name}_zero_point"),
                    ],
                    deq.clone(),
                    pc.then_some(0),
                ));
                replaced_weights.insert(name.clone(), deq.clone());
                weight_scales.insert(name.clone(), scales);
            }
            n.input[slot] = deq;
        }
        // Conv bias: int32, scale input_scale * weight_scale (only when this Conv is its
        // sole user, its input is quantised and its weight scales are known).
        if n.op_type == "Conv" && n.input.len() >= 3 {
            let bias = original.input[2].clone();
            let w_scales = weight_scales.get(&original.input[1]).cloned();
            let s_in = rewired.get(&original.input[0]).map(|(_, s)| *s);
            if let (Some(t), Some(ws), Some(s_in), true) = (
                inits.get(bias.as_str()),
                w_scales,
                s_in,
                bias_uses(&bias) == 1,
            ) {
                let b = float_values(t)?;
                if ws.len() == 1 || ws.len() == b.len() {
                    let (q, scales) = quantise_bias(&b, s_in, &ws);
                    let pc = scales.len() > 1;
                    let sdims = if pc {
                        vec![scales.len() as i64]
                    } else {
                        vec![]
                    };
                    let deq = format!("{bias}_dequantized");
                    new_inits.push(tensor_i32(format!("{bias}_quantized"), &t.dims, &q));
                    new_inits.push(tensor_f32(format!("{bias}_scale"), &sdims, &scales));
                    new_inits.push(tensor_i32(
                        format!("{bias}_zero_point"),
                        &sdims,
                        &vec![0; scales.len()],
                    ));
                    weight_nodes.push(node(
                        "DequantizeLinear",
                        format!("{bias}_DequantizeLinear"),
                        [
                            &format!("{bias}_quantized"),
                            &format!("{bias}_scale"),
                            &format!("{bias}_zero_point"),
                        ],
                        deq.clone(),
                        pc.then_some(0),
                    ));
                    replaced_weights.insert(bias.clone(), deq.clone());
                    n.input[2] = deq;
                }
            }
        }
        nodes.push(n);
    }

    let mut m = model.clone();
    let out = m.graph.as_mut().expect("graph checked");
    // Float weights that every user now reads through DequantizeLinear are dropped.
    let still_used: HashSet<&str> = nodes
        .iter()
        .flat_map(|n| n.input.iter().map(String::as_str))
        .collect();
    let mut initializer: Vec<TensorProto> = g
        .initializer
        .iter()
        .filter(|t| !replaced_weights.contains_key(&t.name) || still_used.contains(t.name.as_str()))
        .cloned()
        .collect();
    initializer.extend(new_inits);
    out.initializer = initializer;
    weight_nodes.extend(nodes);
    out.node = weight_nodes;
    match m
        .opset_import
        .iter_mut()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
    {
        Some(o) => o.version = o.version.max(MIN_QDQ_OPSET),
        None => m
            .opset_import
            .push(segtool_onnx::proto::OperatorSetIdProto {
                domain: String::new(),
                version: MIN_QDQ_OPSET,
            }),
    }
    let (key, value) = metadata;
    m.metadata_props.retain(|e| e.key != key);
    m.metadata_props
        .push(segtool_onnx::proto::StringStringEntryProto {
            key: key.to_string(),
            value,
        });
    Ok(m)
}
