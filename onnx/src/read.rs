//! Reading an exported file without loading its weights: one streaming pass over the
//! file collects `metadata_props` and the graph's inputs and outputs (initializers are
//! skipped by seeking, only their names read), so opening a 2 GB model costs a few
//! reads. [`ModelFile::read`] is the one value every component of the runtime takes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use crate::error::Result;
use crate::metadata::{InputLayout, IoContract, Metadata, OutputKind};
use crate::proto::DataType;
use crate::scan::{fields, ProtoReader, Value};

/// `ModelProto` and `GraphProto` field numbers (onnx.proto).
mod field {
    pub const MODEL_GRAPH: u64 = 7;
    pub const MODEL_METADATA_PROPS: u64 = 14;
    pub const GRAPH_INITIALIZER: u64 = 5;
    pub const GRAPH_INPUT: u64 = 11;
    pub const GRAPH_OUTPUT: u64 = 12;
    pub const TENSOR_NAME: u64 = 8;
}

/// One graph input or output: name, ONNX element type, dims (`None` = dynamic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The value's name.
    pub name: String,
    /// ONNX `TensorProto.DataType` number (1 = float32, 2 = uint8, 7 = int64, ...).
    pub elem_type: i32,
    /// Each dimension, `None` where it is symbolic or absent.
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
    /// Graph inputs that are not initializers, in order.
    pub inputs: Vec<TensorInfo>,
    /// Graph outputs, in order.
    pub outputs: Vec<TensorInfo>,
}

impl ModelIo {
    /// The contract the graph itself declares: uint8 rank-4 input means `--preprocess`,
    /// an integer rank-3 output `--argmax`; `None` when the first input or output is
    /// neither a segtool layout nor typed.
    pub fn contract(&self) -> Option<IoContract> {
        let (input, output) = (self.inputs.first()?, self.outputs.first()?);
        let input = match (input.elem_type, input.dims.len()) {
            (t, 4) if t == DataType::Uint8 as i32 => InputLayout::NhwcU8,
            (t, 4) if t == DataType::Float as i32 => InputLayout::NchwF32,
            _ => return None,
        };
        let output = match (output.elem_type, output.dims.len()) {
            (t, 4) if t == DataType::Float as i32 => OutputKind::Logits,
            (t, 3) if t == DataType::Uint8 as i32 || t == DataType::Int64 as i32 => {
                OutputKind::Mask
            }
            _ => return None,
        };
        Some(IoContract { input, output })
    }
}

/// An exported model as read once: its path, typed metadata and graph I/O. Engines,
/// TensorRT options, Triton and the C library all take this value instead of reading
/// the file again.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// segtool's metadata, typed.
    pub metadata: Metadata,
    /// The graph's inputs and outputs.
    pub io: ModelIo,
}

impl ModelFile {
    /// Reads `path`: fails on a missing, truncated or non-ONNX file, a missing or invalid
    /// spec, malformed segtool metadata, or a graph without inputs or outputs.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let (props, io) = scan(path, true)?;
        let io = io.expect("asked for the graph's I/O");
        Ok(Self {
            path: path.into(),
            metadata: Metadata::from_props(path, &props)?,
            io,
        })
    }

    /// The layout and output kind to drive the model with: the graph's, else the
    /// recorded one, else plain.
    pub fn contract(&self) -> IoContract {
        IoContract::resolve(self.metadata.contract, self.io.contract())
    }
}

/// All `metadata_props` `(key, value)` pairs in file order, without any check of their
/// values (the graph is skipped unread; a file without one is refused).
pub fn read_props(path: impl AsRef<Path>) -> Result<Vec<(String, String)>> {
    Ok(scan(path.as_ref(), false)?.0)
}

/// The graph's inputs and outputs, without the weights or any metadata check.
pub fn read_io(path: impl AsRef<Path>) -> Result<ModelIo> {
    Ok(scan(path.as_ref(), true)?
        .1
        .expect("asked for the graph's I/O"))
}

