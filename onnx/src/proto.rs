//! The subset of `onnx.proto` (ONNX IR) that segtool writes, as prost messages.
//!
//! Hand-written rather than generated so the build needs neither `protoc` nor a build
//! script. Field numbers are copied exactly from onnx/onnx.proto; fields segtool never
//! writes are left out (prost skips unknown fields when decoding, so reading a fuller
//! model back still works). onnx.proto is proto2: where presence matters (an attribute's
//! `i = 0`, `f = 0.0`), the field is `optional` so a zero is still written on the wire,
//! and repeated scalars that proto2 leaves unpacked (`dims`, `floats`, `ints`) are
//! written unpacked, byte-for-byte what protobuf's own ONNX writer produces.

use prost::{Enumeration, Message, Oneof};

/// `ModelProto`: the file's top-level message.
#[derive(Clone, PartialEq, Message)]
pub struct ModelProto {
    /// ONNX IR version of the file.
    #[prost(int64, tag = "1")]
    pub ir_version: i64,
    /// Operator sets the graph uses.
    #[prost(message, repeated, tag = "8")]
    pub opset_import: Vec<OperatorSetIdProto>,
    /// Tool that wrote the model.
    #[prost(string, tag = "2")]
    pub producer_name: String,
    /// Version of the producer.
    #[prost(string, tag = "3")]
    pub producer_version: String,
    /// Operator domain; empty is the default `ai.onnx`.
    #[prost(string, tag = "4")]
    pub domain: String,
    /// Version of the model itself.
    #[prost(int64, tag = "5")]
    pub model_version: i64,
    /// Free-form documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
    /// The computation graph.
    #[prost(message, optional, tag = "7")]
    pub graph: Option<GraphProto>,
    /// Key/value metadata (segtool's spec and export record live here).
    #[prost(message, repeated, tag = "14")]
    pub metadata_props: Vec<StringStringEntryProto>,
}

/// `StringStringEntryProto`: ONNX's portable map entry (metadata_props).
#[derive(Clone, PartialEq, Message)]
pub struct StringStringEntryProto {
    /// Entry key.
    #[prost(string, tag = "1")]
    pub key: String,
    /// Entry value.
    #[prost(string, tag = "2")]
    pub value: String,
}

/// `OperatorSetIdProto`: an imported opset; the empty domain is the default `ai.onnx`.
#[derive(Clone, PartialEq, Message)]
pub struct OperatorSetIdProto {
    /// Operator domain; empty is the default `ai.onnx`.
    #[prost(string, tag = "1")]
    pub domain: String,
    /// Opset version.
    #[prost(int64, tag = "2")]
    pub version: i64,
}

/// `GraphProto`: nodes in topological order, initializers, graph inputs and outputs.
#[derive(Clone, PartialEq, Message)]
pub struct GraphProto {
    /// Nodes in topological order.
    #[prost(message, repeated, tag = "1")]
    pub node: Vec<NodeProto>,
    /// Name (unique within its graph where it names a value).
    #[prost(string, tag = "2")]
    pub name: String,
    /// Constant tensors (weights).
    #[prost(message, repeated, tag = "5")]
    pub initializer: Vec<TensorProto>,
    /// Free-form documentation.
    #[prost(string, tag = "10")]
    pub doc_string: String,
    /// Graph inputs.
    #[prost(message, repeated, tag = "11")]
    pub input: Vec<ValueInfoProto>,
    /// Graph outputs.
    #[prost(message, repeated, tag = "12")]
    pub output: Vec<ValueInfoProto>,
    /// Shapes and types of intermediate values (optional).
    #[prost(message, repeated, tag = "13")]
    pub value_info: Vec<ValueInfoProto>,
}

/// `NodeProto`: one operator application.
#[derive(Clone, PartialEq, Message)]
pub struct NodeProto {
    /// Input value names (empty: optional input left out).
    #[prost(string, repeated, tag = "1")]
    pub input: Vec<String>,
    /// Output value names.
    #[prost(string, repeated, tag = "2")]
    pub output: Vec<String>,
    /// Name (unique within its graph where it names a value).
    #[prost(string, tag = "3")]
    pub name: String,
    /// Operator name, e.g. `Conv`.
    #[prost(string, tag = "4")]
    pub op_type: String,
    /// Operator domain; empty is the default `ai.onnx`.
    #[prost(string, tag = "7")]
    pub domain: String,
    /// Operator attributes.
    #[prost(message, repeated, tag = "5")]
    pub attribute: Vec<AttributeProto>,
    /// Free-form documentation.
    #[prost(string, tag = "6")]
    pub doc_string: String,
}

