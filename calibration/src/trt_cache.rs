//! TensorRT INT8 calibration cache (the text format `IInt8EntropyCalibrator2` reads and
//! writes): a header `TRT-<version>-EntropyCalibration2`, then one `<tensor>: <hex>` line
//! per tensor, the hex being the IEEE-754 bits of the f32 scale `threshold / 127`.
//!
//! The consumer is ONNX Runtime's TensorRT EP (`ReadDynamicRange` with a native table):
//! it splits each line at the *first* `:`, keeps the name verbatim, reads the rest with
//! `strtoul(.., 16)` and sets the dynamic range `scale * 127`. Names it cannot find in
//! the network are ignored without a word and TensorRT runs those tensors in fp32, so
//! [`cache_text`] refuses names the line format cannot carry and names that are not
//! tensors of the graph, and [`parse`] reads exactly as ONNX Runtime does.

use std::collections::{BTreeMap, HashSet};

use segtool_onnx::proto::GraphProto;

pub use crate::error::TrtCacheError;

/// TensorRT version written in the header (8.6.1, as `NvInferVersion.h` encodes it).
pub const TRT_VERSION: u32 = 8601;

/// Why `name` cannot be a line of the cache, if it cannot.
fn unwritable(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("the name is empty".into());
    }
    if let Some((head, _)) = name.split_once(':') {
        return Some(format!(
            "the name contains ':' and ONNX Runtime's TensorRT EP splits each line at the \
             first ':', so it would read the name {head:?}"
        ));
    }
    // '\r': ORT keeps it (binary read) but text-mode tools and TensorRT itself strip it.
    if name.contains(['\n', '\r']) {
        return Some("the name contains a line break (the cache holds one name per line)".into());
    }
    None
}

/// The values TensorRT sees as tensors of `graph`: graph inputs, node outputs, and
/// initializers (the ONNX parser turns those used as activations into constant layers
/// of the same name).
fn tensor_names(graph: &GraphProto) -> HashSet<&str> {
    let mut names: HashSet<&str> = graph.input.iter().map(|v| v.name.as_str()).collect();
    names.extend(graph.initializer.iter().map(|t| t.name.as_str()));
    names.extend(
        graph
            .node
            .iter()
            .flat_map(|n| n.output.iter().map(String::as_str)),
    );
    names.remove(""); // an omitted optional output, not a tensor
    names
}

/// The cache text for `thresholds` (sorted by tensor name: deterministic), for the
/// float `graph` the thresholds were calibrated on (the one TensorRT builds).
pub fn cache_text(
    graph: &GraphProto,
    thresholds: &BTreeMap<String, f32>,
) -> Result<String, TrtCacheError> {
    let bad: Vec<(String, String)> = thresholds
        .keys()
        .filter_map(|n| unwritable(n).map(|why| (n.clone(), why)))
        .collect();
    if !bad.is_empty() {
        return Err(TrtCacheError::UnwritableNames(bad));
    }
    let known = tensor_names(graph);
    let missing: Vec<String> = thresholds
        .keys()
        .filter(|n| !known.contains(n.as_str()))
        .cloned()
        .collect();
    if !missing.is_empty() {
        return Err(TrtCacheError::NotInGraph(missing));
    }
    let mut s = format!("TRT-{TRT_VERSION}-EntropyCalibration2\n");
    for (name, &t) in thresholds {
        s.push_str(&format!(
            "{name}: {:08x}\n",
            crate::qdq::scale_of(t).to_bits()
        ));
    }
    Ok(s)
}

/// Reads a cache as ONNX Runtime's TensorRT EP does: the first line, and the dynamic
/// range (`scale * 127`, in f32) of every name. `None` where ONNX Runtime throws (the
/// first line, up to its first ':', lacks `TRT-`); an empty text is an empty table.
///
/// Mirrors the C++ exactly, quirks included: lines end at '\n' only; an empty line is
/// the name ""; a line without ':' is both the name and the hex field (the second
/// `std::getline` fails and leaves the string as it was); a field without hex digits is 0.
pub fn parse(text: &str) -> Option<(String, BTreeMap<String, f32>)> {
    let mut lines = text.split_terminator('\n');
    let Some(header) = lines.next() else {
        return Some((String::new(), BTreeMap::new()));
    };
    if !header.split(':').next().unwrap_or("").contains("TRT-") {
        return None;
    }
    let mut out = BTreeMap::new();
    for line in lines {
        let mut fields = line.split(':');
        let name = fields.next().unwrap_or("");
        let hex = fields.next().unwrap_or(name);
        let scale = ort_ieee754_to_float(strtoul_hex(hex));
        out.insert(name.to_string(), scale * 127.0f32);
    }
    Some((header.to_string(), out))
}

