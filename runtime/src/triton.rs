//! A Triton Inference Server model repository for an exported model:
//!
//! ```text
//! DIR/<model_name>/config.pbtxt     platform "onnxruntime_onnx", I/O from the model
//! DIR/<model_name>/1/model.onnx     the model itself
//! ```
//!
//! Input and output names, data types and dimensions are read from the ONNX graph (a
//! small streaming protobuf reader: the weights are skipped, not loaded). Dynamic
//! dimensions become `-1`. With `max_batch_size > 0` the batch dimension is left out of
//! `dims`, as Triton wants, and `dynamic_batching` is configured; a model whose batch
//! dimension is fixed cannot be batched by Triton, so it gets `max_batch_size: 0` and
//! its full shape (reported in [`TritonReport::notes`]).

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use crate::engine::ensure_exists;
use crate::error::{Result, RuntimeError};

/// Repository settings, builder style.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TritonOptions {
    /// Folder name and `name:` of the model; the ONNX file's stem when `None`.
    pub model_name: Option<String>,
    /// Largest batch Triton forms; 0 disables batching (and dynamic batching).
    pub max_batch_size: u32,
    /// How long the dynamic batcher waits for more requests.
    pub max_queue_delay_us: u64,
    /// Batch sizes the dynamic batcher prefers; empty: the powers of two from 2 up to
    /// `max_batch_size`, and `max_batch_size` itself.
    pub preferred_batch_sizes: Vec<u32>,
    /// One `KIND_GPU` instance group per GPU listed; empty: `KIND_CPU` instances.
    pub gpus: Vec<u32>,
    /// Instances per GPU.
    pub instances_per_gpu: u32,
    /// Instances when running on the CPU.
    pub cpu_instances: u32,
}

impl Default for TritonOptions {
    fn default() -> Self {
        Self {
            model_name: None,
            max_batch_size: 8,
            max_queue_delay_us: 100,
            preferred_batch_sizes: Vec::new(),
            gpus: Vec::new(),
            instances_per_gpu: 1,
            cpu_instances: 1,
        }
    }
}

impl TritonOptions {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    pub fn with_max_batch_size(mut self, n: u32) -> Self {
        self.max_batch_size = n;
        self
    }

    pub fn with_max_queue_delay_us(mut self, us: u64) -> Self {
        self.max_queue_delay_us = us;
        self
    }

    pub fn with_preferred_batch_sizes(mut self, sizes: Vec<u32>) -> Self {
        self.preferred_batch_sizes = sizes;
        self
    }

    pub fn with_gpus(mut self, gpus: Vec<u32>) -> Self {
        self.gpus = gpus;
        self
    }

    pub fn with_cpu_instances(mut self, n: u32) -> Self {
        self.cpu_instances = n;
        self
    }

    fn preferred(&self) -> Vec<u32> {
        if !self.preferred_batch_sizes.is_empty() {
            let mut v: Vec<u32> = self
                .preferred_batch_sizes
                .iter()
                .copied()
                .filter(|&b| b > 0 && b <= self.max_batch_size)
                .collect();
            v.sort_unstable();
            v.dedup();
            return v;
        }
        let mut v: Vec<u32> = std::iter::successors(Some(2u32), |b| b.checked_mul(2))
            .take_while(|&b| b <= self.max_batch_size)
            .collect();
        if v.last() != Some(&self.max_batch_size) && self.max_batch_size > 1 {
            v.push(self.max_batch_size);
        }
        v
    }
}

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

/// What [`write_repository`] wrote.
#[derive(Clone, Debug)]
pub struct TritonReport {
    pub model_name: String,
    pub model_dir: PathBuf,
    pub config_path: PathBuf,
    pub model_path: PathBuf,
    /// The `max_batch_size` written (0 when the model's batch dimension is fixed).
    pub max_batch_size: u32,
    /// Adjustments made to the options, for the user.
    pub notes: Vec<String>,
}

