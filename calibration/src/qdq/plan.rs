//! What the QDQ rewrite quantises ([`plan`]): the activation inputs of Convs and
//! non-attention MatMuls (and with [`Layout::OrtCpu`] and [`Layout::OpenVino`], of Adds;
//! with `OpenVino`, of the attention-weighted sums too), and the outputs of Convs (and
//! Adds) unless they end float. Attention energies and softmax, Resize, ArgMax and the
//! logits stay float: ORT's int8 softmax is slower than its float one, and quantising
//! them costs agreement (both measured against onnxruntime's `quantize_static`, which
//! quantises them).
//!
//! Refuses external-data and non-float32 weights and unknown `--keep-float` names. An
//! invalid graph (nodes without outputs, a cycle of shape ops) gets a plan of what is
//! well formed, never a panic or an endless walk: ONNX Runtime then names what is wrong.

use std::collections::{HashMap, HashSet};

use segtool_onnx::proto::{DataType, GraphProto, ModelProto, NodeProto, TensorProto};

use super::Layout;
use crate::CalibrationError;

/// Ops whose outputs only rearrange their input (followed back to find softmax).
pub(super) const SHAPE_OPS: &[&str] = &[
    "Reshape",
    "Transpose",
    "Flatten",
    "Squeeze",
    "Unsqueeze",
    "Identity",
    "Cast",
];

/// Consumers whose inputs stay float: a Conv output that reaches one of them (directly
/// or through ops that only rearrange their input: Reshape, Transpose, Flatten, Squeeze,
/// Unsqueeze, Identity, Cast) is not quantised.
pub const FLOAT_ONLY: &[&str] = &[
    "Resize",
    "ArgMax",
    "Softmax",
    "LogSoftmax",
    "MultiHeadAttention",
    "Attention",
];

/// What gets quantised.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Integer type of the activations, and so which ops are quantised (Adds with
    /// [`Layout::OrtCpu`]).
    pub layout: Layout,
    /// Activation tensors to calibrate, in graph order (quantised inputs, and the
    /// tensors whose thresholds give the scales of quantised outputs).
    pub activations: Vec<String>,
    /// Indices of the nodes whose inputs are rewritten.
    pub nodes: Vec<usize>,
    /// Outputs of the quantised nodes (the per-layer comparison points of the report).
    pub layer_outputs: Vec<String>,
    /// Conv (and Add) outputs quantised after their producer: (tensor, tensor whose
    /// threshold gives its scale: itself, or the output of the Relu that is its only
    /// consumer, which [`Layout::OrtCpu`] quantises in its place).
    pub outputs: Vec<(String, String)>,
}

pub(super) fn is_default_domain(n: &NodeProto) -> bool {
    n.domain.is_empty() || n.domain == "ai.onnx"
}

pub fn graph(model: &ModelProto) -> Result<&GraphProto, CalibrationError> {
    model
        .graph
        .as_ref()
        .ok_or_else(|| CalibrationError::Model("the model has no graph".into()))
}

/// Consumers of every tensor: (node index, input slot), in graph order.
pub(super) fn consumers(g: &GraphProto) -> HashMap<&str, Vec<(usize, usize)>> {
    let mut c: HashMap<&str, Vec<(usize, usize)>> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for (slot, t) in n.input.iter().enumerate() {
            if !t.is_empty() {
                c.entry(t.as_str()).or_default().push((i, slot));
            }
        }
    }
    c
}

/// Whether `t` is a graph output or reaches a [`FLOAT_ONLY`] op (through [`SHAPE_OPS`]).
fn reaches_float_only(g: &GraphProto, cons: &HashMap<&str, Vec<(usize, usize)>>, t: &str) -> bool {
    let outputs: HashSet<&str> = g.output.iter().map(|o| o.name.as_str()).collect();
    let mut stack = vec![t.to_string()];
    let mut seen = HashSet::new();
    while let Some(t) = stack.pop() {
        if !seen.insert(t.clone()) {
            continue;
        }
        if outputs.contains(t.as_str()) {
            return true;
        }
        for &(i, _) in cons.get(t.as_str()).map(Vec::as_slice).unwrap_or(&[]) {
            let n = &g.node[i];
            if FLOAT_ONLY.contains(&n.op_type.as_str()) {
                return true;
            }
            if SHAPE_OPS.contains(&n.op_type.as_str()) {
                stack.extend(n.output.iter().cloned());
            }
        }
    }
    false
}

/// Element-wise steps between an attention energy and its softmax (CAM's
/// `max(E) - E`, scaling): a MatMul whose output reaches a Softmax through these and
/// [`SHAPE_OPS`] computes energies, which stay float.
const ENERGY_OPS: &[&str] = &[
    "Sub",
    "Neg",
    "Mul",
    "Div",
    "Add",
    "ReduceMax",
    "Max",
    "Expand",
];

