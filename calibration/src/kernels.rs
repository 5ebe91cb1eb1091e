//! Which kernels ONNX Runtime ran for a model, from its own profile of a run: int8
//! kernels (QLinearConv, QLinearAdd, MatMulIntegerToFloat...), float ones, and the
//! conversions between them (QuantizeLinear, DequantizeLinear).
//!
//! A QDQ file says where quantisation may happen; ORT's graph optimiser decides where it
//! does. A Conv it could not fuse runs as DequantizeLinear + float Conv, slower than the
//! fp32 model's, and nothing but the profile shows it. `segtool compare` prints this
//! census for both files.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use ndarray::ArrayView4;

use crate::session::OrtModel;
use crate::CalibrationError;

/// What a kernel computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Precision {
    /// Integer arithmetic on quantised tensors.
    Int8,
    /// QuantizeLinear / DequantizeLinear left between kernels.
    Conversion,
    Float,
}

impl Precision {
    /// By ONNX Runtime's kernel (op) name, domain prefix removed.
    pub fn of(op: &str) -> Self {
        let op = op.rsplit(':').next().unwrap_or(op);
        match op {
            "QuantizeLinear" | "DequantizeLinear" | "DynamicQuantizeLinear" => Self::Conversion,
            _ if op.starts_with("QLinear")
                || op.contains("Integer")
                || matches!(op, "QGemm" | "QAttention" | "NhwcMaxPool") =>
            {
                Self::Int8
            }
            _ => Self::Float,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Int8 => "int8",
            Self::Conversion => "conversions",
            Self::Float => "float",
        }
    }
}

/// One node as ONNX Runtime ran it (after its graph optimisations).
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    pub node: String,
    pub op: String,
    pub provider: String,
    /// Its time in the profiled run, microseconds.
    pub micros: f64,
}

/// Every kernel of one run.
#[derive(Clone, Debug, Default)]
pub struct KernelCensus {
    pub kernels: Vec<Kernel>,
}

impl KernelCensus {
    /// (precision, op) -> (nodes, milliseconds).
    pub fn by_op(&self) -> BTreeMap<(Precision, String), (usize, f64)> {
        let mut m: BTreeMap<(Precision, String), (usize, f64)> = BTreeMap::new();
        for k in &self.kernels {
            let e = m.entry((Precision::of(&k.op), k.op.clone())).or_default();
            e.0 += 1;
            e.1 += k.micros / 1e3;
        }
        m
    }

    /// One line per precision: `int8 (27 nodes, 90.1 ms): QLinearConv 27 ...`.
    pub fn summary(&self) -> String {
        let mut lines: BTreeMap<Precision, (usize, f64, Vec<String>)> = BTreeMap::new();
        for ((p, op), (n, ms)) in self.by_op() {
            let l = lines.entry(p).or_default();
            l.0 += n;
            l.1 += ms;
            l.2.push(format!("{op} {n}"));
        }
        lines
            .into_iter()
            .map(|(p, (n, ms, ops))| {
                format!(
                    "  {} ({n} nodes, {ms:.1} ms): {}\n",
                    p.name(),
                    ops.join(", ")
                )
            })
            .collect()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "by_op": self.by_op().into_iter().map(|((p, op), (n, ms))| serde_json::json!({
                "op": op, "precision": p.name(), "nodes": n, "ms": ms,
            })).collect::<Vec<_>>(),
            "kernels": self.kernels.iter().map(|k| serde_json::json!({
                "node": k.node, "op": k.op, "provider": k.provider, "us": k.micros,
                "precision": Precision::of(&k.op).name(),
            })).collect::<Vec<_>>(),
        })
    }
}

