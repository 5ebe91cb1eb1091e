//! Layer by layer comparison of two exports of one checkpoint (fp32 vs INT8 or fp16, or
//! two targets): a copy of each graph exposes every float tensor that both compute under
//! the same name (segtool's exports name values after the checkpoint modules, and the
//! QDQ rewrite keeps the float graph's names, adding `<t>_quantized` / `<t>_dequantized`
//! beside them), both run in ONNX Runtime (CPU) on the same images, and each shared
//! tensor gets the cosine similarity, SNR and max abs difference of B against A, in A's
//! graph order. FLOAT16 tensors are Cast to float32 in the copy before they are exposed.
//!
//! Exposing a tensor keeps ONNX Runtime from fusing across it (an INT8 Conv's float
//! output is then computed, where the deployed model runs QLinearConv), so the figures
//! describe the graph's arithmetic, tensor by tensor, not the fused kernels' exact bits.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;

use prost::Message;
use segtool_onnx::proto::{
    type_proto, AttributeProto, DataType, GraphProto, ModelProto, NodeProto, ValueInfoProto,
};

use crate::session::OrtModel;
use crate::similarity::Similarity;
use crate::{for_each_batch, qdq, CalibrationError, Feed};

/// Element type of every value of `g` that can be told from the graph alone: inputs,
/// initialisers, value_info, then per node (Cast's `to`, Shape/ArgMax int64,
/// QuantizeLinear its zero point's type, DequantizeLinear its scale's, comparisons bool,
/// everything else its first typed input's). Enough for segtool's exports and their QDQ
/// and fp16 forms; a value whose type stays unknown is left out.
pub fn elem_types(g: &GraphProto) -> HashMap<String, i32> {
    let mut t: HashMap<String, i32> = HashMap::new();
    let vi_type = |v: &ValueInfoProto| match v.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(tt)) if tt.elem_type != 0 => Some(tt.elem_type),
        _ => None,
    };
    for v in g.input.iter().chain(&g.value_info).chain(&g.output) {
        if let Some(e) = vi_type(v) {
            t.insert(v.name.clone(), e);
        }
    }
    for i in &g.initializer {
        t.insert(i.name.clone(), i.data_type);
    }
    let int = |a: &[AttributeProto], n: &str| a.iter().find(|x| x.name == n).and_then(|x| x.i);
    for n in &g.node {
        let input = |k: usize| n.input.get(k).and_then(|x| t.get(x)).copied();
        let first = || n.input.iter().find_map(|x| t.get(x).copied());
        let e = match n.op_type.as_str() {
            "Cast" => int(&n.attribute, "to").map(|v| v as i32),
            "Shape" | "Size" | "ArgMax" | "ArgMin" | "NonZero" => Some(DataType::Int64 as i32),
            "Where" => input(1),
            "QuantizeLinear" => input(2).or(Some(DataType::Uint8 as i32)),
            "DequantizeLinear" => input(1),
            "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" | "Not" | "And"
            | "Or" | "IsNaN" | "IsInf" => Some(DataType::Bool as i32),
            "Constant" => n
                .attribute
                .iter()
                .find(|a| a.name == "value")
                .and_then(|a| a.t.as_ref())
                .map(|x| x.data_type),
            _ => first(),
        };
        if let Some(e) = e {
            for o in n.output.iter().filter(|o| !o.is_empty()) {
                t.entry(o.clone()).or_insert(e);
            }
        }
    }
    t
}

fn is_float(e: i32) -> bool {
    e == DataType::Float as i32 || e == DataType::Float16 as i32
}

/// Suffix of the float32 copies of exposed FLOAT16 tensors.
pub const AS_F32_SUFFIX: &str = "__segtool_f32";