/// `config.pbtxt` for `io` under `opts`, and notes on adjustments. `name` is the model
/// name written into the config.
pub fn config_pbtxt(
    name: &str,
    io: &ModelIo,
    opts: &TritonOptions,
) -> Result<(String, Vec<String>)> {
    let mut notes = Vec::new();
    let mut max_batch = opts.max_batch_size;
    let fixed_batch = io
        .inputs
        .iter()
        .chain(&io.outputs)
        .find(|t| t.dims.first().is_none_or(|d| d.is_some()));
    if max_batch > 0 {
        if let Some(t) = fixed_batch {
            notes.push(format!(
                "{:?} has no dynamic batch dimension ({}): max_batch_size 0, no dynamic batching",
                t.name,
                fmt_dims(&t.dims)
            ));
            max_batch = 0;
        }
    }
    let mut s = String::new();
    let _ = writeln!(s, "name: \"{name}\"");
    let _ = writeln!(s, "platform: \"onnxruntime_onnx\"");
    let _ = writeln!(s, "max_batch_size: {max_batch}");
    for (section, tensors) in [("input", &io.inputs), ("output", &io.outputs)] {
        let _ = writeln!(s, "{section} [");
        for (i, t) in tensors.iter().enumerate() {
            let ty = t.triton_type().ok_or_else(|| RuntimeError::InvalidModel {
                path: PathBuf::from(name),
                message: format!(
                    "{section} {:?}: ONNX element type {} has no Triton type",
                    t.name, t.elem_type
                ),
            })?;
            let dims = if max_batch > 0 {
                &t.dims[1..]
            } else {
                &t.dims[..]
            };
            let _ = writeln!(s, "  {{");
            let _ = writeln!(s, "    name: \"{}\"", t.name);
            let _ = writeln!(s, "    data_type: {ty}");
            let _ = writeln!(s, "    dims: [ {} ]", fmt_dims(dims));
            let _ = writeln!(s, "  }}{}", if i + 1 < tensors.len() { "," } else { "" });
        }
        let _ = writeln!(s, "]");
    }
    if max_batch > 0 {
        let preferred = TritonOptions {
            max_batch_size: max_batch,
            ..opts.clone()
        }
        .preferred();
        let _ = writeln!(s, "dynamic_batching {{");
        if !preferred.is_empty() {
            let list: Vec<String> = preferred.iter().map(|b| b.to_string()).collect();
            let _ = writeln!(s, "  preferred_batch_size: [ {} ]", list.join(", "));
        }
        let _ = writeln!(
            s,
            "  max_queue_delay_microseconds: {}",
            opts.max_queue_delay_us
        );
        let _ = writeln!(s, "}}");
    }
    let _ = writeln!(s, "instance_group [");
    if opts.gpus.is_empty() {
        let _ = writeln!(s, "  {{");
        let _ = writeln!(s, "    count: {}", opts.cpu_instances.max(1));
        let _ = writeln!(s, "    kind: KIND_CPU");
        let _ = writeln!(s, "  }}");
    } else {
        for (i, gpu) in opts.gpus.iter().enumerate() {
            let _ = writeln!(s, "  {{");
            let _ = writeln!(s, "    count: {}", opts.instances_per_gpu.max(1));
            let _ = writeln!(s, "    kind: KIND_GPU");
            let _ = writeln!(s, "    gpus: [ {gpu} ]");
            let _ = writeln!(s, "  }}{}", if i + 1 < opts.gpus.len() { "," } else { "" });
        }
    }
    let _ = writeln!(s, "]");
    Ok((s, notes))
}

