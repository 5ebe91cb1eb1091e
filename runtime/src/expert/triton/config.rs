//! `config.pbtxt` text for a Triton model: [`config_pbtxt`] turns the graph's inputs and
//! outputs plus [`TritonOptions`] into the protobuf text format Triton reads (batching,
//! dynamic batching, instance groups), and notes where the options had to be adjusted.
//! Kept apart from the file writing and the ONNX reading because it is a pure function of
//! its arguments, tested on hand-built [`ModelIo`] values.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::model_io::ModelIo;
use super::TritonOptions;
use crate::error::{Result, RuntimeError};
use segtool_onnx::ModelFileError;

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
            let ty = t.triton_type().ok_or_else(|| {
                RuntimeError::File(ModelFileError::Invalid {
                    path: PathBuf::from(name),
                    message: format!(
                        "{section} {:?}: ONNX element type {} has no Triton type",
                        t.name, t.elem_type
                    ),
                })
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