/// A copy of `model` that outputs each of `tensors` as float32 (FLOAT16 ones through a
/// Cast), and the output name each tensor can be read under.
pub fn expose(
    model: &ModelProto,
    tensors: &[String],
) -> Result<(ModelProto, BTreeMap<String, String>), CalibrationError> {
    let mut m = model.clone();
    let types = elem_types(qdq::graph(model)?);
    let g = m.graph.as_mut().expect("checked");
    let mut present: HashSet<String> = g.output.iter().map(|o| o.name.clone()).collect();
    let mut names = BTreeMap::new();
    for t in tensors {
        let e = types.get(t).copied().unwrap_or(0);
        if e == DataType::Float16 as i32 {
            let out = format!("{t}{AS_F32_SUFFIX}");
            g.node.push(NodeProto {
                input: vec![t.clone()],
                output: vec![out.clone()],
                name: out.clone(),
                op_type: "Cast".into(),
                attribute: vec![segtool_onnx::builders::attr_int("to", DataType::Float as i64)],
                ..Default::default()
            });
            g.output.push(qdq::float_output(&out));
            names.insert(t.clone(), out);
        } else if e == DataType::Float as i32 {
            if present.insert(t.clone()) {
                g.output.push(qdq::float_output(t));
            }
            names.insert(t.clone(), t.clone());
        }
    }
    Ok((m, names))
}

/// The float tensors both graphs compute (node outputs, not graph inputs), in `a`'s
/// graph order, with the op that produces each in `a`.
pub fn shared_tensors(
    a: &ModelProto,
    b: &ModelProto,
) -> Result<Vec<(String, String)>, CalibrationError> {
    let (ga, gb) = (qdq::graph(a)?, qdq::graph(b)?);
    let (ta, tb) = (elem_types(ga), elem_types(gb));
    let in_b: HashSet<&str> = gb
        .node
        .iter()
        .flat_map(|n| n.output.iter().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    for n in &ga.node {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            let float = |t: &HashMap<String, i32>| t.get(o).copied().is_some_and(is_float);
            if in_b.contains(o.as_str()) && float(&ta) && float(&tb) {
                out.push((o.clone(), n.op_type.clone()));
            }
        }
    }
    Ok(out)
}

/// One shared tensor: B against A.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerDiff {
    pub name: String,
    /// The op that computes it in A.
    pub op: String,
    /// Shape in the first image.
    pub shape: Vec<usize>,
    pub cosine: f64,
    /// `10 log10(sum a^2 / sum (a - b)^2)`, capped at 200 dB (as the calibration report).
    pub snr_db: f64,
    pub max_abs_diff: f64,
    /// `max |a|`, to read the difference against.
    pub max_abs: f64,
}

/// Options of [`compare_models`].
#[derive(Clone, Debug)]
pub struct CompareOptions {
    /// Images compared (the first of the list).
    pub samples: usize,
    /// A layer is past the tolerance when its max abs difference exceeds this...
    pub tol: f64,
    /// ...or its SNR is below this (dB), when set...
    pub min_snr_db: Option<f64>,
    /// ...or its cosine similarity below this, when set.
    pub min_cosine: Option<f64>,
    pub threads: Option<usize>,
}

impl Default for CompareOptions {
    fn default() -> Self {
        Self {
            samples: 8,
            tol: 1e-4,
            min_snr_db: None,
            min_cosine: None,
            threads: None,
        }
    }
}

/// Result of [`compare_models`].
#[derive(Clone, Debug)]
pub struct Comparison {
    pub samples: usize,
    /// Shared tensors, in A's graph order.
    pub layers: Vec<LayerDiff>,
    /// Shared names whose shapes differ (not compared), with both shapes.
    pub shape_mismatch: Vec<(String, Vec<usize>, Vec<usize>)>,
    /// Index in `layers` of the first layer past the tolerance.
    pub first_past: Option<usize>,
    pub tol: f64,
    pub min_snr_db: Option<f64>,
    pub min_cosine: Option<f64>,
    /// Float tensors computed by only one of the two graphs.
    pub only_a: usize,
    pub only_b: usize,
}

