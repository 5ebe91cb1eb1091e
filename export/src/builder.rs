//! A small graph builder: appends nodes in topological order, owns initializers and
//! hands out unique value names.
//!
//! Every value (graph input, initializer, node output) lives in one namespace so a name
//! never means two things; readable bases (checkpoint keys such as
//! `pretrained.layer1.0.conv1`) get a `_N` suffix only on collision. Node names mirror
//! their (unique) output names, which keeps profiler traces and error messages of
//! onnxruntime/tract pointing at the checkpoint layer they came from.

use std::collections::{BTreeSet, HashMap, HashSet};

use crate::proto::{
    tensor_value_info, AttributeProto, DataType, Dim, NodeProto, TensorProto,
    ValueInfoProto,
};

/// A 4-D feature map's shape as a function of the image size: `[batch, channels,
/// ceil(height / stride), ceil(width / stride)]` (see [`GraphBuilder::annotate_feature`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeatureShape {
    pub channels: i64,
    pub stride: i64,
    pub dtype: DataType,
}

#[derive(Debug)]
pub struct GraphBuilder {
    opset: i64,
    nodes: Vec<NodeProto>,
    initializers: Vec<TensorProto>,
    names: HashSet<String>,
    /// Deduplicated int64 constants (reshape targets, slice bounds), by value.
    i64_consts: HashMap<Vec<i64>, String>,
    /// Non-default operator domains used by some node (e.g. `com.microsoft`), sorted so
    /// the opset imports written from it are deterministic.
    domains: BTreeSet<String>,
    /// Shapes of the 4-D feature maps, in emission order (written as `value_info`).
    features: Vec<(String, FeatureShape)>,
    feature_index: HashMap<String, usize>,
}

impl GraphBuilder {
    pub fn new(opset: i64) -> Self {
        Self {
            opset,
            nodes: Vec::new(),
            initializers: Vec::new(),
            names: HashSet::new(),
            i64_consts: HashMap::new(),
            domains: BTreeSet::new(),
            features: Vec::new(),
            feature_index: HashMap::new(),
        }
    }

    /// The default-domain opset the graph targets (some ops change form across opsets).
    pub fn opset(&self) -> i64 {
        self.opset
    }

    /// Claims a fresh value name: `base` if free, else `base_1`, `base_2`, ...
    pub fn unique(&mut self, base: &str) -> String {
        let mut name = base.to_string();
        let mut n = 0usize;
        while self.names.contains(&name) {
            n += 1;
            name = format!("{base}_{n}");
        }
        self.names.insert(name.clone());
        name
    }

    /// Appends a one-output node and returns the output's (unique) name. Empty strings
    /// in `inputs` mark omitted optional inputs, as ONNX specifies.
    pub fn add_node(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        out: &str,
    ) -> String {
        let output = self.unique(out);
        self.push_node(op, inputs, attrs, output.clone());
        output
    }

    /// [`Self::add_node`] for an operator of a non-default domain (`com.microsoft`); the
    /// domain is recorded so the model imports it (and only then).
    pub fn add_node_in_domain(
        &mut self,
        domain: &str,
        op: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        out: &str,
    ) -> String {
        let output = self.add_node(op, inputs, attrs, out);
        if !domain.is_empty() {
            self.domains.insert(domain.to_string());
            self.nodes.last_mut().expect("node just added").domain = domain.to_string();
        }
        output
    }

    /// Non-default domains used so far, sorted.
    pub fn domains(&self) -> impl Iterator<Item = &str> {
        self.domains.iter().map(String::as_str)
    }

    /// Appends a node writing to a name claimed earlier with [`Self::unique`] (graph
    /// outputs, whose names are fixed before the graph is built).
    pub fn add_node_into(
        &mut self,
        op: &str,
        inputs: &[&str],
        attrs: Vec<AttributeProto>,
        output: &str,
    ) {
        debug_assert!(
            self.names.contains(output),
            "output {output} was not claimed"
        );
        self.push_node(op, inputs, attrs, output.to_string());
    }

