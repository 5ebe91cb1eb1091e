//! Sidecar model cards: the input is a whole `MODEL.segtool.toml`.
//!
//! Writes it beside a graph segtool did not write (`support::foreign_model_bytes`: no
//! spec, so the sidecar is read) and resolves the model's card as `Segmenter::builder(..).open()`, the
//! C ABI and `segtool card` do (`card::resolve`: the sidecar's TOML, merged with what the
//! graph says, checked against the graph), then prepares an image under the card.
//!
//! Refuses nothing.

pub fn run(data: &[u8]) {
    let dir = super::support::fresh_dir("sidecar");
    let model = dir.join("model.onnx");
    std::fs::write(&model, super::support::foreign_model_bytes()).unwrap();
    std::fs::write(dir.join("model.segtool.toml"), data).unwrap();
    super::support::resolve_and_prepare(&model);
}
