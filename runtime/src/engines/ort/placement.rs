//! Which execution provider ran each node: read from ONNX Runtime's own profile (the
//! JSON trace that `SessionOptions::EnableProfiling` writes and `EndProfiling` closes).
//! A strict provider list says which providers a session *may* use; only the trace says
//! which nodes each one took. TensorRT shows up as its fused subgraph kernels
//! (`TensorrtExecutionProvider_TRTKernel_...`), one per partition, and a node ONNX
//! Runtime gave back to CUDA or the CPU shows up under that provider.
//!
//! Accepts the trace format ONNX Runtime 1.x writes: a JSON array of events, the node
//! kernels being `"cat": "Node"` events named `<node>_kernel_time` whose `args` carry
//! `op_name` and `provider`. Refuses anything else (not JSON, not an array) with an error.

use std::collections::BTreeMap;

use crate::error::{Result, RuntimeError};

/// One node as the profile saw it run.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::{NodePlacement, PlacedNode};
/// let trace = r#"[{"cat": "Node", "name": "/head/Softmax_kernel_time",
///     "args": {"op_name": "Softmax", "provider": "CPUExecutionProvider"}}]"#;
/// // The nodes a CUDA session left to the CPU (each costs a copy between devices).
/// let placement = NodePlacement::parse(trace)?;
/// for (provider, node) in placement.elsewhere("CUDAExecutionProvider") {
///     println!("{} ({}) ran on {provider}", node.node, node.op);
/// }
/// let softmax = PlacedNode { node: "/head/Softmax".into(), op: "Softmax".into() };
/// assert_eq!(placement.nodes("CPUExecutionProvider"), [softmax]);
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacedNode {
    /// The node's name in the graph (or TensorRT's name for a fused partition).
    pub node: String,
    /// Its op type (`Conv`, `TRTKernel_graph_main_0`, ...).
    pub op: String,
}

/// The nodes each execution provider ran, by provider name (`CPUExecutionProvider`,
/// `CUDAExecutionProvider`, `TensorrtExecutionProvider`), each node once.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::NodePlacement;
/// // ONNX Runtime's trace, as `OrtEngine::end_profiling` reads it (`OrtOptions::with_profiling`).
/// let trace = r#"[
///   {"cat": "Node", "name": "conv_kernel_time",
///    "args": {"op_name": "Conv", "provider": "CUDAExecutionProvider"}},
///   {"cat": "Node", "name": "shape_kernel_time",
///    "args": {"op_name": "Shape", "provider": "CPUExecutionProvider"}}
/// ]"#;
/// let placement = NodePlacement::parse(trace)?;
/// assert_eq!(placement.nodes("CUDAExecutionProvider").len(), 1);
/// assert_eq!(
///     placement.summary(),
///     "CPUExecutionProvider: 1 node(s) (Shape 1); CUDAExecutionProvider: 1 node(s) (Conv 1)"
/// );
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodePlacement {
    /// Provider name -> the nodes it ran, in first-run order.
    pub by_provider: BTreeMap<String, Vec<PlacedNode>>,
}

impl NodePlacement {
    /// Parses an ONNX Runtime profile (the file [`super::OrtEngine::end_profiling`] read).
    pub fn parse(trace: &str) -> Result<Self> {
        let events: serde_json::Value = serde_json::from_str(trace)
            .map_err(|e| RuntimeError::Ort(format!("ONNX Runtime profile is not JSON: {e}")))?;
        let events = events.as_array().ok_or_else(|| {
            RuntimeError::Ort("ONNX Runtime profile is not a JSON array of events".into())
        })?;
        let mut placement = Self::default();
        for event in events {
            if event["cat"] != "Node" {
                continue;
            }
            let Some(node) = event["name"]
                .as_str()
                .and_then(|n| n.strip_suffix("_kernel_time"))
            else {
                continue;
            };
            let args = &event["args"];
            let (Some(provider), Some(op)) = (args["provider"].as_str(), args["op_name"].as_str())
            else {
                continue;
            };
            let nodes = placement
                .by_provider
                .entry(provider.to_string())
                .or_default();
            if !nodes.iter().any(|n| n.node == node) {
                nodes.push(PlacedNode {
                    node: node.to_string(),
                    op: op.to_string(),
                });
            }
        }
        Ok(placement)
    }

    /// The nodes `provider` ran (empty when none).
    pub fn nodes(&self, provider: &str) -> &[PlacedNode] {
        self.by_provider.get(provider).map_or(&[], Vec::as_slice)
    }

    /// Nodes that ran on any provider but `provider`.
    pub fn elsewhere(&self, provider: &str) -> Vec<(&str, &PlacedNode)> {
        self.by_provider
            .iter()
            .filter(|(p, _)| p.as_str() != provider)
            .flat_map(|(p, nodes)| nodes.iter().map(move |n| (p.as_str(), n)))
            .collect()
    }

    /// `CUDAExecutionProvider: 12 nodes (Conv 8, ...); CPUExecutionProvider: 1 node (Shape)`.
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        for (provider, nodes) in &self.by_provider {
            let mut ops: BTreeMap<&str, usize> = BTreeMap::new();
            for n in nodes {
                *ops.entry(n.op.as_str()).or_default() += 1;
            }
            let ops: Vec<String> = ops.iter().map(|(op, c)| format!("{op} {c}")).collect();
            parts.push(format!(
                "{provider}: {} node(s) ({})",
                nodes.len(),
                ops.join(", ")
            ));
        }
        if parts.is_empty() {
            return "no node events in the profile".into();
        }
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_node_events_once_each() {
        let trace = r#"[
          {"cat":"Session","name":"model_loading_uri","args":{}},
          {"cat":"Node","name":"conv_fence_before","args":{"op_name":"Conv"}},
          {"cat":"Node","name":"conv_kernel_time","args":{"op_name":"Conv","provider":"CUDAExecutionProvider"}},
          {"cat":"Node","name":"conv_kernel_time","args":{"op_name":"Conv","provider":"CUDAExecutionProvider"}},
          {"cat":"Node","name":"TensorrtExecutionProvider_TRTKernel_graph_main_0_kernel_time",
           "args":{"op_name":"TRTKernel_graph_main_0","provider":"TensorrtExecutionProvider"}},
          {"cat":"Node","name":"shape_kernel_time","args":{"op_name":"Shape","provider":"CPUExecutionProvider"}}
        ]"#;
        let p = NodePlacement::parse(trace).unwrap();
        assert_eq!(p.nodes("CUDAExecutionProvider").len(), 1);
        assert_eq!(
            p.nodes("TensorrtExecutionProvider")[0].op,
            "TRTKernel_graph_main_0"
        );
        let away = p.elsewhere("TensorrtExecutionProvider");
        assert_eq!(away.len(), 2, "{away:?}");
        assert!(
            p.summary()
                .contains("CPUExecutionProvider: 1 node(s) (Shape 1)"),
            "{}",
            p.summary()
        );
    }

    #[test]
    fn refuses_what_is_not_a_trace() {
        assert!(NodePlacement::parse("{\"a\": 1}").is_err());
        assert!(NodePlacement::parse("[truncated").is_err());
    }
}