/// `AttributeProto`: a named, typed operator attribute.
#[derive(Clone, PartialEq, Message)]
pub struct AttributeProto {
    /// Name (unique within its graph where it names a value).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Name of the parent function attribute this refers to (unused by segtool).
    #[prost(string, tag = "21")]
    pub ref_attr_name: String,
    /// Free-form documentation.
    #[prost(string, tag = "13")]
    pub doc_string: String,
    /// Which of the value fields is set ([`AttributeType`]).
    #[prost(enumeration = "AttributeType", tag = "20")]
    pub r#type: i32,
    /// `FLOAT` value.
    #[prost(float, optional, tag = "2")]
    pub f: Option<f32>,
    /// `INT` value.
    #[prost(int64, optional, tag = "3")]
    pub i: Option<i64>,
    /// `STRING` value (bytes).
    #[prost(bytes = "vec", optional, tag = "4")]
    pub s: Option<Vec<u8>>,
    /// `TENSOR` value.
    #[prost(message, optional, tag = "5")]
    pub t: Option<TensorProto>,
    /// `GRAPH` value.
    #[prost(message, optional, tag = "6")]
    pub g: Option<GraphProto>,
    /// `FLOATS` value.
    #[prost(float, repeated, packed = "false", tag = "7")]
    pub floats: Vec<f32>,
    /// `INTS` value.
    #[prost(int64, repeated, packed = "false", tag = "8")]
    pub ints: Vec<i64>,
    /// `STRINGS` value.
    #[prost(bytes = "vec", repeated, tag = "9")]
    pub strings: Vec<Vec<u8>>,
    /// `TENSORS` value.
    #[prost(message, repeated, tag = "10")]
    pub tensors: Vec<TensorProto>,
    /// `GRAPHS` value.
    #[prost(message, repeated, tag = "11")]
    pub graphs: Vec<GraphProto>,
}

/// `AttributeProto.AttributeType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Enumeration)]
#[repr(i32)]
pub enum AttributeType {
    /// Not set.
    Undefined = 0,
    /// `FLOAT`.
    Float = 1,
    /// `INT`.
    Int = 2,
    /// `STRING`.
    String = 3,
    /// `TENSOR`.
    Tensor = 4,
    /// `GRAPH`.
    Graph = 5,
    /// `SPARSETENSOR`.
    SparseTensor = 11,
    /// `TYPEPROTO`.
    TypeProto = 13,
    /// `FLOATS`.
    Floats = 6,
    /// `INTS`.
    Ints = 7,
    /// `STRINGS`.
    Strings = 8,
    /// `TENSORS`.
    Tensors = 9,
    /// `GRAPHS`.
    Graphs = 10,
    /// `SPARSETENSORS`.
    SparseTensors = 12,
    /// `TYPEPROTOS`.
    TypeProtos = 14,
}

/// `TensorProto`: segtool stores every payload in `raw_data` (little-endian), or, for
/// large initialisers of an export with external data, in a side file described by
/// `external_data` (`location`, `offset`, `length`) with `data_location = EXTERNAL` and
/// no `raw_data` (see [`crate::external`]).
#[derive(Clone, PartialEq, Message)]
pub struct TensorProto {
    /// Shape.
    #[prost(int64, repeated, packed = "false", tag = "1")]
    pub dims: Vec<i64>,
    /// Element type, a [`DataType`] number.
    #[prost(enumeration = "DataType", tag = "2")]
    pub data_type: i32,
    /// Values as float32 (when `raw_data` is empty).
    #[prost(float, repeated, tag = "4")]
    pub float_data: Vec<f32>,
    /// Values as int32 (when `raw_data` is empty).
    #[prost(int32, repeated, tag = "5")]
    pub int32_data: Vec<i32>,
    /// Values as int64 (when `raw_data` is empty).
    #[prost(int64, repeated, tag = "7")]
    pub int64_data: Vec<i64>,
    /// Name (unique within its graph where it names a value).
    #[prost(string, tag = "8")]
    pub name: String,
    /// Free-form documentation.
    #[prost(string, tag = "12")]
    pub doc_string: String,
    /// Values, little-endian, row-major, in `data_type`.
    #[prost(bytes = "vec", tag = "9")]
    pub raw_data: Vec<u8>,
    /// Values as float64 (when `raw_data` is empty).
    #[prost(double, repeated, tag = "10")]
    pub double_data: Vec<f64>,
    /// Where the payload lives when `data_location` is EXTERNAL: `location` (path
    /// relative to the model file), `offset` and `length` in bytes, as decimal strings.
    #[prost(message, repeated, tag = "13")]
    pub external_data: Vec<StringStringEntryProto>,
    /// proto2 `optional DataLocation`: unset (`None`) means DEFAULT, like protobuf's own
    /// writer, which leaves the field off the wire unless it was set.
    #[prost(enumeration = "DataLocation", optional, tag = "14")]
    pub data_location: Option<i32>,
}

