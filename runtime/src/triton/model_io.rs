//! Reading a model's graph inputs and outputs ([`model_io`]) from an ONNX file without
//! loading its weights: a streaming protobuf reader walks `ModelProto.graph`, reads only
//! the name of each initializer (seeking past its data) and decodes the `ValueInfoProto`s
//! into [`TensorInfo`] (name, ONNX element type, dims and their symbolic names). Used by
//! the Triton support and by `OrtOptions::with_fixed_input_size` (which needs the input's
//! symbolic dimension names); the byte-level decoding is shared with
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
    /// Each dim's symbolic name (`dim_param`, e.g. `height`), where it has one.
    pub dim_names: Vec<Option<String>>,
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
            let end = r.varint()?.saturating_add(r.0.pos);
            while r.0.pos < end {
                let (field, wire) = r.key()?;
                match (field, wire) {
                    (5, 2) => {
                        let n = r.varint()?;
                        if let Some(name) = r.tensor_name(r.0.pos.saturating_add(n))? {
                            initializers.insert(name);
                        }
                    }
                    (11 | 12, 2) => {
                        let n = r.varint()?;
                        let buf = r.bytes(n)?;
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
        if self.0.pos.saturating_add(n) > end {
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

    /// `TensorProto.name` (field 8) of the initializer ending at `end`, leaving the
    /// reader at `end`. Other fields, the weight bytes among them, are skipped by seeking,
    /// so a 2 GB model is scanned without reading its weights.
    fn tensor_name(&mut self, end: u64) -> Result<Option<String>> {
        let mut name = None;
        while self.0.pos < end {
            let (field, wire) = self.key()?;
            if (field, wire) == (8, 2) {
                let n = self.varint()?;
                if self.0.pos.saturating_add(n) > end {
                    return Err(self.invalid(format!(
                        "an initializer name at byte {} runs past its tensor",
                        self.0.pos
                    )));
                }
                name = String::from_utf8(self.bytes(n)?).ok();
            } else {
                self.skip_value(wire, end)?;
            }
        }
        Ok(name)
    }
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
    let mut dim_names = Vec::new();
    for (f, v) in fields(tensor?)? {
        match (f, v) {
            (1, Value::Varint(t)) => elem_type = t as i32,
            (2, Value::Bytes(shape)) => {
                for (f, v) in fields(shape)? {
                    if let (1, Value::Bytes(dim)) = (f, v) {
                        let (mut d, mut symbol) = (None, None);
                        for (f, v) in fields(dim)? {
                            match (f, v) {
                                (1, Value::Varint(n)) => d = Some(n as i64),
                                (2, Value::Bytes(p)) => symbol = String::from_utf8(p.to_vec()).ok(),
                                _ => {}
                            }
                        }
                        dims.push(d);
                        dim_names.push(symbol.filter(|s| !s.is_empty()));
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
        dim_names,
    })
}