/// Runs `model` on `x` twice in a profiled ORT CPU session and reads the profile: each
/// node's kernel from the second run (the first one allocates).
pub fn census(
    model: &[u8],
    x: ArrayView4<f32>,
    threads: Option<usize>,
) -> Result<KernelCensus, CalibrationError> {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let prefix = std::env::temp_dir().join(format!(
        "segtool-profile-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let mut session = OrtModel::profiled(model, threads, &prefix)?;
    session.run_discard(x)?;
    session.run_discard(x)?;
    let path = session.end_profiling()?;
    let text = std::fs::read_to_string(&path);
    let _ = std::fs::remove_file(&path);
    let text = text.map_err(|e| CalibrationError::Ort(format!("ORT's profile {path}: {e}")))?;
    parse_profile(&text).map_err(|e| CalibrationError::Ort(format!("ORT's profile {path}: {e}")))
}

/// The kernels of the last run in ORT's profile (Chrome trace JSON: `cat: "Node"`
/// events named `<node>_kernel_time`, with `args.op_name` and `args.provider`).
fn parse_profile(text: &str) -> Result<KernelCensus, String> {
    let events: Vec<serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let mut last: BTreeMap<String, (usize, Kernel)> = BTreeMap::new();
    for (order, e) in events.iter().enumerate() {
        let Some(name) = e["name"]
            .as_str()
            .and_then(|n| n.strip_suffix("_kernel_time"))
        else {
            continue;
        };
        if e["cat"] != "Node" {
            continue;
        }
        let k = Kernel {
            node: name.to_string(),
            op: e["args"]["op_name"].as_str().unwrap_or("?").to_string(),
            provider: e["args"]["provider"].as_str().unwrap_or("?").to_string(),
            micros: e["dur"].as_f64().unwrap_or(0.0),
        };
        last.insert(name.to_string(), (order, k));
    }
    let mut kernels: Vec<(usize, Kernel)> = last.into_values().collect();
    kernels.sort_by_key(|(order, _)| *order);
    Ok(KernelCensus {
        kernels: kernels.into_iter().map(|(_, k)| k).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_are_sorted_by_what_they_compute_in() {
        assert_eq!(Precision::of("QLinearConv"), Precision::Int8);
        assert_eq!(Precision::of("com.microsoft:QLinearAdd"), Precision::Int8);
        assert_eq!(Precision::of("MatMulIntegerToFloat"), Precision::Int8);
        assert_eq!(Precision::of("DequantizeLinear"), Precision::Conversion);
        assert_eq!(Precision::of("Conv"), Precision::Float);
        assert_eq!(Precision::of("FusedConv"), Precision::Float);
    }

    #[test]
    fn the_profile_gives_each_node_of_the_last_run() {
        let text = r#"[
            {"cat":"Session","name":"model_run","dur":900},
            {"cat":"Node","name":"conv_kernel_time","dur":50,"args":{"op_name":"QLinearConv","provider":"CPUExecutionProvider"}},
            {"cat":"Node","name":"conv_fence_before","dur":0,"args":{"op_name":"QLinearConv"}},
            {"cat":"Node","name":"relu_kernel_time","dur":5,"args":{"op_name":"Relu","provider":"CPUExecutionProvider"}},
            {"cat":"Node","name":"conv_kernel_time","dur":40,"args":{"op_name":"QLinearConv","provider":"CPUExecutionProvider"}},
            {"cat":"Node","name":"relu_kernel_time","dur":4,"args":{"op_name":"Relu","provider":"CPUExecutionProvider"}}
        ]"#;
        let c = parse_profile(text).unwrap();
        assert_eq!(c.kernels.len(), 2);
        assert_eq!(
            (c.kernels[0].node.as_str(), c.kernels[0].micros),
            ("conv", 40.0)
        );
        let by = c.by_op();
        assert_eq!(by[&(Precision::Int8, "QLinearConv".to_string())], (1, 0.04));
        assert!(
            c.summary()
                .contains("int8 (1 nodes, 0.0 ms): QLinearConv 1"),
            "{}",
            c.summary()
        );
        assert!(parse_profile("{").is_err());
    }
}