/// Whether `t` feeds a Softmax through [`SHAPE_OPS`] and [`ENERGY_OPS`] only.
fn reaches_softmax(g: &GraphProto, cons: &HashMap<&str, Vec<(usize, usize)>>, t: &str) -> bool {
    let mut stack = vec![t.to_string()];
    let mut seen = HashSet::new();
    while let Some(t) = stack.pop() {
        if !seen.insert(t.clone()) {
            continue;
        }
        for &(i, _) in cons.get(t.as_str()).map(Vec::as_slice).unwrap_or(&[]) {
            let op = g.node[i].op_type.as_str();
            if op == "Softmax" || op == "LogSoftmax" {
                return true;
            }
            if SHAPE_OPS.contains(&op) || ENERGY_OPS.contains(&op) {
                stack.extend(g.node[i].output.iter().cloned());
            }
        }
    }
    false
}

/// Chooses the tensors to quantise for `layout`. `keep_float` names nodes left alone.
pub fn plan(
    model: &ModelProto,
    keep_float: &[String],
    layout: Layout,
) -> Result<Plan, CalibrationError> {
    let g = graph(model)?;
    refuse_unreadable(g, keep_float)?;
    let keep: HashSet<&str> = keep_float.iter().map(String::as_str).collect();
    let view = View::new(g);
    let mut plan = Plan {
        layout,
        ..Plan::default()
    };
    let mut seen = HashSet::new();
    for (idx, n) in g.node.iter().enumerate() {
        // A node without outputs (invalid ONNX) has nothing to quantise.
        if !is_default_domain(n) || keep.contains(n.name.as_str()) || n.output.is_empty() {
            continue;
        }
        let Some(acts) = view.quantised_inputs(n, layout) else {
            continue;
        };
        let output = if n.op_type == "MatMul" {
            None
        } else {
            quantised_output(g, &view.cons, &n.output[0])
        };
        if n.op_type == "Add" && output.is_none() {
            continue;
        }
        plan.nodes.push(idx);
        plan.layer_outputs.push(n.output[0].clone());
        for a in acts {
            if seen.insert(a.to_string()) {
                plan.activations.push(a.to_string());
            }
        }
        if let Some((out, source)) = output {
            if seen.insert(source.clone()) {
                plan.activations.push(source.clone());
            }
            plan.outputs.push((out, source));
        }
    }
    Ok(plan)
}

/// Refuses what calibration cannot read (external data, non-float32 weights) and a
/// `--keep-float` name that is not a node of the graph.
fn refuse_unreadable(g: &GraphProto, keep_float: &[String]) -> Result<(), CalibrationError> {
    if let Some(t) = g.initializer.iter().find(|t| !t.external_data.is_empty()) {
        return Err(CalibrationError::Model(format!(
            "initialiser {:?} is stored as external data, which calibration does not read",
            t.name
        )));
    }
    if let Some(t) = g
        .initializer
        .iter()
        .find(|t| t.data_type != DataType::Float as i32 && t.dims.len() >= 2)
    {
        return Err(CalibrationError::Model(format!(
            "weight {:?} is not float32 (fp16 exports cannot be calibrated: export fp32)",
            t.name
        )));
    }
    let names: HashSet<&str> = g.node.iter().map(|n| n.name.as_str()).collect();
    if let Some(missing) = keep_float.iter().find(|k| !names.contains(k.as_str())) {
        return Err(CalibrationError::Model(format!(
            "--keep-float names node {missing:?}, which is not in the graph"
        )));
    }
    Ok(())
}

/// The graph's initialisers, producers and consumers, looked up by tensor name.
struct View<'a> {
    g: &'a GraphProto,
    inits: HashMap<&'a str, &'a TensorProto>,
    producer: HashMap<&'a str, &'a NodeProto>,
    cons: HashMap<&'a str, Vec<(usize, usize)>>,
}

impl<'a> View<'a> {
    fn new(g: &'a GraphProto) -> Self {
        Self {
            g,
            inits: g.initializer.iter().map(|t| (t.name.as_str(), t)).collect(),
            producer: g
                .node
                .iter()
                .flat_map(|n| n.output.iter().map(move |o| (o.as_str(), n)))
                .collect(),
            cons: consumers(g),
        }
    }

    /// Whether `t` comes out of a Softmax through [`SHAPE_OPS`] only. Walks producers
    /// back at most one step per node, so that a file whose shape ops form a cycle (no
    /// valid ONNX graph does) cannot loop forever.
    fn from_softmax(&self, t: &str) -> bool {
        let mut t = t.to_string();
        for _ in 0..=self.g.node.len() {
            match self.producer.get(t.as_str()) {
                Some(n) if n.op_type == "Softmax" || n.op_type == "LogSoftmax" => return true,
                Some(n) if SHAPE_OPS.contains(&n.op_type.as_str()) && !n.input.is_empty() => {
                    t = n.input[0].clone()
                }
                _ => return false,
            }
        }
        false
    }

