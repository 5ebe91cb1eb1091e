//! TensorRT INT8 calibration cache (the text format `IInt8EntropyCalibrator2` reads and
//! writes): a header `TRT-<version>-EntropyCalibration2`, then one `<tensor>: <hex>` line
//! per tensor, the hex being the IEEE-754 bits of the f32 scale `threshold / 127`.

use std::collections::BTreeMap;

/// TensorRT version written in the header (8.6.1, as `NvInferVersion.h` encodes it).
pub const TRT_VERSION: u32 = 8601;

/// The cache text for `thresholds` (sorted by tensor name: deterministic).
pub fn cache_text(thresholds: &BTreeMap<String, f32>) -> String {
    let mut s = format!("TRT-{TRT_VERSION}-EntropyCalibration2\n");
    for (name, &t) in thresholds {
        s.push_str(&format!(
            "{name}: {:08x}\n",
            crate::qdq::scale_of(t).to_bits()
        ));
    }
    s
}

/// Parses a cache back into scales (tests, tools).
pub fn parse(text: &str) -> Option<(String, BTreeMap<String, f32>)> {
    let mut lines = text.lines();
    let header = lines.next()?.to_string();
    let mut out = BTreeMap::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (name, hex) = l.rsplit_once(": ")?;
        out.insert(
            name.to_string(),
            f32::from_bits(u32::from_str_radix(hex, 16).ok()?),
        );
    }
    Some((header, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_format() {
        let mut t = BTreeMap::new();
        t.insert("image".to_string(), 127.0);
        t.insert("a/conv:0".to_string(), 2.54);
        let text = cache_text(&t);
        assert_eq!(
            text,
            "TRT-8601-EntropyCalibration2\na/conv:0: 3ca3d70a\nimage: 3f800000\n"
        );
        let (h, back) = parse(&text).unwrap();
        assert_eq!(h, "TRT-8601-EntropyCalibration2");
        assert_eq!(back["image"], 1.0);
        assert_eq!(back["a/conv:0"], 2.54f32 / 127.0);
    }
}
