//! ONNX: the streaming reader (`load_spec`, `model_io`), tract and ONNX Runtime, over
//! mutated exports and hand-made files (huge declared lengths, deep nesting).

use std::path::Path;

use segtool_runtime::{EngineKind, Segmenter};

use super::{case_dir, child_runner, err_string, fixtures, LIMIT, MIB, SMALL_FILE_BOUND};
use crate::common;
use super::sweep_support::{self, case_count, mutations, Tally};

/// Offsets of the top-level protobuf fields' length prefixes (just after each key).
fn protobuf_length_offsets(b: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = 0;
    let varint = |pos: &mut usize| -> Option<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let x = *b.get(*pos)?;
            *pos += 1;
            v |= u64::from(x & 0x7f) << shift;
            if x & 0x80 == 0 {
                return Some(v);
            }
        }
        None
    };
    while pos < b.len() {
        let Some(key) = varint(&mut pos) else { break };
        match key & 7 {
            0 => drop(varint(&mut pos)),
            2 => {
                out.push(pos);
                let Some(n) = varint(&mut pos) else { break };
                pos += n as usize;
            }
            1 => pos += 8,
            5 => pos += 4,
            _ => break,
        }
    }
    out
}

#[test]
fn sweep_onnx_streaming_reader() {
    let f = fixtures();
    let hot = protobuf_length_offsets(&f.onnx);
    let cases = mutations(&f.onnx, 0x0a11, case_count(1200), &hot);
    let dir = case_dir("onnx_stream");
    let mut meta = Tally::new("onnx metadata (load_spec)");
    meta.run_in_process(&dir, "onnx", &cases, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_runtime::expert::load_spec(p)
            .map(drop)
            .map_err(err_string)
    });
    let mut io = Tally::new("onnx graph io (model_io)");
    io.run_in_process(&dir, "onnx", &cases, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_runtime::expert::triton::model_io(p)
            .map(drop)
            .map_err(err_string)
    });
    meta.finish();
    io.finish();
}

/// Runs a model the way `segtool infer` does: open, then one 24x16 image.
pub(super) fn open_and_run(path: &Path, engine: EngineKind) -> Result<(), String> {
    let mut builder = Segmenter::builder(path).engine(engine);
    if engine == EngineKind::Ort {
        // One intra-op thread: the sweep's memory bounds were measured with it.
        builder = builder.threads(1);
    }
    let mut s = builder.open().map_err(err_string)?;
    let img = common::test_image(1, 24, 16);
    s.segment(&img).map(drop).map_err(|e| {
        // Run-time errors are about the model too: say which.
        format!("{}: {e}", path.display())
    })
}

#[test]
fn sweep_onnx_tract() {
    let f = fixtures();
    let hot = protobuf_length_offsets(&f.onnx);
    let cases = mutations(&f.onnx, 0x7ac7, case_count(120), &hot);
    let mut t = Tally::new("onnx tract (Segmenter::builder + segment)");
    t.run_in_process(
        &case_dir("onnx_tract"),
        "onnx",
        &cases,
        LIMIT,
        512 * MIB,
        |p| open_and_run(p, EngineKind::Tract),
    );
    t.finish();
}

#[test]
fn sweep_onnx_ort() {
    let f = fixtures();
    let hot = protobuf_length_offsets(&f.onnx);
    let cases = mutations(&f.onnx, 0x0e7, case_count(150), &hot);
    let mut t = Tally::new("onnx ort (Segmenter::builder + segment)");
    child_runner().run(&mut t, &case_dir("onnx_ort"), "onnx", "ort", &cases);
    t.finish();
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
    out
}

/// A `(field, length-delimited)` protobuf key and length prefix around `inner`.
fn wrap(field: u64, inner: &[u8]) -> Vec<u8> {
    let mut out = varint((field << 3) | 2);
    out.extend_from_slice(&varint(inner.len() as u64));
    out.extend_from_slice(inner);
    out
}

#[test]
fn onnx_huge_lengths_and_deep_nesting() {
    let f = fixtures();
    let dir = case_dir("onnx_hand");
    let mut cases = Vec::new();
    // The graph's length prefix set to 2^62 (a 10-byte varint replacing the real one).
    let hot = protobuf_length_offsets(&f.onnx);
    for &at in &hot {
        let mut b = f.onnx[..at].to_vec();
        let mut end = at;
        while f.onnx[end] & 0x80 != 0 {
            end += 1;
        }
        b.extend_from_slice(&varint(1 << 62));
        b.extend_from_slice(&f.onnx[end + 1..]);
        cases.push(sweep_support::Case {
            what: format!("length prefix at {at} set to 2^62"),
            bytes: b,
        });
    }
    // Inside the graph: an input declaring 2^62 bytes; a graph declaring u64::MAX.
    for (what, tail) in [
        ("graph input declaring 2^62 bytes", {
            let mut input = vec![0x5a]; // field 11, length-delimited
            input.extend_from_slice(&varint(1 << 62));
            let mut g = vec![0x3a];
            g.extend_from_slice(&varint(input.len() as u64 + (1 << 62)));
            g.extend_from_slice(&input);
            g
        }),
        ("graph declaring u64::MAX bytes", {
            let mut g = vec![0x3a];
            g.extend_from_slice(&varint(u64::MAX));
            g.extend_from_slice(&[0x5a, 0x02, 0x0a, 0x00]);
            g
        }),
    ] {
        let mut b = f.onnx.clone();
        b.extend_from_slice(&tail);
        cases.push(sweep_support::Case {
            what: what.into(),
            bytes: b,
        });
    }
    // A graph nesting 20000 levels of node -> attribute -> subgraph, after the real model.
    let mut nested = Vec::new();
    for _ in 0..20000 {
        nested = wrap(1, &wrap(5, &wrap(6, &nested))); // node.attribute.g
    }
    let mut b = f.onnx.clone();
    b.extend_from_slice(&wrap(7, &nested));
    cases.push(sweep_support::Case {
        what: "graph nesting 20000 subgraphs deep".into(),
        bytes: b,
    });
    // An initializer declaring 1 TB (dims [2^38] floats) over 16 bytes of data.
    let tensor = [
        vec![0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x08], // dims: 2^38
        vec![0x10, 0x01],                               // data_type FLOAT
        wrap(8, b"huge"),                               // name
        wrap(9, &[0u8; 16]),                            // raw_data
    ]
    .concat();
    let mut b = f.onnx.clone();
    b.extend_from_slice(&wrap(7, &wrap(5, &tensor)));
    cases.push(sweep_support::Case {
        what: "initializer declaring 1 TB".into(),
        bytes: b,
    });
    let mut t = Tally::new("onnx hand-made (stream reader)");
    t.run_in_process(&dir, "onnx", &cases, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_runtime::expert::load_spec(p)
            .map_err(err_string)
            .and(segtool_runtime::expert::triton::model_io(p).map_err(err_string))
            .map(drop)
    });
    t.finish();
    for kind in ["tract", "ort"] {
        let mut t = Tally::new(&format!("onnx hand-made ({kind})"));
        child_runner().run(&mut t, &dir, "onnx", kind, &cases);
        t.finish();
    }
}
