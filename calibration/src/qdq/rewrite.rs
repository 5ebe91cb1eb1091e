//! [`rewrite`]: a float model into QDQ form, as the module docs of [`crate::qdq`] lay it
//! out. Three steps: where the activation pairs go ([`Placement`]), the nodes and
//! initialisers that carry them and the weights ([`Emitter`]), and the model that holds
//! them ([`Emitter::into_model`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use segtool_onnx::builders::{tensor_f32, tensor_i32, tensor_i8};
use segtool_onnx::proto::{GraphProto, ModelProto, NodeProto, TensorProto};

use super::plan::{consumers, is_default_domain, SHAPE_OPS};
use super::{float_values, graph, node, quantise_bias, quantise_weights, Layout, Plan};
use super::{WeightRange, MIN_QDQ_OPSET};
use crate::CalibrationError;

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
    let cons = consumers(g);
    let placement = Placement::of(g, &cons, plan, &quantised_nodes);
    let threshold = |t: &str| {
        thresholds
            .get(t)
            .copied()
            .ok_or_else(|| CalibrationError::Model(format!("no threshold for {t:?}")))
    };
    let mut out = Emitter::new(plan.layout);
    for (idx, original) in g.node.iter().enumerate() {
        let mut n = original.clone();
        // The activation inputs' pairs: name -> (dequantised name, scale).
        let mut rewired: BTreeMap<String, (String, f32)> = BTreeMap::new();
        for &slot in placement.slots.get(&idx).into_iter().flatten() {
            let name = n.input[slot].clone();
            let pair = match rewired.get(&name) {
                Some(pair) => pair.clone(),
                None => {
                    let src = placement.scale_source(&name);
                    let nonneg = placement.relu_output.contains(name.as_str());
                    out.activation_pair(&name, threshold(src)?, nonneg)
                }
            };
            n.input[slot] = pair.0.clone();
            rewired.insert(name, pair);
        }
        if quantised_nodes.contains(&idx) {
            let weight_slots: Vec<usize> = match n.op_type.as_str() {
                "Conv" => vec![1],
                _ => (0..n.input.len())
                    .filter(|&i| inits.contains_key(original.input[i].as_str()))
                    .collect(),
            };
            for slot in weight_slots {
                let t = inits[original.input[slot].as_str()];
                // MatMul weights: per tensor (axis 0 is not their output channel).
                let pc = per_channel && n.op_type == "Conv";
                n.input[slot] = out.weight(t, pc, weight_range)?;
            }
            // Conv bias: only when this Conv is its sole user and its input is quantised.
            if n.op_type == "Conv" && n.input.len() >= 3 {
                let bias = original.input[2].as_str();
                let sole_user = cons.get(bias).map_or(0, Vec::len) == 1;
                let s_in = rewired.get(&original.input[0]).map(|(_, s)| *s);
                if let (Some(t), Some(s_in), true) = (inits.get(bias), s_in, sole_user) {
                    if let Some(deq) = out.bias(t, &original.input[1], s_in)? {
                        n.input[2] = deq;
                    }
                }
            }
        }
        out.nodes.push(n);
    }
    Ok(out.into_model(model, g, metadata))
}

/// One input of one node read through a Q/DQ pair: what [`rewrite`] writes, as data,
/// so that a model trained with fake quantisation in the loop (segtool-train's QAT)
/// quantises exactly the reads the QDQ file will.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantisedRead {
    /// The consuming node's name.
    pub node: String,
    /// The input slot of `node`.
    pub slot: usize,
    /// The activation tensor read.
    pub tensor: String,
    /// The tensor whose threshold scales the pair: `tensor` itself, or the output of
    /// the Relu that `tensor` feeds (a Conv or Add output whose range is the Relu's).
    pub scale_source: String,
    /// The pair's values cannot be negative (a Relu or softmax output): the layout's
    /// unsigned form ([`Layout::activation`]'s `relu_output`).
    pub nonneg: bool,
}

/// A node whose weight (input 1 of a Conv) is quantised, and whether its bias is
/// quantised too (int32, scale `input scale x weight scale`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QuantisedWeight {
    pub node: String,
    pub weight: String,
    /// The bias initialiser, when [`rewrite`] quantises it (its input is quantised and
    /// the Conv is its only user).
    pub bias: Option<String>,
}