    fn push_node(&mut self, op: &str, inputs: &[&str], attrs: Vec<AttributeProto>, output: String) {
        self.nodes.push(NodeProto {
            input: inputs.iter().map(|s| s.to_string()).collect(),
            name: output.clone(),
            output: vec![output],
            op_type: op.to_string(),
            attribute: attrs,
            ..Default::default()
        });
    }

    /// Adds a float32 initializer (raw little-endian) and returns its unique name.
    pub fn add_initializer_f32(&mut self, name: &str, dims: &[i64], data: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len(), "{name}");
        let raw = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_raw(name, dims, DataType::Float, raw)
    }

    /// Adds a FLOAT16 initializer from f32 values (round to nearest even, raw
    /// little-endian) and returns its unique name.
    pub fn add_initializer_f16(&mut self, name: &str, dims: &[i64], data: &[f32]) -> String {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len(), "{name}");
        let raw = data
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        self.add_raw(name, dims, DataType::Float16, raw)
    }

    /// Adds an int64 initializer (raw little-endian) and returns its unique name.
    pub fn add_initializer_i64(&mut self, name: &str, dims: &[i64], data: &[i64]) -> String {
        debug_assert_eq!(dims.iter().product::<i64>() as usize, data.len(), "{name}");
        let raw = data.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_raw(name, dims, DataType::Int64, raw)
    }

    fn add_raw(&mut self, name: &str, dims: &[i64], dt: DataType, raw_data: Vec<u8>) -> String {
        let name = self.unique(name);
        self.initializers
            .push(segtool_onnx::builders::tensor_raw(name.clone(), dims, dt, raw_data));
        name
    }

    /// A 1-D int64 constant, shared by every node that needs the same values.
    pub fn const_i64(&mut self, values: &[i64]) -> String {
        if let Some(name) = self.i64_consts.get(values) {
            return name.clone();
        }
        let base = format!(
            "const_i64_{}",
            values
                .iter()
                .map(|v| v.to_string().replace('-', "m"))
                .collect::<Vec<_>>()
                .join("_")
        );
        let name = self.add_initializer_i64(&base, &[values.len() as i64], values);
        self.i64_consts.insert(values.to_vec(), name.clone());
        name
    }

    /// Records that `name` is a feature map of `shape` (the first record wins).
    pub fn annotate_feature(&mut self, name: &str, shape: FeatureShape) {
        if !self.feature_index.contains_key(name) {
            self.feature_index
                .insert(name.to_string(), self.features.len());
            self.features.push((name.to_string(), shape));
        }
    }

    /// The recorded shape of feature map `name`, if any.
    pub fn feature(&self, name: &str) -> Option<FeatureShape> {
        self.feature_index.get(name).map(|&i| self.features[i].1)
    }

    /// `value_info` for every recorded feature map but those in `exclude` (the graph
    /// input, which already declares its shape), for an input of (`batch`, `height`,
    /// `width`). A fixed side s gives ceil(s / stride); a named side `h` gives the symbol
    /// `h/stride` (`h` itself at stride 1). Every conv and pool of the network maps a side
    /// to ceil(side / stride), so maps with equal strides have equal sizes: naming them
    /// alike lets runtimes prove that a residual Add's operands match (ONNX shape
    /// inference alone cannot see through a conv on a symbolic size). ONNX Runtime needs
    /// that to fuse Add + ReLU into the NCHWc conv (in place into the shortcut's buffer)
    /// for the dilated layer3/layer4 blocks, whose convs its own tracking skips.
    #[allow(dead_code)] // Written by the model assembly (lib.rs) once it takes them.
    pub fn feature_value_info(
        &self,
        batch: Dim<'_>,
        height: Dim<'_>,
        width: Dim<'_>,
        exclude: &[&str],
    ) -> Vec<ValueInfoProto> {
        fn side(d: Dim<'_>, stride: i64) -> Result<i64, String> {
            match d {
                Dim::Fixed(v) => Ok((v + stride - 1) / stride),
                Dim::Named(n) if stride == 1 => Err(n.to_string()),
                Dim::Named(n) => Err(format!("{n}/{stride}")),
            }
        }
        fn dim(v: &Result<i64, String>) -> Dim<'_> {
            match v {
                Ok(v) => Dim::Fixed(*v),
                Err(n) => Dim::Named(n.as_str()),
            }
        }
        self.features
            .iter()
            .filter(|(name, _)| !exclude.contains(&name.as_str()))
            .map(|(name, f)| {
                let (h, w) = (side(height, f.stride), side(width, f.stride));
                tensor_value_info(
                    name,
                    f.dtype,
                    &[batch, Dim::Fixed(f.channels), dim(&h), dim(&w)],
                )
            })
            .collect()
    }

    /// Nodes (topological: each was appended after its inputs) and initializers.
    pub fn finish(self) -> (Vec<NodeProto>, Vec<TensorProto>) {
        (self.nodes, self.initializers)
    }
}