/// `TensorProto.DataLocation`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Enumeration)]
#[repr(i32)]
pub enum DataLocation {
    /// The payload is in the message (`raw_data` or a typed `*_data` field).
    Default = 0,
    /// The payload is in a file named by `external_data`.
    External = 1,
}

/// `TensorProto.DataType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Enumeration)]
#[repr(i32)]
pub enum DataType {
    /// Not set.
    Undefined = 0,
    /// `FLOAT`.
    Float = 1,
    /// `UINT8`.
    Uint8 = 2,
    /// `INT8`.
    Int8 = 3,
    /// `UINT16`.
    Uint16 = 4,
    /// `INT16`.
    Int16 = 5,
    /// `INT32`.
    Int32 = 6,
    /// `INT64`.
    Int64 = 7,
    /// `STRING`.
    String = 8,
    /// `BOOL`.
    Bool = 9,
    /// `FLOAT16`.
    Float16 = 10,
    /// `DOUBLE`.
    Double = 11,
    /// `UINT32`.
    Uint32 = 12,
    /// `UINT64`.
    Uint64 = 13,
    /// `COMPLEX64`.
    Complex64 = 14,
    /// `COMPLEX128`.
    Complex128 = 15,
    /// `BFLOAT16`.
    Bfloat16 = 16,
}

/// `ValueInfoProto`: name and type of a graph input/output.
#[derive(Clone, PartialEq, Message)]
pub struct ValueInfoProto {
    /// Name (unique within its graph where it names a value).
    #[prost(string, tag = "1")]
    pub name: String,
    /// Type of the value.
    #[prost(message, optional, tag = "2")]
    pub r#type: Option<TypeProto>,
    /// Free-form documentation.
    #[prost(string, tag = "3")]
    pub doc_string: String,
}

/// `TypeProto`; only the tensor arm of its `value` oneof is modelled.
#[derive(Clone, PartialEq, Message)]
pub struct TypeProto {
    /// The type itself.
    #[prost(oneof = "type_proto::Value", tags = "1")]
    pub value: Option<type_proto::Value>,
    /// Semantic denotation (unused by segtool).
    #[prost(string, tag = "6")]
    pub denotation: String,
}

/// Nested messages of `type_proto`.
pub mod type_proto {
    use super::*;

    /// Which value is set.
    #[derive(Clone, PartialEq, Oneof)]
    pub enum Value {
        /// `TENSORTYPE`.
        #[prost(message, tag = "1")]
        TensorType(Tensor),
    }

    /// `TypeProto.Tensor`: element type (a `DataType` value) and optional shape.
    #[derive(Clone, PartialEq, Message)]
    pub struct Tensor {
        /// `elem_type`.
        #[prost(int32, tag = "1")]
        pub elem_type: i32,
        /// `shape`.
        #[prost(message, optional, tag = "2")]
        pub shape: Option<TensorShapeProto>,
    }
}

/// `TensorShapeProto`.
#[derive(Clone, PartialEq, Message)]
pub struct TensorShapeProto {
    /// Dimensions, outermost first.
    #[prost(message, repeated, tag = "1")]
    pub dim: Vec<tensor_shape_proto::Dimension>,
}

/// Nested messages of `tensor_shape_proto`.
pub mod tensor_shape_proto {
    use super::*;

    /// One dimension: a fixed size or a symbolic name (dynamic axis).
    #[derive(Clone, PartialEq, Message)]
    pub struct Dimension {
        /// The type itself.
        #[prost(oneof = "dimension::Value", tags = "1, 2")]
        pub value: Option<dimension::Value>,
        /// Semantic denotation (unused by segtool).
        #[prost(string, tag = "3")]
        pub denotation: String,
    }