/// What [`rewrite`] quantises for `plan`: every activation read through a Q/DQ pair, in
/// graph order, and every quantised Conv weight (and bias).
pub fn quantised_reads(
    model: &ModelProto,
    plan: &Plan,
) -> Result<(Vec<QuantisedRead>, Vec<QuantisedWeight>), CalibrationError> {
    let g = graph(model)?;
    let inits: HashSet<&str> = g.initializer.iter().map(|t| t.name.as_str()).collect();
    let quantised_nodes: BTreeSet<usize> = plan.nodes.iter().copied().collect();
    let cons = consumers(g);
    let placement = Placement::of(g, &cons, plan, &quantised_nodes);
    let mut reads = Vec::new();
    let mut weights = Vec::new();
    for (idx, n) in g.node.iter().enumerate() {
        let slots = placement.slots.get(&idx);
        for &slot in slots.into_iter().flatten() {
            let tensor = n.input[slot].as_str();
            reads.push(QuantisedRead {
                node: n.name.clone(),
                slot,
                tensor: tensor.to_string(),
                scale_source: placement.scale_source(tensor).to_string(),
                nonneg: placement.relu_output.contains(tensor),
            });
        }
        if quantised_nodes.contains(&idx)
            && n.op_type == "Conv"
            && n.input.len() >= 2
            && inits.contains(n.input[1].as_str())
        {
            let input_quantised = slots.is_some_and(|s| s.contains(&0));
            let bias = n.input.get(2).filter(|b| {
                input_quantised
                    && inits.contains(b.as_str())
                    && cons.get(b.as_str()).map_or(0, Vec::len) == 1
            });
            weights.push(QuantisedWeight {
                node: n.name.clone(),
                weight: n.input[1].clone(),
                bias: bias.cloned(),
            });
        }
    }
    Ok((reads, weights))
}

/// Where the activation Q/DQ pairs go.
struct Placement<'g> {
    /// Tensor -> tensor whose threshold gives its scale.
    scale_source: HashMap<&'g str, &'g str>,
    /// Node index -> input slots read through a Q/DQ pair.
    slots: BTreeMap<usize, BTreeSet<usize>>,
    /// Tensors that cannot be negative: Relu outputs (and, in the ORT CPU layout, what a
    /// MaxPool makes of one).
    relu_output: HashSet<&'g str>,
}

impl<'g> Placement<'g> {
    fn of(
        g: &'g GraphProto,
        cons: &HashMap<&str, Vec<(usize, usize)>>,
        plan: &'g Plan,
        quantised_nodes: &BTreeSet<usize>,
    ) -> Self {
        let acts: HashSet<&str> = plan.activations.iter().map(String::as_str).collect();
        let relu_output = g
            .node
            .iter()
            .filter(|n| n.op_type == "Relu" && is_default_domain(n))
            .flat_map(|n| n.output.iter().map(String::as_str))
            .collect();
        let mut p = Self {
            scale_source: HashMap::new(),
            slots: BTreeMap::new(),
            relu_output,
        };
        for (t, src) in &plan.outputs {
            // Portable: `Conv -> Q -> DQ -> Relu` (exact: zero point 0). ORT CPU: `Conv ->
            // Relu -> Q` over [0, T], which ORT fuses into the Conv.
            let t = match plan.layout.fuses_like_ort_cpu() {
                false => t.as_str(),
                true => src.as_str(),
            };
            p.scale_source.insert(t, src.as_str());
            for &(i, slot) in cons.get(t).map(Vec::as_slice).unwrap_or(&[]) {
                p.slots.entry(i).or_default().insert(slot);
            }
        }
        for &idx in quantised_nodes {
            let n = &g.node[idx];
            for (slot, name) in n.input.iter().enumerate() {
                if acts.contains(name.as_str())
                    && (slot == 0 || n.op_type == "MatMul" || n.op_type == "Add")
                {
                    p.scale_source.entry(name.as_str()).or_insert(name.as_str());
                    p.slots.entry(idx).or_default().insert(slot);
                }
            }
        }
        if plan.layout.fuses_like_ort_cpu() {
            p.share_through_max_pools(g, &acts);
        }
        if plan.layout == Layout::OpenVino {
            p.softmax_outputs_are_nonnegative(g);
        }
        p
    }