    /// The activations of `n` to quantise under `layout`; `None`: `n` stays float.
    fn quantised_inputs<'n>(&self, n: &'n NodeProto, layout: Layout) -> Option<Vec<&'n str>> {
        let is_init = |i: &str| self.inits.contains_key(i);
        match n.op_type.as_str() {
            "Conv" if n.input.len() >= 2 && is_init(&n.input[1]) => Some(vec![n.input[0].as_str()]),
            "MatMul" if n.input.len() == 2 => {
                // The energies (into a softmax) stay float, and so does the
                // attention-weighted sum (out of one) except for OpenVINO, whose int8
                // MatMul takes it (NNCF quantises it too).
                let weighted_sum = n.input.iter().any(|i| self.from_softmax(i));
                if (weighted_sum && layout != Layout::OpenVino)
                    || reaches_softmax(self.g, &self.cons, &n.output[0])
                {
                    return None;
                }
                Some(
                    n.input
                        .iter()
                        .map(String::as_str)
                        .filter(|i| !is_init(i))
                        .collect(),
                )
            }
            // A sum of two activations (residuals, DANet's two attention branches), out
            // of attention: QLinearAdd when its output is quantised too.
            "Add"
                if layout.fuses_like_ort_cpu()
                    && n.input.len() == 2
                    && n.input.iter().all(|i| !is_init(i))
                    && !n.input.iter().any(|i| self.from_softmax(i))
                    && !reaches_softmax(self.g, &self.cons, &n.output[0]) =>
            {
                Some(n.input.iter().map(String::as_str).collect())
            }
            _ => None,
        }
    }
}

/// The output `out` of a Conv or Add as quantised: (itself, the tensor whose threshold
/// scales it: the output of a Relu that is its only consumer, else itself); `None` when
/// it ends float (unused, a graph output, or reaching a [`FLOAT_ONLY`] op).
fn quantised_output(
    g: &GraphProto,
    cons: &HashMap<&str, Vec<(usize, usize)>>,
    out: &str,
) -> Option<(String, String)> {
    let users = cons.get(out).map(Vec::as_slice).unwrap_or(&[]);
    let source = match users {
        [(r, 0)]
            if g.node[*r].op_type == "Relu"
                && is_default_domain(&g.node[*r])
                && !g.node[*r].output.is_empty()
                && !g.output.iter().any(|o| o.name == out) =>
        {
            g.node[*r].output[0].as_str()
        }
        _ => out,
    };
    if users.is_empty() || reaches_float_only(g, cons, out) || reaches_float_only(g, cons, source) {
        return None;
    }
    Some((out.to_string(), source.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdq::float_output;

    fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            name: name.into(),
            input: inputs.iter().map(|s| s.to_string()).collect(),
            output: outputs.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn attention_matmuls_stay_float() {
        // CAM-like: E = X X^T, max(E) - E, softmax, A X; then a projection MatMul.
        let graph = GraphProto {
            node: vec![
                node("MatMul", "energy", &["x", "xt"], &["e"]),
                node("ReduceMax", "max", &["e"], &["m"]),
                node("Sub", "flip", &["m", "e"], &["d"]),
                node("Softmax", "softmax", &["d"], &["a"]),
                node("MatMul", "weighted", &["a", "x"], &["y"]),
                node("MatMul", "project", &["y", "p"], &["out"]),
            ],
            output: vec![float_output("out")],
            ..Default::default()
        };
        let model = ModelProto {
            graph: Some(graph),
            ..Default::default()
        };
        let plan = plan(&model, &[], Layout::OrtCpu).unwrap();
        let names: Vec<&str> = plan
            .nodes
            .iter()
            .map(|&i| model.graph.as_ref().unwrap().node[i].name.as_str())
            .collect();
        assert_eq!(names, ["project"]);
    }

    #[test]
    fn invalid_graphs_end_in_a_plan_not_a_panic_or_a_hang() {
        let weight = TensorProto {
            name: "w".into(),
            dims: vec![1, 1, 1, 1],
            data_type: DataType::Float as i32,
            float_data: vec![1.0],
            ..Default::default()
        };
        let model = |nodes: Vec<NodeProto>| ModelProto {
            graph: Some(GraphProto {
                node: nodes,
                initializer: vec![weight.clone()],
                output: vec![float_output("y")],
                ..Default::default()
            }),
            ..Default::default()
        };
        // A Conv without outputs; a Relu without outputs as a Conv's only consumer; a
        // Reshape that is its own input, in front of a MatMul (the walk back to a Softmax).
        let cases = [
            vec![node("Conv", "c", &["x", "w"], &[])],
            vec![
                node("Conv", "c", &["x", "w"], &["c"]),
                node("Relu", "r", &["c"], &[]),
            ],
            vec![
                node("Reshape", "r", &["a", "s"], &["a"]),
                node("MatMul", "m", &["a", "x"], &["y"]),
            ],
        ];
        for nodes in cases {
            for layout in [Layout::Portable, Layout::OrtCpu, Layout::OpenVino] {
                assert!(plan(&model(nodes.clone()), &[], layout).is_ok());
            }
        }
    }
}