    /// Nested messages of `dimension`.
    pub mod dimension {
        use super::*;

        /// Which value is set.
        #[derive(Clone, PartialEq, Oneof)]
        pub enum Value {
            /// `DIMVALUE`.
            #[prost(int64, tag = "1")]
            DimValue(i64),
            /// `DIMPARAM`.
            #[prost(string, tag = "2")]
            DimParam(String),
        }
    }
}

/// Dimension helpers used when declaring graph inputs and outputs.
#[derive(Clone, Copy, Debug)]
pub enum Dim<'a> {
    /// A fixed size.
    Fixed(i64),
    /// A symbolic size (`dim_param`).
    Named(&'a str),
}

/// A float/int tensor value-info with the given (possibly symbolic) shape.
pub fn tensor_value_info(name: &str, elem_type: DataType, dims: &[Dim<'_>]) -> ValueInfoProto {
    use tensor_shape_proto::{dimension::Value as D, Dimension};
    let dim = dims
        .iter()
        .map(|d| Dimension {
            value: Some(match d {
                Dim::Fixed(v) => D::DimValue(*v),
                Dim::Named(s) => D::DimParam((*s).to_string()),
            }),
            denotation: String::new(),
        })
        .collect();
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: elem_type as i32,
                shape: Some(TensorShapeProto { dim }),
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected bytes are hand-encoded from onnx.proto's field numbers: (tag << 3) | wire.
    #[test]
    fn wire_bytes_match_onnx_field_numbers() {
        let m = ModelProto {
            ir_version: 8,
            ..Default::default()
        };
        assert_eq!(m.encode_to_vec(), [0x08, 8]);
        let op = OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        };
        assert_eq!(op.encode_to_vec(), [0x10, 17]);
        let m = ModelProto {
            opset_import: vec![op],
            ..Default::default()
        };
        // opset_import is field 8, length-delimited.
        assert_eq!(m.encode_to_vec(), [0x42, 2, 0x10, 17]);
        // An INT attribute equal to zero must still carry its value (proto2 presence).
        let a = AttributeProto {
            name: "a".into(),
            r#type: AttributeType::Int as i32,
            i: Some(0),
            ..Default::default()
        };
        assert_eq!(a.encode_to_vec(), [0x0a, 1, b'a', 0x18, 0, 0xa0, 0x01, 2]);
        // Unpacked repeated int64 (proto2 default): one tag per element.
        let t = TensorProto {
            dims: vec![2, 3],
            data_type: DataType::Float as i32,
            ..Default::default()
        };
        assert_eq!(t.encode_to_vec(), [0x08, 2, 0x08, 3, 0x10, 1]);
        // external_data is field 13 (length-delimited), data_location field 14 (varint).
        let t = TensorProto {
            external_data: vec![StringStringEntryProto {
                key: "k".into(),
                value: "v".into(),
            }],
            data_location: Some(DataLocation::External as i32),
            ..Default::default()
        };
        assert_eq!(
            t.encode_to_vec(),
            [0x6a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', 0x70, 1]
        );
        let d = tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimParam("b".into())),
            denotation: String::new(),
        };
        assert_eq!(d.encode_to_vec(), [0x12, 1, b'b']);
        let e = StringStringEntryProto {
            key: "k".into(),
            value: "v".into(),
        };
        assert_eq!(e.encode_to_vec(), [0x0a, 1, b'k', 0x12, 1, b'v']);
    }

    #[test]
    fn model_roundtrips() {
        let vi = tensor_value_info("x", DataType::Float, &[Dim::Named("batch"), Dim::Fixed(3)]);
        let g = GraphProto {
            name: "g".into(),
            node: vec![NodeProto {
                input: vec!["x".into(), String::new()],
                output: vec!["y".into()],
                op_type: "Relu".into(),
                ..Default::default()
            }],
            input: vec![vi.clone()],
            output: vec![vi],
            ..Default::default()
        };
        let m = ModelProto {
            ir_version: 8,
            graph: Some(g),
            ..Default::default()
        };
        let back = ModelProto::decode(m.encode_to_vec().as_slice()).expect("decodes");
        assert_eq!(back, m);
    }
}
