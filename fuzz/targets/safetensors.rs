//! safetensors checkpoints: the input is a whole `.safetensors` file.
//!
//! Feeds it, as a scratch file, to the readers of each command that takes a checkpoint:
//! `Checkpoint::read` (`segtool eval`, `train --resume`, `export --verify`) and, when it
//! reads, `load_model` (the spec's model built, then the file's tensors copied in, names
//! and shapes checked); `segtool_export::export_onnx` (`segtool export`: the spec, every
//! weight the graph needs, the ONNX written to a scratch file); and
//! `import::read_state_dict` (`segtool import` of a `.safetensors`).
//!
//! Refuses nothing.

use segtool_export::ExportOptions;

pub fn run(data: &[u8]) {
    let path = super::support::write("c.safetensors", data);
    if let Ok(ckpt) = segtool_train::Checkpoint::read(&path) {
        let _ = segtool_train::load_model(&ckpt, tch::Device::Cpu);
    }
    let out = super::support::scratch().join("c.onnx");
    let _ = segtool_export::export_onnx(&path, &out, &ExportOptions::default());
    let _ = segtool_train::import::read_state_dict(&path);
}