fn fmt_dims(dims: &[Option<i64>]) -> String {
    dims.iter()
        .map(|d| d.map_or("-1".to_string(), |d| d.to_string()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `dir/<name>/config.pbtxt` and `dir/<name>/1/model.onnx` (a copy of `onnx`).
pub fn write_repository(onnx: &Path, dir: &Path, opts: &TritonOptions) -> Result<TritonReport> {
    let io = model_io(onnx)?;
    let name = match &opts.model_name {
        Some(n) => n.clone(),
        None => onnx
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "model".into()),
    };
    if name.is_empty()
        || name.starts_with('.')
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return Err(RuntimeError::Io {
            path: dir.join(&name),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("Triton model name {name:?}: use letters, digits, '_', '-', '.'"),
            ),
        });
    }
    let (config, notes) = config_pbtxt(&name, &io, opts)?;
    let max_batch_size = if notes.is_empty() {
        opts.max_batch_size
    } else {
        0
    };
    let model_dir = dir.join(&name);
    let version_dir = model_dir.join("1");
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| RuntimeError::Io { path, source }
    };
    std::fs::create_dir_all(&version_dir).map_err(io_err(&version_dir))?;
    let model_path = version_dir.join("model.onnx");
    let tmp = version_dir.join(".model.onnx.tmp");
    std::fs::copy(onnx, &tmp).map_err(io_err(&tmp))?;
    std::fs::rename(&tmp, &model_path).map_err(io_err(&model_path))?;
    let config_path = model_dir.join("config.pbtxt");
    std::fs::write(&config_path, config).map_err(io_err(&config_path))?;
    Ok(TritonReport {
        model_name: name,
        model_dir,
        config_path,
        model_path,
        max_batch_size,
        notes,
    })
}

/// Reads the graph's inputs and outputs from an ONNX file without loading the weights.
pub fn model_io(path: impl AsRef<Path>) -> Result<ModelIo> {
    let path = path.as_ref();
    ensure_exists(path)?;
    let io = |source| RuntimeError::Io {
        path: path.into(),
        source,
    };
    let file = File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let mut r = Reader {
        r: BufReader::new(file),
        pos: 0,
        path: path.into(),
    };
    let mut inputs = Vec::new();
    let mut outputs = Vec::new();
    let mut initializers = std::collections::HashSet::new();
    let mut found_graph = false;
    while r.pos < len {
        let (field, wire) = r.key()?;
        if field == 7 && wire == 2 {
            found_graph = true;
            let end = r.varint()? + r.pos;
            while r.pos < end {
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

struct Reader {
    r: BufReader<File>,
    pos: u64,
    path: PathBuf,
}

impl Reader {
    fn invalid(&self, message: String) -> RuntimeError {
        RuntimeError::InvalidModel {
            path: self.path.clone(),
            message,
        }
    }

    fn io(&self) -> impl FnOnce(std::io::Error) -> RuntimeError + '_ {
        move |e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                self.invalid(format!(
                    "file ends in the middle of a field at byte {}",
                    self.pos
                ))
            } else {
                RuntimeError::Io {
                    path: self.path.clone(),
                    source: e,
                }
            }
        }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let mut b = [0u8];
            let res = self.r.read_exact(&mut b);
            res.map_err(self.io())?;
            self.pos += 1;
            v |= u64::from(b[0] & 0x7f) << shift;
            if b[0] & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(self.invalid(format!("malformed varint before byte {}", self.pos)))
    }

    fn key(&mut self) -> Result<(u64, u64)> {
        let at = self.pos;
        let k = self.varint()?;
        if k >> 3 == 0 {
            return Err(self.invalid(format!("not an ONNX protobuf: field number 0 at byte {at}")));
        }
        Ok((k >> 3, k & 7))
    }

    fn skip(&mut self, n: u64, end: u64) -> Result<()> {
        if self.pos + n > end {
            return Err(self.invalid(format!(
                "a field at byte {} claims {n} bytes past its end (file truncated?)",
                self.pos
            )));
        }
        let res = self.r.seek(SeekFrom::Current(n as i64));
        res.map_err(self.io())?;
        self.pos += n;
        Ok(())
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
                self.pos
            ))),
        }
    }

    fn bytes(&mut self, n: u64) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; n as usize];
        let res = self.r.read_exact(&mut buf);
        res.map_err(self.io())?;
        self.pos += n;
        Ok(buf)
    }
}

/// A decoded protobuf field of an in-memory message.
enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Other,
}

