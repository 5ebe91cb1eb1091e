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
//!
//! This module holds the options, the report and [`write_repository`]; `config.rs` writes
//! the `config.pbtxt` text and `model_io.rs` reads the graph's I/O from the ONNX file.

mod config;
mod model_io;

use std::path::{Path, PathBuf};

use crate::error::{Result, RuntimeError};
use segtool_onnx::ModelFileError;

pub use config::config_pbtxt;
pub use model_io::{model_io, ModelIo, TensorInfo};

/// Repository settings, builder style.
///
/// # Example
///
/// ```
/// use segtool_runtime::expert::triton::{config_pbtxt, ModelIo, TensorInfo, TritonOptions};
/// // The graph's I/O, as `model_io("model.onnx")` reads it: dynamic batch, height, width.
/// let tensor = |name: &str, channels| TensorInfo {
///     name: name.into(),
///     elem_type: 1, // float32
///     dims: vec![None, Some(channels), None, None],
///     dim_names: vec![None; 4],
/// };
/// let io = ModelIo { inputs: vec![tensor("image", 3)], outputs: vec![tensor("logits", 19)] };
/// let options = TritonOptions::new().with_max_batch_size(4).with_gpus(vec![0, 1]);
/// let (config, notes) = config_pbtxt("danet", &io, &options)?;
/// assert!(config.contains("max_batch_size: 4") && config.contains("kind: KIND_GPU"));
/// assert!(config.contains("preferred_batch_size: [ 2, 4 ]"));
/// assert!(notes.is_empty()); // nothing had to be adjusted
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
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
    /// The defaults: name from the file, batches up to 8, 100 µs queue delay, one CPU
    /// instance.
    pub fn new() -> Self {
        Self::default()
    }

    /// Folder name and `name:` of the model.
    pub fn with_model_name(mut self, name: impl Into<String>) -> Self {
        self.model_name = Some(name.into());
        self
    }

    /// Largest batch Triton forms (0: no batching).
    pub fn with_max_batch_size(mut self, n: u32) -> Self {
        self.max_batch_size = n;
        self
    }

    /// How long the dynamic batcher waits for more requests, in microseconds.
    pub fn with_max_queue_delay_us(mut self, us: u64) -> Self {
        self.max_queue_delay_us = us;
        self
    }

    /// Batch sizes the dynamic batcher prefers (those above `max_batch_size` are dropped).
    pub fn with_preferred_batch_sizes(mut self, sizes: Vec<u32>) -> Self {
        self.preferred_batch_sizes = sizes;
        self
    }

    /// GPUs to place instances on (empty: CPU instances).
    pub fn with_gpus(mut self, gpus: Vec<u32>) -> Self {
        self.gpus = gpus;
        self
    }

    /// Instances when running on the CPU.
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

/// What [`write_repository`] wrote.
///
/// # Example
///
/// ```no_run
/// use std::path::Path;
/// use segtool_runtime::expert::triton::{write_repository, TritonOptions};
/// let options = TritonOptions::new().with_model_name("danet").with_gpus(vec![0]);
/// let report = write_repository(Path::new("model.onnx"), Path::new("models"), &options)?;
/// println!("wrote {} and {}", report.config_path.display(), report.model_path.display());
/// if report.max_batch_size == 0 {
///     for note in &report.notes {
///         eprintln!("note: {note}"); // e.g. a fixed batch dimension: no dynamic batching
///     }
/// }
/// # Ok::<(), segtool_runtime::RuntimeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct TritonReport {
    /// The model's name in the repository (its folder name).
    pub model_name: String,
    /// `DIR/<model_name>`.
    pub model_dir: PathBuf,
    /// `DIR/<model_name>/config.pbtxt`.
    pub config_path: PathBuf,
    /// `DIR/<model_name>/1/model.onnx`, the copy of the model.
    pub model_path: PathBuf,
    /// The `max_batch_size` written (0 when the model's batch dimension is fixed).
    pub max_batch_size: u32,
    /// Adjustments made to the options, for the user.
    pub notes: Vec<String>,
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
        return Err(RuntimeError::File(ModelFileError::Io {
            path: dir.join(&name),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("Triton model name {name:?}: use letters, digits, '_', '-', '.'"),
            ),
        }));
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
        move |source| RuntimeError::File(ModelFileError::Io { path, source })
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

#[cfg(test)]
mod tests {
    use super::*;
    use segtool_testkit::{tiny_model_bytes, tiny_spec};

    fn tensor(name: &str, elem_type: i32, dims: &[Option<i64>]) -> TensorInfo {
        TensorInfo {
            name: name.into(),
            elem_type,
            dims: dims.to_vec(),
            dim_names: vec![None; dims.len()],
        }
    }

    #[test]
    fn dynamic_model_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("danet.onnx");
        let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
        let io = model_io(&path).unwrap();
        let symbolic = |mut t: TensorInfo| {
            t.dim_names = ["batch", "", "height", "width"]
                .map(|s| (!s.is_empty()).then(|| s.to_string()))
                .to_vec();
            t
        };
        assert_eq!(
            io,
            ModelIo {
                inputs: vec![symbolic(tensor("image", 1, &[None, Some(3), None, None]))],
                outputs: vec![symbolic(tensor("logits", 1, &[None, Some(3), None, None]))],
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
