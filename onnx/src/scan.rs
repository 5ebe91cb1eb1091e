//! The protobuf wire-format reading behind [`ModelFile::read`](crate::ModelFile::read):
//! [`ProtoReader`] streams a file (varints, field keys, skipping and reading
//! length-delimited payloads, with positions and error messages in terms of the file) and
//! [`fields`] decodes a small message already in memory. A 2 GB model is scanned by
//! seeking past its weights, never reading them.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::error::{ModelFileError, Result};

/// A forward-only protobuf reader over a model file, tracking the byte position.
pub(crate) struct ProtoReader {
    r: BufReader<File>,
    /// Bytes consumed so far.
    pub(crate) pos: u64,
    /// The file's length.
    pub(crate) len: u64,
    path: PathBuf,
}

impl ProtoReader {
    /// Opens `path` ([`ModelFileError::NotFound`] when it is not a file).
    pub(crate) fn open(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(ModelFileError::NotFound { path: path.into() });
        }
        let io = |source| ModelFileError::Io {
            path: path.into(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        Ok(Self {
            r: BufReader::new(file),
            pos: 0,
            len,
            path: path.into(),
        })
    }

    /// An [`ModelFileError::Invalid`] for this file.
    pub(crate) fn invalid(&self, message: String) -> ModelFileError {
        ModelFileError::Invalid {
            path: self.path.clone(),
            message,
        }
    }

    /// An end of file mid-field is an invalid model; anything else an I/O error.
    fn io_error(&self, e: std::io::Error) -> ModelFileError {
        if e.kind() == std::io::ErrorKind::UnexpectedEof {
            self.invalid(format!(
                "file ends in the middle of a field at byte {}",
                self.pos
            ))
        } else {
            ModelFileError::Io {
                path: self.path.clone(),
                source: e,
            }
        }
    }

    pub(crate) fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8];
            if let Err(e) = self.r.read_exact(&mut b) {
                return Err(self.io_error(e));
            }
            self.pos += 1;
            v |= u64::from(b[0] & 0x7f) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.invalid(format!("malformed varint before byte {}", self.pos)))
    }

    /// A field key as `(field number, wire type)`; field number 0 is refused.
    pub(crate) fn key(&mut self) -> Result<(u64, u64)> {
        let at = self.pos;
        let k = self.varint()?;
        if k >> 3 == 0 {
            return Err(self.invalid(format!("not an ONNX protobuf: field number 0 at byte {at}")));
        }
        Ok((k >> 3, k & 7))
    }

    /// Skips `n` bytes. No bounds check: callers check against the end they know.
    pub(crate) fn advance(&mut self, n: u64) -> Result<()> {
        let Ok(n) = i64::try_from(n) else {
            return Err(self.invalid(format!("a field at byte {} claims {n} bytes", self.pos)));
        };
        if let Err(e) = self.r.seek(SeekFrom::Current(n)) {
            return Err(self.io_error(e));
        }
        self.pos += n as u64;
        Ok(())
    }

    /// Reads the next `n` bytes. Callers check against the end they know; `n` past the end
    /// of the file is refused here, before allocating (a length prefix of 2^62).
    pub(crate) fn read(&mut self, n: u64) -> Result<Vec<u8>> {
        if n > self.len.saturating_sub(self.pos) {
            return Err(self.invalid(format!(
                "a field at byte {} claims {n} bytes but only {} remain (file truncated?)",
                self.pos,
                self.len.saturating_sub(self.pos)
            )));
        }
        let mut buf = vec![0u8; n as usize];
        if let Err(e) = self.r.read_exact(&mut buf) {
            return Err(self.io_error(e));
        }
        self.pos += n;
        Ok(buf)
    }
}

/// A decoded protobuf field of an in-memory message.
pub(crate) enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    /// A fixed32 / fixed64 field (skipped).
    Other,
}

/// A varint at the front of `buf`, which is advanced past it; `None` when malformed.
fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of a message as `(field number, value)`, `None` on malformed input.
pub(crate) fn fields(mut buf: &[u8]) -> Option<Vec<(u64, Value<'_>)>> {
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf)?;
        let v = match key & 7 {
            0 => Value::Varint(varint(&mut buf)?),
            1 | 5 => {
                let n = if key & 7 == 1 { 8 } else { 4 };
                buf = buf.get(n..)?;
                Value::Other
            }
            2 => {
                let n = usize::try_from(varint(&mut buf)?).ok()?;
                let data = buf.get(..n)?;
                buf = &buf[n..];
                Value::Bytes(data)
            }
            _ => return None,
        };
        out.push((key >> 3, v));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_decode_every_wire_type_and_refuse_garbage() {
        // field 1 varint 150, field 2 bytes "ab", field 3 fixed32, field 4 fixed64.
        let msg = [
            0x08, 0x96, 0x01, 0x12, 2, b'a', b'b', 0x1d, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let got = fields(&msg).unwrap();
        assert!(matches!(got[0], (1, Value::Varint(150))));
        assert!(matches!(got[1], (2, Value::Bytes(b"ab"))));
        assert!(matches!(got[2], (3, Value::Other)));
        assert!(matches!(got[3], (4, Value::Other)));
        assert!(fields(&[0x12, 5, b'a']).is_none(), "length past the end");
        assert!(fields(&[0x0b]).is_none(), "wire type 3");
    }
}