pub use segtool_onnx::builders::{attr_float, attr_int, attr_ints, attr_string};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_constants_shared() {
        let mut g = GraphBuilder::new(17);
        let x = g.unique("x");
        assert_eq!(x, "x");
        let w = g.add_initializer_f32("x", &[2], &[1.0, -2.5]);
        assert_eq!(w, "x_1");
        let y = g.add_node("Add", &[&x, &w], vec![], "x");
        assert_eq!(y, "x_2");
        let c1 = g.const_i64(&[0, 0, -1]);
        let c2 = g.const_i64(&[0, 0, -1]);
        assert_eq!(c1, c2);
        assert_eq!(c1, "const_i64_0_0_m1");
        assert_ne!(g.const_i64(&[2]), c1);
        let (nodes, inits) = g.finish();
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].name, "x_2");
        assert_eq!(nodes[0].input, ["x", "x_1"]);
        assert_eq!(inits.len(), 3);
        assert_eq!(
            inits[0].raw_data,
            [1.0f32.to_le_bytes(), (-2.5f32).to_le_bytes()].concat()
        );
        assert_eq!(inits[0].data_type, DataType::Float as i32);
        assert_eq!(inits[1].data_type, DataType::Int64 as i32);
        assert_eq!(inits[1].raw_data.len(), 24);
        assert_eq!(inits[1].raw_data[16..], (-1i64).to_le_bytes());
    }

    #[test]
    fn feature_value_info_names_sides_by_stride() {
        use crate::proto::{tensor_shape_proto::dimension::Value as D, type_proto};
        let mut g = GraphBuilder::new(17);
        let f = |channels, stride| FeatureShape {
            channels,
            stride,
            dtype: DataType::Float,
        };
        g.annotate_feature("image", f(3, 1));
        g.annotate_feature("a", f(64, 8));
        g.annotate_feature("a", f(1, 1)); // first record wins
        assert_eq!(g.feature("a"), Some(f(64, 8)));
        let dims = |vi: &ValueInfoProto| -> Vec<D> {
            match &vi.r#type.as_ref().unwrap().value {
                Some(type_proto::Value::TensorType(t)) => t
                    .shape
                    .as_ref()
                    .unwrap()
                    .dim
                    .iter()
                    .map(|d| d.value.clone().unwrap())
                    .collect(),
                _ => panic!("not a tensor"),
            }
        };
        let vi = g.feature_value_info(
            Dim::Named("batch"),
            Dim::Named("height"),
            Dim::Fixed(1023),
            &["image"],
        );
        assert_eq!(vi.len(), 1);
        assert_eq!(vi[0].name, "a");
        assert_eq!(
            dims(&vi[0]),
            [
                D::DimParam("batch".into()),
                D::DimValue(64),
                D::DimParam("height/8".into()),
                D::DimValue(128),
            ]
        );
        let vi = g.feature_value_info(Dim::Fixed(2), Dim::Named("h"), Dim::Named("w"), &[]);
        assert_eq!(vi[0].name, "image");
        assert_eq!(
            dims(&vi[0])[2..],
            [D::DimParam("h".into()), D::DimParam("w".into())]
        );
    }

    #[test]
    fn attribute_helpers_set_type_and_value() {
        assert_eq!(attr_int("axis", 0).i, Some(0));
        assert_eq!(
            attr_ints("perm", &[0, 2, 1]).r#type,
            crate::proto::AttributeType::Ints as i32
        );
        assert_eq!(
            attr_string("mode", "linear").s.as_deref(),
            Some(&b"linear"[..])
        );
    }
}