/// C's `strtoul(s, nullptr, 16)` with a 64-bit `unsigned long` (Linux): leading
/// whitespace, an optional sign and `0x`, then hex digits; saturates on overflow.
fn strtoul_hex(s: &str) -> u64 {
    let s = s.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (neg, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let s = match s.get(..2) {
        Some("0x" | "0X") if s[2..].starts_with(|c: char| c.is_ascii_hexdigit()) => &s[2..],
        _ => s,
    };
    let mut v: u64 = 0;
    for c in s.chars().map_while(|c| c.to_digit(16)) {
        match v.checked_mul(16).and_then(|v| v.checked_add(c as u64)) {
            Some(n) => v = n,
            None => return u64::MAX,
        }
    }
    if neg {
        v.wrapping_neg()
    } else {
        v
    }
}

/// ONNX Runtime's `ConvertSinglePrecisionIEEE754ToFloat`: the low 32 bits as sign,
/// exponent and mantissa, always with the implicit 1 (zero and subnormals read wrong,
/// Inf and NaN as infinity), computed in double and rounded to float.
fn ort_ieee754_to_float(input: u64) -> f32 {
    let s = (input >> 31) & 1;
    let e = ((input & 0x7f80_0000) >> 23) as i32 - 127;
    let mut m = 0.0f64;
    for i in 0..23 {
        m += ((input >> (23 - i - 1)) & 1) as f64 * 2f64.powi(-(i as i32) - 1);
    }
    let sign = if s == 1 { -1.0 } else { 1.0 };
    (sign * 2f64.powi(e) * (m + 1.0)) as f32
}

#[cfg(test)]
mod tests {
    use super::*;
    use segtool_onnx::proto::{NodeProto, TensorProto, ValueInfoProto};

    /// image -> Conv(w) -> conv_out -> Relu -> relu_out.
    fn graph() -> GraphProto {
        let node = |op: &str, i: &[&str], o: &str| NodeProto {
            op_type: op.into(),
            input: i.iter().map(|s| s.to_string()).collect(),
            output: vec![o.into()],
            ..Default::default()
        };
        GraphProto {
            input: vec![ValueInfoProto {
                name: "image".into(),
                ..Default::default()
            }],
            initializer: vec![TensorProto {
                name: "w".into(),
                ..Default::default()
            }],
            node: vec![
                node("Conv", &["image", "w"], "head/conv_out"),
                node("Relu", &["head/conv_out"], "relu out"),
            ],
            ..Default::default()
        }
    }

    fn table(entries: &[(&str, f32)]) -> BTreeMap<String, f32> {
        entries.iter().map(|(n, t)| (n.to_string(), *t)).collect()
    }

    #[test]
    fn cache_round_trips_through_the_ort_reader_with_ort_ranges() {
        let t = table(&[("image", 127.0), ("head/conv_out", 2.54), ("relu out", 6.1)]);
        let text = cache_text(&graph(), &t).unwrap();
        assert_eq!(
            text,
            "TRT-8601-EntropyCalibration2\nhead/conv_out: 3ca3d70a\nimage: 3f800000\n\
             relu out: 3d44bcac\n"
        );
        let (h, ranges) = parse(&text).unwrap();
        assert_eq!(h, "TRT-8601-EntropyCalibration2");
        assert_eq!(ranges.len(), 3);
        // ORT's range is the written f32 scale times 127 in f32: not always the threshold.
        for (name, &th) in &t {
            let want = crate::qdq::scale_of(th) * 127.0f32;
            assert_eq!(ranges[name], want, "{name}");
        }
        assert_eq!(ranges["image"], 127.0);
        assert_eq!(ranges["head/conv_out"], f32::from_bits(0x3ca3d70a) * 127.0);
    }

    #[test]
    fn names_with_a_colon_or_line_break_are_refused() {
        // "a/conv:0" is a graph tensor, yet ORT would read the name "a/conv".
        let mut g = graph();
        g.node[0].output[0] = "a/conv:0".into();
        g.node[1].input[0] = "a/conv:0".into();
        let err = cache_text(&g, &table(&[("a/conv:0", 2.54), ("image", 1.0)])).unwrap_err();
        let TrtCacheError::UnwritableNames(bad) = &err else {
            panic!("{err}")
        };
        assert_eq!(bad.len(), 1);
        assert_eq!(bad[0].0, "a/conv:0");
        let msg = err.to_string();
        assert!(msg.contains("\"a/conv:0\""), "{msg}");
        assert!(
            msg.contains("first ':'") && msg.contains("\"a/conv\""),
            "{msg}"
        );
        for name in ["two\nlines", "cr\r", ""] {
            let e = cache_text(&graph(), &table(&[(name, 1.0)])).unwrap_err();
            assert!(
                matches!(e, TrtCacheError::UnwritableNames(_)),
                "{name:?}: {e}"
            );
        }
    }

    #[test]
    fn names_absent_from_the_graph_are_refused_and_listed() {
        let t = table(&[("image", 1.0), ("gone", 2.0), ("also/gone", 3.0)]);
        let err = cache_text(&graph(), &t).unwrap_err();
        assert_eq!(
            err,
            TrtCacheError::NotInGraph(vec!["also/gone".into(), "gone".into()])
        );
        let msg = err.to_string();
        assert!(msg.contains("\"gone\"") && msg.contains("fp32"), "{msg}");
        // Node outputs, graph inputs and initializers are all tensors.
        let t = table(&[
            ("image", 1.0),
            ("w", 1.0),
            ("head/conv_out", 1.0),
            ("relu out", 1.0),
        ]);
        assert!(cache_text(&graph(), &t).is_ok());
    }

    #[test]
    fn parse_reads_lines_as_onnx_runtime_does() {
        let text = "TRT-8601-EntropyCalibration2: junk\n\
                    a/conv:0: 3ca3d70a\n\
                    spaced :\t0x3f800000\n\
                    c0ffee\n\
                    empty:\n\
                    bad: zz\n\
                    neg: -1\n\
                    big: 1ffffffff3f800000\n\
                    zero: 0\n";
        let (h, r) = parse(text).unwrap();
        assert_eq!(h, "TRT-8601-EntropyCalibration2: junk");
        // Split at the first ':': the name is "a/conv", the field "0".
        assert_eq!(r["a/conv"], ort_ieee754_to_float(0) * 127.0);
        assert!(!r.contains_key("a/conv:0"));
        // Names are verbatim (not trimmed); strtoul skips whitespace and "0x".
        assert_eq!(r["spaced "], 127.0);
        // No ':': the failed second getline leaves the name as the hex field.
        assert_eq!(r["c0ffee"], f32::from_bits(0xc0ffee) * 127.0);
        assert_eq!(r["empty"], r["zero"]);
        assert_eq!(r["bad"], r["zero"]);
        // strtoul's wrap and saturation, then only the low 32 bits.
        assert_eq!(r["neg"], f32::NEG_INFINITY);
        assert_eq!(r["big"], f32::NEG_INFINITY);
        // ORT reads zero bits with the implicit 1: 2^-127, not 0.
        assert_eq!(r["zero"], (2f64.powi(-127) as f32) * 127.0);
        assert!(r["zero"] > 0.0);
        // A trailing empty line is the name "".
        assert!(parse("TRT-1-x\n\n").unwrap().1.contains_key(""));
        assert_eq!(parse("").unwrap().1.len(), 0);
        assert!(parse("EntropyCalibration2\na: 3f800000\n").is_none());
        assert!(parse("x: TRT-8601\n").is_none());
    }

    #[test]
    fn ort_decoder_matches_ieee754_for_normal_floats() {
        for v in [1.0f32, -2.5, 0.02, 1e-30, 3.4e38, f32::MIN_POSITIVE] {
            assert_eq!(ort_ieee754_to_float(v.to_bits() as u64), v, "{v}");
        }
        assert_eq!(
            ort_ieee754_to_float(f32::INFINITY.to_bits() as u64),
            f32::INFINITY
        );
    }
}