/// Runs `a` and `b` on the first `opts.samples` of `images` (prepared by `feed`, one
/// image per run) with every shared float tensor exposed.
pub fn compare_models(
    a: &ModelProto,
    b: &ModelProto,
    images: &[PathBuf],
    feed: &Feed,
    opts: &CompareOptions,
) -> Result<Comparison, CalibrationError> {
    let shared = shared_tensors(a, b)?;
    let names: Vec<String> = shared.iter().map(|(n, _)| n.clone()).collect();
    let count_float_outputs = |m: &ModelProto| -> Result<usize, CalibrationError> {
        let g = qdq::graph(m)?;
        let t = elem_types(g);
        Ok(g.node
            .iter()
            .flat_map(|n| n.output.iter())
            .filter(|o| t.get(*o).copied().is_some_and(is_float))
            .count())
    };
    let (only_a, only_b) = (
        count_float_outputs(a)? - names.len(),
        count_float_outputs(b)? - names.len(),
    );
    let (ma, na) = expose(a, &names)?;
    let (mb, nb) = expose(b, &names)?;
    let mut sa = OrtModel::new(&ma.encode_to_vec(), opts.threads)?;
    let mut sb = OrtModel::new(&mb.encode_to_vec(), opts.threads)?;
    let images = &images[..images.len().min(opts.samples.max(1))];
    let mut acc: Vec<Similarity> = names.iter().map(|_| Similarity::default()).collect();
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; names.len()];
    let mut mismatch: BTreeMap<String, (Vec<usize>, Vec<usize>)> = BTreeMap::new();
    for_each_batch(images, feed, 1, |x, _| {
        let oa = sa.run(x.view(), &[])?;
        let ob = sb.run(x.view(), &[])?;
        for (i, t) in names.iter().enumerate() {
            let (Some(u), Some(v)) = (oa.get(&na[t]), ob.get(&nb[t])) else {
                continue;
            };
            if u.shape() != v.shape() {
                mismatch
                    .entry(t.clone())
                    .or_insert_with(|| (u.shape().to_vec(), v.shape().to_vec()));
                continue;
            }
            shapes[i].get_or_insert_with(|| u.shape().to_vec());
            let (u, v) = (u.as_standard_layout(), v.as_standard_layout());
            acc[i].add(
                u.as_slice().expect("standard layout"),
                v.as_slice().expect("standard layout"),
            );
        }
        Ok(())
    })?;
    let mut layers = Vec::new();
    for (i, ((name, op), s)) in shared.into_iter().zip(acc).enumerate() {
        if mismatch.contains_key(&name) {
            continue;
        }
        let Some(shape) = shapes[i].take() else {
            continue;
        };
        let (snr_db, cosine) = (s.snr_db(), s.cosine());
        layers.push(LayerDiff {
            name,
            op,
            shape,
            cosine,
            snr_db,
            max_abs_diff: s.max_abs_diff(),
            max_abs: s.max_abs(),
        });
    }
    let mut c = Comparison {
        samples: images.len(),
        layers,
        shape_mismatch: mismatch.into_iter().map(|(n, (x, y))| (n, x, y)).collect(),
        first_past: None,
        tol: opts.tol,
        min_snr_db: opts.min_snr_db,
        min_cosine: opts.min_cosine,
        only_a,
        only_b,
    };
    c.first_past = c.layers.iter().position(|l| c.past(l));
    Ok(c)
}

impl Comparison {
    /// Whether `l` is past the tolerance.
    pub fn past(&self, l: &LayerDiff) -> bool {
        !(l.max_abs_diff <= self.tol)
            || self.min_snr_db.is_some_and(|m| l.snr_db < m)
            || self.min_cosine.is_some_and(|m| !(l.cosine >= m))
    }

    pub fn first_past(&self) -> Option<&LayerDiff> {
        self.first_past.map(|i| &self.layers[i])
    }

    /// Whether every compared layer is within the tolerance.
    pub fn all_within(&self) -> bool {
        self.first_past.is_none()
    }

    /// Layers by ascending SNR (worst first; ties by name), as the calibration report
    /// ranks them.
    pub fn worst(&self, n: usize) -> Vec<&LayerDiff> {
        let mut v: Vec<&LayerDiff> = self.layers.iter().collect();
        v.sort_by(|a, b| {
            a.snr_db
                .total_cmp(&b.snr_db)
                .then_with(|| a.name.cmp(&b.name))
        });
        v.truncate(n);
        v
    }

