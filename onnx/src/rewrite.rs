//! Rewriting a model's `metadata_props` without touching anything else: every other
//! top-level field of the `ModelProto` is copied byte for byte, entries under the keys
//! being set are dropped, and the new entries are appended (protobuf allows a repeated
//! field's elements anywhere in the message). The output is written to a temporary file
//! and renamed, so it is never half-written.

use std::path::Path;

use prost::Message;

use crate::error::{ModelFileError, Result};
use crate::proto::StringStringEntryProto;
use crate::read::{parse_entry, read_props};

/// `ModelProto.metadata_props` (onnx.proto).
const MODEL_METADATA_PROPS: u64 = 14;

/// Copies the model at `src` to `dst` with `entries` set in its `metadata_props`
/// (replacing entries with the same keys). `src` is checked first as [`read_props`]
/// checks it (a truncated or non-ONNX file is refused, naming it). External data stays
/// where it is: its locations are relative to the model's folder, so a copy into another
/// folder of a model with external data needs its data files beside it.
pub fn copy_with_metadata(src: &Path, dst: &Path, entries: &[(String, String)]) -> Result<()> {
    read_props(src)?;
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ModelFileError::Io { path, source }
    };
    let bytes = std::fs::read(src).map_err(io(src))?;
    let invalid = |message: String| ModelFileError::Invalid {
        path: src.into(),
        message,
    };
    let mut out = Vec::with_capacity(bytes.len() + 1024);
    let mut pos = 0usize;
    while pos < bytes.len() {
        let start = pos;
        let key = varint(&bytes, &mut pos)
            .ok_or_else(|| invalid(format!("bad field key at byte {start}")))?;
        let (field, wire) = (key >> 3, key & 7);
        let payload_start;
        match wire {
            0 => {
                varint(&bytes, &mut pos)
                    .ok_or_else(|| invalid(format!("bad varint at byte {pos}")))?;
                payload_start = pos;
            }
            1 => {
                pos += 8;
                payload_start = pos;
            }
            5 => {
                pos += 4;
                payload_start = pos;
            }
            2 => {
                let n = varint(&bytes, &mut pos)
                    .ok_or_else(|| invalid(format!("bad length at byte {pos}")))?;
                payload_start = pos;
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
        let replaced = field == MODEL_METADATA_PROPS
            && wire == 2
            && parse_entry(&bytes[payload_start..pos])
                .is_some_and(|(k, _)| entries.iter().any(|(key, _)| *key == k));
        if !replaced {
            out.extend_from_slice(&bytes[start..pos]);
        }
    }
    for (key, value) in entries {
        let entry = StringStringEntryProto {
            key: key.clone(),
            value: value.clone(),
        };
        prost::encoding::encode_key(
            MODEL_METADATA_PROPS as u32,
            prost::encoding::WireType::LengthDelimited,
            &mut out,
        );
        prost::encoding::encode_varint(entry.encoded_len() as u64, &mut out);
        entry.encode(&mut out).expect("a Vec grows");
    }
    segtool_spec::io::write_atomic(dst, &out).map_err(io(dst))
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
