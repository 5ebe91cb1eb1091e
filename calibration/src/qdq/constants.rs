//! `Constant` nodes holding tensors become initialisers.
//!
//! Some exporters (Paddle2ONNX's PaddleOCR detectors, older TensorFlow converters) write a
//! model's weights as `Constant` nodes, not initialisers. The plan quantises a Conv's
//! weight only when it is an initialiser, so without this pass such a model would come
//! out of calibration with no layer quantised, an "INT8" file that is the float one.
//!
//! Accepts: a top-level `Constant` (default domain) with one output and its tensor in the
//! `value` attribute. Leaves as they are: the scalar and list forms (`value_float`,
//! `value_ints`, ...; shapes and axes, never weights), sparse tensors, constants that
//! are graph outputs, and anything inside subgraphs. The graph computes the same values.

use std::borrow::Cow;

use segtool_onnx::proto::{GraphProto, ModelProto, NodeProto};

/// `model` with its tensor-valued `Constant` nodes as initialisers: borrowed as it is
/// when it has none (no copy of the weights), else a copy with them moved.
pub fn with_constants_as_initializers(model: &ModelProto) -> Cow<'_, ModelProto> {
    let outputs: Vec<&str> = model
        .graph
        .iter()
        .flat_map(|g| g.output.iter().map(|o| o.name.as_str()))
        .collect();
    let any = model
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .any(|n| movable(n, &outputs));
    if !any {
        return Cow::Borrowed(model);
    }
    let mut owned = model.clone();
    constants_as_initializers(&mut owned);
    Cow::Owned(owned)
}

fn movable(node: &NodeProto, graph_outputs: &[&str]) -> bool {
    node.op_type == "Constant"
        && node.domain.is_empty()
        && node.output.len() == 1
        && node.attribute.len() == 1
        && node.attribute[0].name == "value"
        && node.attribute[0].t.is_some()
        && !graph_outputs.contains(&node.output[0].as_str())
}

/// Moves the graph's tensor-valued `Constant` nodes into its initialisers, named after
/// their outputs; returns how many moved.
pub fn constants_as_initializers(model: &mut ModelProto) -> usize {
    let Some(graph) = model.graph.as_mut() else {
        return 0;
    };
    let outputs: Vec<String> = graph.output.iter().map(|o| o.name.clone()).collect();
    let outputs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let mut kept = Vec::with_capacity(graph.node.len());
    let mut moved = 0;
    for mut node in std::mem::take(&mut graph.node) {
        if !movable(&node, &outputs) {
            kept.push(node);
            continue;
        }
        let mut tensor = node.attribute[0].t.take().expect("checked");
        tensor.name = node.output.remove(0);
        graph.initializer.push(tensor);
        moved += 1;
    }
    graph.node = kept;
    declare_for_old_ir(model, moved);
    moved
}

/// Before IR version 4 every initialiser had to be a graph input too.
fn declare_for_old_ir(model: &mut ModelProto, moved: usize) {
    if model.ir_version >= 4 || moved == 0 {
        return;
    }
    let graph: &mut GraphProto = model.graph.as_mut().expect("has a graph");
    let start = graph.initializer.len() - moved;
    let inputs: Vec<_> = graph.initializer[start..]
        .iter()
        .map(|t| segtool_onnx::proto::ValueInfoProto {
            name: t.name.clone(),
            ..Default::default()
        })
        .collect();
    graph.input.extend(inputs);
}

#[cfg(test)]
mod tests {
    use super::*;
    use segtool_onnx::proto::{AttributeProto, NodeProto, TensorProto, ValueInfoProto};

    fn constant(output: &str, attribute: &str, tensor: Option<TensorProto>) -> NodeProto {
        NodeProto {
            op_type: "Constant".into(),
            output: vec![output.into()],
            attribute: vec![AttributeProto {
                name: attribute.into(),
                t: tensor,
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn tensors_move_and_the_rest_stays() {
        let weight = TensorProto {
            dims: vec![2, 1, 1, 1],
            float_data: vec![0.5, -1.0],
            data_type: 1,
            ..Default::default()
        };
        let conv = NodeProto {
            op_type: "Conv".into(),
            input: vec!["x".into(), "w".into()],
            output: vec!["y".into()],
            ..Default::default()
        };
        let mut model = ModelProto {
            ir_version: 8,
            graph: Some(GraphProto {
                node: vec![
                    constant("w", "value", Some(weight.clone())),
                    constant("axes", "value_ints", None),
                    constant("out", "value", Some(weight.clone())),
                    conv,
                ],
                output: vec![ValueInfoProto {
                    name: "out".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(matches!(
            with_constants_as_initializers(&model),
            Cow::Owned(_)
        ));
        assert_eq!(constants_as_initializers(&mut model), 1);
        assert!(matches!(
            with_constants_as_initializers(&model),
            Cow::Borrowed(_)
        ));
        let g = model.graph.as_ref().unwrap();
        assert_eq!(g.initializer.len(), 1);
        assert_eq!(g.initializer[0].name, "w");
        assert_eq!(g.initializer[0].float_data, weight.float_data);
        let ops: Vec<(&str, &str)> = g
            .node
            .iter()
            .map(|n| (n.op_type.as_str(), n.output[0].as_str()))
            .collect();
        assert_eq!(
            ops,
            [("Constant", "axes"), ("Constant", "out"), ("Conv", "y")]
        );
        assert!(g.input.is_empty(), "IR 8 needs no input for an initialiser");

        model.ir_version = 3;
        model.graph.as_mut().unwrap().node[1] = constant("w2", "value", Some(weight));
        assert_eq!(constants_as_initializers(&mut model), 1);
        let g = model.graph.as_ref().unwrap();
        assert_eq!(g.input.last().unwrap().name, "w2");
    }
}
