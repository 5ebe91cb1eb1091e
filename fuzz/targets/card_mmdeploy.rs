//! mmdeploy SDK folders: the input is a whole `pipeline.json`.
//!
//! Writes it into a folder with mmdeploy's `deploy.json` (naming `end2end.onnx`, a graph
//! segtool did not write, input `input` as mmdeploy's) and resolves the folder's card as
//! `Segmenter::builder(..).open()` does for an SDK folder (`card::resolve`: deploy.json's network,
//! pipeline.json's transforms, ResizeMask post-processing and input map), then prepares an
//! image under the card.
//!
//! Refuses nothing.

const DEPLOY: &str = r#"{"version": "1.3.1", "task": "Segmentor", "models": [{"name": "da",
"net": "end2end.onnx", "weights": "", "backend": "onnxruntime", "precision": "FP32",
"batch_size": 1, "dynamic_shape": true}], "customs": []}"#;

pub fn run(data: &[u8]) {
    let dir = super::support::fresh_dir("mmdeploy");
    std::fs::write(dir.join("end2end.onnx"), super::support::foreign_model_bytes()).unwrap();
    std::fs::write(dir.join("deploy.json"), DEPLOY).unwrap();
    std::fs::write(dir.join("pipeline.json"), data).unwrap();
    super::support::resolve_and_prepare(&dir);
}