/// The fields of a message, `None` on malformed input.
fn fields(mut buf: &[u8]) -> Option<Vec<(u64, Value<'_>)>> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{tiny_model_bytes, tiny_spec};

    fn tensor(name: &str, elem_type: i32, dims: &[Option<i64>]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            elem_type,
            dims: dims.to_vec(),
        }
    }

    #[test]
    fn dynamic_model_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("danet.onnx");
        let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
        let io = model_io(&path).unwrap();
        assert_eq!(
            io,
            ModelIo {
                inputs: vec![tensor("image", 1, &[None, Some(3), None, None])],
                outputs: vec![tensor("logits", 1, &[None, Some(3), None, None])],
            }
        );
        let opts = TritonOptions::new()
            .with_max_batch_size(8)
            .with_gpus(vec![0, 1]);
        let (text, notes) = config_pbtxt("danet", &io, &opts).unwrap();
        assert!(notes.is_empty());
        let want = r#"name: "danet"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  {
    name: "image"
    data_type: TYPE_FP32
    dims: [ 3, -1, -1 ]
  }
]
output [
  {
    name: "logits"
    data_type: TYPE_FP32
    dims: [ 3, -1, -1 ]
  }
]
dynamic_batching {
  preferred_batch_size: [ 2, 4, 8 ]
  max_queue_delay_microseconds: 100
}
instance_group [
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 0 ]
  },
  {
    count: 1
    kind: KIND_GPU
    gpus: [ 1 ]
  }
]
"#;
        assert_eq!(text, want);

        let out = dir.path().join("repo");
        let report = write_repository(&path, &out, &opts).unwrap();
        assert_eq!(report.model_name, "danet");
        assert_eq!(
            std::fs::read_to_string(out.join("danet/config.pbtxt")).unwrap(),
            want
        );
        assert_eq!(
            std::fs::read(out.join("danet/1/model.onnx")).unwrap(),
            std::fs::read(&path).unwrap()
        );
        assert!(write_repository(&path, &out, &opts.clone().with_model_name("a b")).is_err());
    }

    #[test]
    fn static_model_config() {
        // Fixed batch 1, fixed size, uint8 NHWC in, uint8 mask out (export --argmax
        // --preprocess --batch 1 --input-size 512x1024): no batching possible.
        let io = ModelIo {
            inputs: vec![tensor(
                "image",
                2,
                &[Some(1), Some(512), Some(1024), Some(3)],
            )],
            outputs: vec![tensor("mask", 2, &[Some(1), Some(512), Some(1024)])],
        };
        let opts = TritonOptions::new().with_cpu_instances(2);
        let (text, notes) = config_pbtxt("seg", &io, &opts).unwrap();
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(text.contains("max_batch_size: 0\n"), "{text}");
        assert!(
            text.contains("data_type: TYPE_UINT8\n    dims: [ 1, 512, 1024, 3 ]"),
            "{text}"
        );
        assert!(text.contains("dims: [ 1, 512, 1024 ]"), "{text}");
        assert!(!text.contains("dynamic_batching"), "{text}");
        assert!(
            text.contains("  {\n    count: 2\n    kind: KIND_CPU\n  }\n]"),
            "{text}"
        );

        // Static size, dynamic batch: batched, only the batch dim dropped.
        let io = ModelIo {
            inputs: vec![tensor("image", 1, &[None, Some(3), Some(512), Some(512)])],
            outputs: vec![tensor("logits", 1, &[None, Some(19), Some(512), Some(512)])],
        };
        let opts = TritonOptions::new()
            .with_max_batch_size(6)
            .with_max_queue_delay_us(500);
        let (text, notes) = config_pbtxt("seg", &io, &opts).unwrap();
        assert!(notes.is_empty());
        assert!(text.contains("max_batch_size: 6\n"));
        assert!(text.contains("dims: [ 3, 512, 512 ]"));
        assert!(text.contains("dims: [ 19, 512, 512 ]"));
        assert!(text.contains("preferred_batch_size: [ 2, 4, 6 ]"));
        assert!(text.contains("max_queue_delay_microseconds: 500"));
        let (text, _) = config_pbtxt("seg", &io, &opts.with_max_batch_size(0)).unwrap();
        assert!(text.contains("dims: [ -1, 3, 512, 512 ]") && !text.contains("dynamic_batching"));
    }
}