    /// ORT CPU: a MaxPool between two quantised tensors gets its input's scale and zero
    /// point on its output too, so that ORT runs `DQ -> MaxPool -> Q` as a uint8 MaxPool
    /// (max commutes with a shared monotone quantisation: exact).
    fn share_through_max_pools(&mut self, g: &'g GraphProto, acts: &HashSet<&str>) {
        for n in g
            .node
            .iter()
            .filter(|n| n.op_type == "MaxPool" && is_default_domain(n))
        {
            let (Some(input), Some(output)) = (n.input.first(), n.output.first()) else {
                continue; // invalid ONNX; ONNX Runtime refused it before this runs
            };
            let (input, output) = (input.as_str(), output.as_str());
            if let (Some(&src), true) = (self.scale_source.get(input), acts.contains(output)) {
                self.scale_source.insert(output, src);
                if self.relu_output.contains(input) {
                    self.relu_output.insert(output);
                }
            }
        }
    }

    /// OpenVINO: a softmax output (and what shape ops make of it) lies in [0, 1], so its
    /// pair takes uint8 over [0, T] like a Relu's.
    fn softmax_outputs_are_nonnegative(&mut self, g: &'g GraphProto) {
        for n in g.node.iter().filter(|n| is_default_domain(n)) {
            let keeps_sign = n.op_type == "Softmax"
                || (SHAPE_OPS.contains(&n.op_type.as_str())
                    && n.input
                        .first()
                        .is_some_and(|i| self.relu_output.contains(i.as_str())));
            if keeps_sign {
                self.relu_output.extend(n.output.iter().map(String::as_str));
            }
        }
    }

    fn scale_source<'n>(&self, name: &'n str) -> &'n str
    where
        'g: 'n,
    {
        self.scale_source.get(name).copied().unwrap_or(name)
    }
}

/// The rewritten graph as it is built: new initialisers, the weights' DequantizeLinear
/// nodes (emitted first), and the graph's own nodes with their inputs rewired.
struct Emitter {
    layout: Layout,
    new_inits: Vec<TensorProto>,
    weight_nodes: Vec<NodeProto>,
    nodes: Vec<NodeProto>,
    /// Float weight -> its dequantised name.
    replaced_weights: BTreeMap<String, String>,
    weight_scales: HashMap<String, Vec<f32>>,
    /// Pairs per activation tensor so far.
    pairs: BTreeMap<String, usize>,
    /// The ORT CPU layout's one pair per tensor: its DQ output and scale.
    shared: HashMap<String, (String, f32)>,
}

impl Emitter {
    fn new(layout: Layout) -> Self {
        Self {
            layout,
            new_inits: Vec::new(),
            weight_nodes: Vec::new(),
            nodes: Vec::new(),
            replaced_weights: BTreeMap::new(),
            weight_scales: HashMap::new(),
            pairs: BTreeMap::new(),
            shared: HashMap::new(),
        }
    }

    /// A Q/DQ pair for activation `name` (threshold from its scale source); returns the
    /// dequantised name and the scale. Pair k > 0 of a tensor gets its own scale
    /// initialiser, k ulps above the calibrated scale: identical QuantizeLinear nodes
    /// would be merged back into one by ORT's constant sharing and common-subexpression
    /// elimination. The ORT CPU layout shares one pair per tensor instead.
    fn activation_pair(&mut self, name: &str, threshold: f32, nonneg: bool) -> (String, f32) {
        if let Some(pair) = self.shared.get(name) {
            return pair.clone();
        }
        let k = self.pairs.entry(name.to_string()).or_insert(0);
        let suffix = match *k {
            0 => String::new(),
            k => format!("_{k}"),
        };
        let (s, z) = (
            format!("{name}_scale{suffix}"),
            format!("{name}_zero_point"),
        );
        let (scale, zero_point) = self.layout.activation(threshold, nonneg, &z);
        let scale = f32::from_bits(scale.to_bits() + *k as u32);
        self.new_inits.push(tensor_f32(s.clone(), &[], &[scale]));
        if *k == 0 {
            self.new_inits.push(zero_point);
        }
        *k += 1;
        let qn = format!("{name}_quantized{suffix}");
        let deq = format!("{name}_dequantized{suffix}");
        self.nodes.push(node(
            "QuantizeLinear",
            format!("{name}_QuantizeLinear{suffix}"),
            [name, &s, &z],
            qn.clone(),
            None,
        ));
        self.nodes.push(node(
            "DequantizeLinear",
            format!("{name}_DequantizeLinear{suffix}"),
            [&qn, &s, &z],
            deq.clone(),
            None,
        ));
        if !self.layout.pair_per_consumer() {
            self.shared.insert(name.to_string(), (deq.clone(), scale));
        }
        (deq, scale)
    }

