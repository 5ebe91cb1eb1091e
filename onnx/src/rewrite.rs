//! Rewriting a model's `metadata_props` without touching anything else: every other
//! top-level field of the `ModelProto` is copied byte for byte, entries under the keys
//! being set are dropped, and the new entries are appended (protobuf allows a repeated
//! field's elements anywhere in the message); or appending nodes, initializers and outputs
//! to the graph the same way. The output is written to a temporary file and renamed, so
//! it is never half-written.

use std::path::Path;

use prost::Message;

use crate::error::{ModelFileError, Result};
use crate::proto::{GraphProto, OperatorSetIdProto, StringStringEntryProto};
use crate::read::{parse_entry, read_props};

/// `ModelProto.metadata_props` (onnx.proto).
const MODEL_METADATA_PROPS: u64 = 14;

/// `ModelProto.graph` (onnx.proto).
const MODEL_GRAPH: u64 = 7;
/// `ModelProto.opset_import` (onnx.proto).
const MODEL_OPSET_IMPORT: u64 = 8;

/// One top-level field of a `ModelProto`: its number, wire type, and byte ranges (the
/// whole field from its key, and its payload).
struct Field {
    number: u64,
    wire: u64,
    start: usize,
    payload: usize,
    end: usize,
}

/// The model at `src`, checked first as [`read_props`] checks it (a truncated or non-ONNX
/// file is refused, naming it), as bytes and its top-level fields.
fn top_level_fields(src: &Path) -> Result<(Vec<u8>, Vec<Field>)> {
    read_props(src)?;
    let bytes = std::fs::read(src).map_err(|source| ModelFileError::Io {
        path: src.to_path_buf(),
        source,
    })?;
    let invalid = |message: String| ModelFileError::Invalid {
        path: src.into(),
        message,
    };
    let mut fields = Vec::new();
    let mut pos = 0usize;
    while pos < bytes.len() {
        let start = pos;
        let key = varint(&bytes, &mut pos)
            .ok_or_else(|| invalid(format!("bad field key at byte {start}")))?;
        let (number, wire) = (key >> 3, key & 7);
        let payload;
        match wire {
            0 => {
                varint(&bytes, &mut pos)
                    .ok_or_else(|| invalid(format!("bad varint at byte {pos}")))?;
                payload = pos;
            }
            1 => {
                pos += 8;
                payload = pos;
            }
            5 => {
                pos += 4;
                payload = pos;
            }
            2 => {
                let n = varint(&bytes, &mut pos)
                    .ok_or_else(|| invalid(format!("bad length at byte {pos}")))?;
                payload = pos;
                pos = pos
                    .checked_add(usize::try_from(n).unwrap_or(usize::MAX))
                    .filter(|&end| end <= bytes.len())
                    .ok_or_else(|| invalid(format!("a field at byte {start} runs past the end")))?;
            }
            w => return Err(invalid(format!("wire type {w} at byte {start}"))),
        }
        if pos > bytes.len() {
            return Err(invalid(format!(
                "a field at byte {start} runs past the end"
            )));
        }
        fields.push(Field {
            number,
            wire,
            start,
            payload,
            end: pos,
        });
    }
    Ok((bytes, fields))
}

fn write(dst: &Path, out: &[u8]) -> Result<()> {
    segtool_model_spec::io::write_atomic(dst, out).map_err(|source| ModelFileError::Io {
        path: dst.to_path_buf(),
        source,
    })
}

/// Appends a length-delimited field `number` holding `payload` to `out`.
fn push_field(out: &mut Vec<u8>, number: u64, payload_len: usize) {
    prost::encoding::encode_key(
        number as u32,
        prost::encoding::WireType::LengthDelimited,
        out,
    );
    prost::encoding::encode_varint(payload_len as u64, out);
}

/// Copies the model at `src` to `dst` with `entries` set in its `metadata_props`
/// (replacing entries with the same keys). `src` is checked first as [`read_props`]
/// checks it (a truncated or non-ONNX file is refused, naming it). External data stays
/// where it is: its locations are relative to the model's folder, so a copy into another
/// folder of a model with external data needs its data files beside it.
pub fn copy_with_metadata(src: &Path, dst: &Path, entries: &[(String, String)]) -> Result<()> {
    let (bytes, fields) = top_level_fields(src)?;
    let mut out = Vec::with_capacity(bytes.len() + 1024);
    for f in &fields {
        let replaced = f.number == MODEL_METADATA_PROPS
            && f.wire == 2
            && parse_entry(&bytes[f.payload..f.end])
                .is_some_and(|(k, _)| entries.iter().any(|(key, _)| *key == k));
        if !replaced {
            out.extend_from_slice(&bytes[f.start..f.end]);
        }
    }
    for (key, value) in entries {
        let entry = StringStringEntryProto {
            key: key.clone(),
            value: value.clone(),
        };
        push_field(&mut out, MODEL_METADATA_PROPS, entry.encoded_len());
        entry.encode(&mut out).expect("a Vec grows");
    }
    write(dst, &out)
}

/// Copies the model at `src` to `dst` with `additions`' nodes, initializers and outputs
/// appended to its graph (protobuf merges a repeated field's elements wherever they
/// appear in the message, so the graph's own bytes are copied unchanged and the additions
/// follow them). Everything else is copied byte for byte, fields segtool does not model
/// included. The caller names the additions so that they do not collide.
pub fn copy_with_graph_additions(src: &Path, dst: &Path, additions: &GraphProto) -> Result<()> {
    let (bytes, fields) = top_level_fields(src)?;
    let extra = additions.encode_to_vec();
    let mut out = Vec::with_capacity(bytes.len() + extra.len() + 16);
    let mut graphs = 0;
    for f in &fields {
        if f.number == MODEL_GRAPH && f.wire == 2 {
            graphs += 1;
            push_field(&mut out, MODEL_GRAPH, f.end - f.payload + extra.len());
            out.extend_from_slice(&bytes[f.payload..f.end]);
            out.extend_from_slice(&extra);
        } else {
            out.extend_from_slice(&bytes[f.start..f.end]);
        }
    }
    if graphs != 1 {
        return Err(ModelFileError::Invalid {
            path: src.into(),
            message: format!("{graphs} graph fields in the model (one expected)"),
        });
    }
    write(dst, &out)
}

/// The version of the default (`ai.onnx`) operator set the model at `path` imports,
/// `None` when it imports none.
pub fn default_opset(path: &Path) -> Result<Option<i64>> {
    let (bytes, fields) = top_level_fields(path)?;
    Ok(fields
        .iter()
        .filter(|f| f.number == MODEL_OPSET_IMPORT && f.wire == 2)
        .filter_map(|f| OperatorSetIdProto::decode(&bytes[f.payload..f.end]).ok())
        .find(|op| op.domain.is_empty() || op.domain == "ai.onnx")
        .map(|op| op.version))
}

fn varint(bytes: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}
