//! TensorRT calibration caches: the input is a whole cache file's text.
//!
//! Feeds it to `trt_cache::parse`, the reader that mirrors ONNX Runtime's TensorRT EP
//! (how `segtool calibrate`'s caches are checked); bytes that are not UTF-8 are read
//! lossily, as the tests read a file. A cache it accepts must have a `TRT-` header (what
//! ONNX Runtime checks before its first ':').
//!
//! Refuses nothing.

pub fn run(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    if let Some((header, ranges)) = segtool_calibration::trt_cache::parse(&text) {
        let head = header.split(':').next().unwrap_or("");
        assert!(header.is_empty() || head.contains("TRT-"), "parse accepted header {header:?}");
        let _ = ranges.len();
    }
}