    /// Weight `t` as int8 behind a DequantizeLinear (per output channel when
    /// `per_channel`), once per weight; returns the dequantised name.
    fn weight(
        &mut self,
        t: &TensorProto,
        per_channel: bool,
        range: WeightRange,
    ) -> Result<String, CalibrationError> {
        let name = &t.name;
        if let Some(deq) = self.replaced_weights.get(name) {
            return Ok(deq.clone());
        }
        let (q, scales) = quantise_weights(&float_values(t)?, &t.dims, per_channel, range);
        let sdims = if per_channel { vec![t.dims[0]] } else { vec![] };
        let zeros = vec![0i8; scales.len()];
        self.new_inits
            .push(tensor_i8(format!("{name}_quantized"), &t.dims, &q));
        self.new_inits
            .push(tensor_f32(format!("{name}_scale"), &sdims, &scales));
        self.new_inits
            .push(tensor_i8(format!("{name}_zero_point"), &sdims, &zeros));
        let deq = self.dequantize(name, per_channel);
        self.weight_scales.insert(name.clone(), scales);
        Ok(deq)
    }

    /// Conv bias `t` as int32 with scale `input_scale * weight_scale`, zero point 0, when
    /// the weight's scales are known and fit; returns the dequantised name.
    fn bias(
        &mut self,
        t: &TensorProto,
        weight: &str,
        input_scale: f32,
    ) -> Result<Option<String>, CalibrationError> {
        let Some(ws) = self.weight_scales.get(weight).cloned() else {
            return Ok(None);
        };
        let b = float_values(t)?;
        if ws.len() != 1 && ws.len() != b.len() {
            return Ok(None);
        }
        let (q, scales) = quantise_bias(&b, input_scale, &ws);
        let pc = scales.len() > 1;
        let sdims = if pc {
            vec![scales.len() as i64]
        } else {
            vec![]
        };
        let name = &t.name;
        self.new_inits
            .push(tensor_i32(format!("{name}_quantized"), &t.dims, &q));
        self.new_inits
            .push(tensor_f32(format!("{name}_scale"), &sdims, &scales));
        self.new_inits.push(tensor_i32(
            format!("{name}_zero_point"),
            &sdims,
            &vec![0; scales.len()],
        ));
        Ok(Some(self.dequantize(name, pc)))
    }

    /// The DequantizeLinear of an initialiser quantised as `<name>_quantized`.
    fn dequantize(&mut self, name: &str, per_channel: bool) -> String {
        let deq = format!("{name}_dequantized");
        self.weight_nodes.push(node(
            "DequantizeLinear",
            format!("{name}_DequantizeLinear"),
            [
                &format!("{name}_quantized"),
                &format!("{name}_scale"),
                &format!("{name}_zero_point"),
            ],
            deq.clone(),
            per_channel.then_some(0),
        ));
        self.replaced_weights.insert(name.to_string(), deq.clone());
        deq
    }

    /// `model` with the rewritten graph: float weights that every user now reads through
    /// DequantizeLinear dropped, the opset raised to [`MIN_QDQ_OPSET`], `metadata` set.
    fn into_model(
        self,
        model: &ModelProto,
        g: &GraphProto,
        metadata: (&str, String),
    ) -> ModelProto {
        let mut m = model.clone();
        let out = m.graph.as_mut().expect("graph checked");
        let still_used: HashSet<&str> = self
            .nodes
            .iter()
            .flat_map(|n| n.input.iter().map(String::as_str))
            .collect();
        let mut initializer: Vec<TensorProto> = g
            .initializer
            .iter()
            .filter(|t| {
                !self.replaced_weights.contains_key(&t.name) || still_used.contains(t.name.as_str())
            })
            .cloned()
            .collect();
        initializer.extend(self.new_inits);
        out.initializer = initializer;
        let mut nodes = self.weight_nodes;
        nodes.extend(self.nodes);
        out.node = nodes;
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
        m
    }
}