    pub fn to_json(&self) -> serde_json::Value {
        let layer = |l: &LayerDiff| {
            serde_json::json!({
                "name": l.name,
                "op": l.op,
                "shape": l.shape,
                "cosine": l.cosine,
                "snr_db": l.snr_db,
                "max_abs_diff": finite_or_null(l.max_abs_diff),
                "max_abs": l.max_abs,
                "past_tolerance": self.past(l),
            })
        };
        serde_json::json!({
            "samples": self.samples,
            "tolerance": {
                "max_abs_diff": finite_or_null(self.tol),
                "min_snr_db": self.min_snr_db,
                "min_cosine": self.min_cosine,
            },
            "first_past_tolerance": self.first_past().map(|l| l.name.clone()),
            "all_within_tolerance": self.all_within(),
            "layers": self.layers.iter().map(layer).collect::<Vec<_>>(),
            "worst_layers": self.worst(5).into_iter().map(|l| l.name.clone()).collect::<Vec<_>>(),
            "shape_mismatch": self.shape_mismatch.iter().map(|(n, a, b)| serde_json::json!({"name": n, "a": a, "b": b})).collect::<Vec<_>>(),
            "only_in_a": self.only_a,
            "only_in_b": self.only_b,
        })
    }

    pub fn to_text(&self) -> String {
        let w = self
            .layers
            .iter()
            .map(|l| l.name.len())
            .max()
            .unwrap_or(5)
            .clamp(5, 48);
        let mut s = format!(
            "{} shared tensors compared on {} image(s) ({} only in A, {} only in B)\n",
            self.layers.len(),
            self.samples,
            self.only_a,
            self.only_b
        );
        s += &format!(
            "  {:<w$} {:<18} {:>10} {:>9} {:>12} {:>10}\n",
            "layer", "op", "cosine", "SNR dB", "max|diff|", "max|A|"
        );
        for (i, l) in self.layers.iter().enumerate() {
            let mark = if Some(i) == self.first_past {
                '>'
            } else if self.past(l) {
                '*'
            } else {
                ' '
            };
            s += &format!(
                "{mark} {:<w$} {:<18} {:>10.6} {:>9.2} {:>12.3e} {:>10.3e}\n",
                l.name, l.op, l.cosine, l.snr_db, l.max_abs_diff, l.max_abs
            );
        }
        for (n, a, b) in &self.shape_mismatch {
            s += &format!("  {n}: shapes differ ({a:?} vs {b:?}), not compared\n");
        }
        let tol = self.tolerance_text();
        match self.first_past() {
            Some(l) => {
                s += &format!(
                    "first layer past the tolerance ({tol}): {} ({}, max|diff| {:.3e}, SNR {:.2} dB, cosine {:.6})\n",
                    l.name, l.op, l.max_abs_diff, l.snr_db, l.cosine
                )
            }
            None => s += &format!("every layer within the tolerance ({tol})\n"),
        }
        s += "worst layers (by SNR):";
        for l in self.worst(5) {
            s += &format!(" {} ({:.2} dB)", l.name, l.snr_db);
        }
        s.push('\n');
        s
    }

    fn tolerance_text(&self) -> String {
        let mut t = if self.tol.is_finite() {
            format!("max|diff| <= {:e}", self.tol)
        } else {
            String::new()
        };
        let mut parts: Vec<String> = Vec::new();
        if !t.is_empty() {
            parts.push(std::mem::take(&mut t));
        }
        if let Some(m) = self.min_snr_db {
            parts.push(format!("SNR >= {m} dB"));
        }
        if let Some(m) = self.min_cosine {
            parts.push(format!("cosine >= {m}"));
        }
        if parts.is_empty() {
            "none".into()
        } else {
            parts.join(", ")
        }
    }
}

fn finite_or_null(x: f64) -> serde_json::Value {
    if x.is_finite() {
        serde_json::json!(x)
    } else {
        serde_json::Value::Null
    }
}