/// The one pass over the file: metadata entries, and the graph's I/O when `want_io`.
fn scan(path: &Path, want_io: bool) -> Result<(Vec<(String, String)>, Option<ModelIo>)> {
    let mut r = ProtoReader::open(path)?;
    let len = r.len;
    let mut props = Vec::new();
    let mut io = None;
    let mut has_graph = false;
    while r.pos < len {
        let at = r.pos;
        let (f, wire) = r.key()?;
        match (f, wire) {
            (field::MODEL_METADATA_PROPS, 2) => {
                let n = r.varint()?;
                check_room(&r, n, len)?;
                let entry = r.read(n)?;
                props.push(parse_entry(&entry).ok_or_else(|| {
                    r.invalid(format!("malformed metadata_props entry at byte {at}"))
                })?);
            }
            (field::MODEL_GRAPH, 2) if want_io && io.is_none() => {
                has_graph = true;
                let n = r.varint()?;
                check_room(&r, n, len)?;
                let end = r.pos + n;
                io = Some(graph_io(&mut r, end)?);
            }
            (field::MODEL_GRAPH, 2) => {
                has_graph = true;
                skip_value(&mut r, wire, len)?;
            }
            (_, w) => skip_value(&mut r, w, len)?,
        }
    }
    if !has_graph {
        return Err(r.invalid("no graph found (empty or not an ONNX model)".into()));
    }
    if let Some(io) = &io {
        if io.inputs.is_empty() || io.outputs.is_empty() {
            return Err(r.invalid("the graph declares no input or no output".into()));
        }
    }
    Ok((props, io))
}

/// The graph's inputs (minus initializers) and outputs; leaves the reader at `end`.
fn graph_io(r: &mut ProtoReader, end: u64) -> Result<ModelIo> {
    let (mut inputs, mut outputs) = (Vec::new(), Vec::new());
    let mut initializers = HashSet::new();
    while r.pos < end {
        let (f, wire) = r.key()?;
        match (f, wire) {
            (field::GRAPH_INITIALIZER, 2) => {
                let n = r.varint()?;
                check_room(r, n, end)?;
                let tensor_end = r.pos + n;
                if let Some(name) = tensor_name(r, tensor_end)? {
                    initializers.insert(name);
                }
            }
            (field::GRAPH_INPUT | field::GRAPH_OUTPUT, 2) => {
                let n = r.varint()?;
                check_room(r, n, end)?;
                let buf = r.read(n)?;
                let info = value_info(&buf).ok_or_else(|| {
                    r.invalid(format!(
                        "malformed graph {} entry",
                        if f == field::GRAPH_INPUT {
                            "input"
                        } else {
                            "output"
                        }
                    ))
                })?;
                if f == field::GRAPH_INPUT {
                    inputs.push(info)
                } else {
                    outputs.push(info)
                }
            }
            (_, w) => skip_value(r, w, end)?,
        }
    }
    inputs.retain(|t: &TensorInfo| !initializers.contains(&t.name));
    Ok(ModelIo { inputs, outputs })
}

/// Refuses a length-delimited field of `n` bytes that runs past `end` (the enclosing
/// message or the file).
fn check_room(r: &ProtoReader, n: u64, end: u64) -> Result<()> {
    if r.pos.saturating_add(n) > end {
        return Err(r.invalid(format!(
            "a field at byte {} claims {n} bytes but only {} remain (file truncated?)",
            r.pos,
            end.saturating_sub(r.pos)
        )));
    }
    Ok(())
}

fn skip_value(r: &mut ProtoReader, wire: u64, end: u64) -> Result<()> {
    let n = match wire {
        0 => return r.varint().map(drop),
        1 => 8,
        5 => 4,
        2 => r.varint()?,
        w => {
            return Err(r.invalid(format!(
                "not an ONNX protobuf: wire type {w} at byte {}",
                r.pos
            )))
        }
    };
    check_room(r, n, end)?;
    r.advance(n)
}

/// `TensorProto.name` of the initializer ending at `end`, leaving the reader at `end`;
/// the weight bytes are skipped by seeking.
fn tensor_name(r: &mut ProtoReader, end: u64) -> Result<Option<String>> {
    let mut name = None;
    while r.pos < end {
        let (f, wire) = r.key()?;
        if (f, wire) == (field::TENSOR_NAME, 2) {
            let n = r.varint()?;
            if r.pos.saturating_add(n) > end {
                return Err(r.invalid(format!(
                    "an initializer name at byte {} runs past its tensor",
                    r.pos
                )));
            }
            name = String::from_utf8(r.read(n)?).ok();
        } else {
            skip_value(r, wire, end)?;
        }
    }
    Ok(name)
}

/// Decodes a `StringStringEntryProto { key = 1; value = 2; }`.
pub(crate) fn parse_entry(buf: &[u8]) -> Option<(String, String)> {
    let (mut key, mut value) = (String::new(), String::new());
    for (f, v) in fields(buf)? {
        let Value::Bytes(data) = v else {
            return None;
        };
        let s = String::from_utf8(data.to_vec()).ok()?;
        match f {
            1 => key = s,
            2 => value = s,
            _ => {}
        }
    }
    Some((key, value))
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
    let (mut dims, mut dim_names) = (Vec::new(), Vec::new());
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
