//! Attribute and tensor constructors: the one place that knows which `AttributeProto`
//! field carries which attribute type and how a tensor's values are laid out in
//! `raw_data` (little-endian, row-major). Used by the exporter's graph builder and by the
//! calibration's QDQ rewrite.

use crate::proto::{
    type_proto, AttributeProto, AttributeType, DataType, TensorProto, TypeProto, ValueInfoProto,
};

/// An `INT` attribute (the value is written even when it is 0: proto2 presence).
pub fn attr_int(name: &str, v: i64) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Int as i32,
        i: Some(v),
        ..Default::default()
    }
}

/// A `FLOAT` attribute.
pub fn attr_float(name: &str, v: f32) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Float as i32,
        f: Some(v),
        ..Default::default()
    }
}

/// An `INTS` attribute.
pub fn attr_ints(name: &str, v: &[i64]) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::Ints as i32,
        ints: v.to_vec(),
        ..Default::default()
    }
}

/// A `STRING` attribute (UTF-8 bytes).
pub fn attr_string(name: &str, v: &str) -> AttributeProto {
    AttributeProto {
        name: name.into(),
        r#type: AttributeType::String as i32,
        s: Some(v.as_bytes().to_vec()),
        ..Default::default()
    }
}

/// A tensor of element type `data_type` whose values are already encoded in `raw_data`.
pub fn tensor_raw(
    name: impl Into<String>,
    dims: &[i64],
    data_type: DataType,
    raw_data: Vec<u8>,
) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: data_type as i32,
        name: name.into(),
        raw_data,
        ..Default::default()
    }
}

/// A float32 tensor.
pub fn tensor_f32(name: impl Into<String>, dims: &[i64], v: &[f32]) -> TensorProto {
    let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    tensor_raw(name, dims, DataType::Float, raw)
}

/// An int64 tensor.
pub fn tensor_i64(name: impl Into<String>, dims: &[i64], v: &[i64]) -> TensorProto {
    let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    tensor_raw(name, dims, DataType::Int64, raw)
}

/// An int32 tensor.
pub fn tensor_i32(name: impl Into<String>, dims: &[i64], v: &[i32]) -> TensorProto {
    let raw = v.iter().flat_map(|x| x.to_le_bytes()).collect();
    tensor_raw(name, dims, DataType::Int32, raw)
}

/// An int8 tensor.
pub fn tensor_i8(name: impl Into<String>, dims: &[i64], v: &[i8]) -> TensorProto {
    tensor_raw(
        name,
        dims,
        DataType::Int8,
        v.iter().map(|&x| x as u8).collect(),
    )
}

/// The values of a float32 tensor, from `raw_data` or `float_data`; `None` when the
/// tensor is not float32 or its raw bytes are not a whole number of floats.
pub fn float_values(t: &TensorProto) -> Option<Vec<f32>> {
    if t.data_type != DataType::Float as i32 {
        return None;
    }
    if t.raw_data.is_empty() {
        return Some(t.float_data.clone());
    }
    if t.raw_data.len() % 4 != 0 {
        return None;
    }
    Some(
        t.raw_data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensors_roundtrip_their_values() {
        let t = tensor_f32("w", &[2], &[1.5, -2.0]);
        assert_eq!(t.raw_data, [0, 0, 192, 63, 0, 0, 0, 192]);
        assert_eq!(float_values(&t).unwrap(), [1.5, -2.0]);
        assert_eq!(tensor_i8("q", &[2], &[-1, 3]).raw_data, [255, 3]);
        assert_eq!(tensor_i32("b", &[1], &[-2]).raw_data, (-2i32).to_le_bytes());
        assert!(
            float_values(&tensor_i64("s", &[1], &[4])).is_none(),
            "not float"
        );
        let mut odd = t.clone();
        odd.raw_data.pop();
        assert!(float_values(&odd).is_none(), "3 bytes left over");
        let inline = TensorProto {
            data_type: DataType::Float as i32,
            float_data: vec![0.25],
            ..Default::default()
        };
        assert_eq!(float_values(&inline).unwrap(), [0.25]);
    }

    #[test]
    fn attributes_carry_their_type() {
        assert_eq!(attr_int("axis", 0).i, Some(0));
        assert_eq!(attr_int("axis", 0).r#type, AttributeType::Int as i32);
        assert_eq!(attr_float("alpha", 0.5).f, Some(0.5));
        assert_eq!(attr_ints("pads", &[1, 1]).ints, [1, 1]);
        assert_eq!(
            attr_string("mode", "linear").s.as_deref(),
            Some(&b"linear"[..])
        );
    }
}

/// A graph output declaring a float32 tensor of any shape.
pub fn float_output(name: &str) -> ValueInfoProto {
    ValueInfoProto {
        name: name.to_string(),
        r#type: Some(TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: DataType::Float as i32,
                shape: None,
            })),
            denotation: String::new(),
        }),
        doc_string: String::new(),
    }
}
