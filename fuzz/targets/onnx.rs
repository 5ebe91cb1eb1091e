//! ONNX protobuf with segtool metadata: the input is a whole `.onnx` file.
//!
//! Feeds it (written to a scratch file, as every reader takes a path) to what opening and
//! calibrating a model read: `ModelFile::read` (the streaming reader behind
//! `Segmenter::builder(..).open()`, `load_spec`, the C ABI and Triton: metadata, spec, I/O contract,
//! TensorRT profile hints), `read_metadata` (`segtool model-info`), `card::resolve` (the
//! card of a model from elsewhere), and for `segtool calibrate` prost's whole-model decode
//! (`load_model`), the spec or card feed and the QDQ plan over the graph.
//!
//! Refuses nothing: every input is fed. No engine is built (tract's and ONNX Runtime's
//! graph loaders are theirs, and far too slow per input).

use segtool_calibration::qdq::{self, Layout};
use segtool_runtime::card::{self, CardRequest};

pub fn run(data: &[u8]) {
    let path = super::support::write("m.onnx", data);
    if let Ok(model) = segtool_runtime::ModelFile::read(&path) {
        let _ = model.contract();
    }
    let _ = segtool_runtime::expert::read_metadata(&path);
    if let Ok(resolved) = card::resolve(&path, &CardRequest::new()) {
        let _ = card::spec_of(&resolved.card);
    }
    if let Ok(model) = segtool_calibration::load_model(&path) {
        let _ = segtool_calibration::Feed::of_model(&model, None);
        let _ = qdq::plan(&model, &[], Layout::Portable);
        let _ = qdq::plan(&model, &[], Layout::OrtCpu);
        let _ = qdq::plan(&model, &[], Layout::OpenVino);
    }
}
