//! Hugging Face folders: the input is a whole `preprocessor_config.json`, then, after a NUL
//! byte if there is one, a whole `config.json` (none without it).
//!
//! Writes them beside `model.onnx` (a graph segtool did not write) and resolves the
//! folder's card as `Segmenter::builder(..).open()` does for a Hugging Face export (`card::resolve`:
//! resize, rescale and normalisation from the processor, `id2label` from the config),
//! then prepares an image under the card.
//!
//! Refuses nothing.

pub fn run(data: &[u8]) {
    let mut input = super::support::Bytes::new(data);
    let processor = input.until_nul();
    let config = (!input.is_empty()).then(|| input.rest());
    let dir = super::support::fresh_dir("huggingface");
    std::fs::write(dir.join("model.onnx"), super::support::foreign_model_bytes()).unwrap();
    std::fs::write(dir.join("preprocessor_config.json"), processor).unwrap();
    if let Some(config) = config {
        std::fs::write(dir.join("config.json"), config).unwrap();
    }
    super::support::resolve_and_prepare(&dir);
}
