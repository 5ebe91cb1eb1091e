//! Reading a model's graph inputs and outputs ([`model_io`]) from an ONNX file without
//! loading its weights: a streaming protobuf reader walks `ModelProto.graph`, skips the
//! initializer data and decodes the `ValueInfoProto`s into [`TensorInfo`] (name, ONNX
//! element type, dims). Separate because it is the only part of the Triton support that
//! parses the ONNX wire format; the byte-level decoding is shared with
//! `engine::read_metadata` through `crate::onnx_scan`.

use std::path::Path;

use crate::error::{Result, RuntimeError};
use crate::onnx_scan::{fields, ProtoReader, Value};

/// One graph input or output: name, ONNX element type, dims (`None` = dynamic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    pub name: String,
    pub elem_type: i32,
    pub dims: Vec<Option<i64>>,
}

impl TensorInfo {
    /// Triton's `data_type` for the ONNX element type.
    pub fn triton_type(&self) -> Option<&'static str> {
        Some(match self.elem_type {
            1 => "TYPE_FP32",
            2 => "TYPE_UINT8",
            3 => "TYPE_INT8",
            4 => "TYPE_UINT16",
            5 => "TYPE_INT16",
            6 => "TYPE_INT32",
            7 => "TYPE_INT64",
            8 => "TYPE_STRING",
            9 => "TYPE_BOOL",
            10 => "TYPE_FP16",
            11 => "TYPE_FP64",
            12 => "TYPE_UINT32",
            13 => "TYPE_UINT64",
            16 => "TYPE_BF16",
            _ => return None,
        })
    }
}

/// The graph's inputs (initializers excluded) and outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelIo {
    pub inputs: Vec<TensorInfo>,
    pub outputs: Vec<TensorInfo>,
}

/// Reads the graph's inputs and outputs from an ONNX file without loading the weights.
pub fn model_io(path: impl AsRef<Path>) -> Result<ModelIo> {
    let path = path.as_ref();
    let mut r = Reader(ProtoReader::open(path)?);
    let len = r.0.len;
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut initializers = std::collections::HashSet::new();
    let mut found_graph = false;
    while r.0.pos < len {
        let (field, wire) = r.key()?;
        if field == 7 && wire == 2 {
            found_graph = true;
            let end = r.varint()? + r.0.pos;
            while r.0.pos < end {
                let (field, wire) = r.key()?;
                match (field, wire) {
                    (11 | 12 | 5, 2) => {
                        let n = r.varint()?;
                        let buf = r.bytes(n)?;
                        match field {
                            5 => {
                                if let Some(name) = tensor_name(&buf) {
                                    initializers.insert(name);
                                }
                            }
                            _ => {
                                let info = value_info(&buf).ok_or_else(|| {
                                    r.invalid(format!(
                                        "malformed graph {} entry",
                                        if field == 11 { "input" } else { "output" }
                                    ))
                                })?;
                                if field == 11 {
                                    inputs.push(info)
                                } else {
                                    outputs.push(info)
                                }
                            }
                        }
                    }
                    (_, w) => r.skip_value(w, end)?,
                }
            }
        } else {
            r.skip_value(wire, len)?;
        }
    }
    if !found_graph {
        return Err(r.invalid("no graph found (empty or not an ONNX model)".into()));
    }
    inputs.retain(|t: &TensorInfo| !initializers.contains(&t.name));
    if inputs.is_empty() || outputs.is_empty() {
        return Err(r.invalid("the graph declares no input or no output".into()));
    }
    Ok(ModelIo { inputs, outputs })
}

/// The graph walk's view of the file: [`ProtoReader`] plus bounds checks against the end
/// of the enclosing message (the graph, or the file).
struct Reader(ProtoReader);

impl Reader {
    fn invalid(&self, message: String) -> RuntimeError {
        self.0.invalid(message)
    }

    fn varint(&mut self) -> Result<u64> {
        self.0.varint()
    }

    fn key(&mut self) -> Result<(u64, u64)> {
        self.0.key()
    }

    fn skip(&mut self, n: u64, end: u64) -> Result<()> {
        if self.0.pos + n > end {
            return Err(self.invalid(format!(
                "a field at byte {} claims {n} bytes past its end (file truncated?)",
                self.0.pos
            )));
        }
        self.0.advance(n)
    }

    fn skip_value(&mut self, wire: u64, end: u64) -> Result<()> {
        match wire {
            0 => self.varint().map(drop),
            1 => self.skip(8, end),
            5 => self.skip(4, end),
            2 => {
                let n = self.varint()?;
                self.skip(n, end)
            }
            w => Err(self.invalid(format!(
                "not an ONNX protobuf: wire type {w} at byte {}",
                self.0.pos
            ))),
        }
    }

    fn bytes(&mut self, n: u64) -> Result<Vec<u8>> {
        self.0.read(n)
    }
}

/// `TensorProto.name` (field 8).
fn tensor_name(buf: &[u8]) -> Option<String> {
    fields(buf)?.into_iter().find_map(|(f, v)| match (f, v) {
        (8, Value::Bytes(b)) => String::from_utf8(b.to_vec()).ok(),
        _ => None,
    })
}

/// `ValueInfoProto { name = 1; type = 2 { tensor_type = 1 { elem_type = 1; shape = 2 {
/// dim = 1 { dim_value = 1; dim_param = 2 } } } } }`.
fn value_info(buf: &[u8]) -> Option<TensorInfo> {
    let mut name = None;
    let mut tensor = None;
    for (f, v) in fields(buf)? {
        match (f, v) {
            (1, Value::Bytes(b)) => name = Some(String::from_utf8(b.to_vec()).ok()?),
            (2, Value::Bytes(ty)) => {
                for (f, v) in fields(ty)? {
                    if let (1, Value::Bytes(t)) = (f, v) {
                        tensor = Some(t);
                    }
                }
            }
            _ => {}
        }
    }
    let mut elem_type = 0;
    let mut dims = Vec::new();
    for (f, v) in fields(tensor?)? {
        match (f, v) {
            (1, Value::Varint(t)) => elem_type = t as i32,
            (2, Value::Bytes(shape)) => {
                for (f, v) in fields(shape)? {
                    if let (1, Value::Bytes(dim)) = (f, v) {
                        let mut d = None;
                        for (f, v) in fields(dim)? {
                            if let (1, Value::Varint(n)) = (f, v) {
                                d = Some(n as i64);
                            }
                        }
                        dims.push(d);
                    }
                }
            }
            _ => {}
        }
    }
    Some(TensorInfo {
        name: name?,
        elem_type,
        dims,
    })
}
