//! Hostile and broken inputs (issue 19): seeded mutation sweeps over every file kind
//! segtool reads, hand-made hostile files (huge declared lengths, deep nesting), and the
//! resource bounds (image bombs, raw frames of the wrong size).
//!
//! Every case must end in an `Err` naming the file (or be accepted, where the mutation
//! left a valid file), never a panic, an abort, a hang, or an allocation over the bound.
//! How the bound is checked: in-process parsers run under `CountingAlloc` (the largest
//! single Rust allocation of the case, see tests/sweep_support); C++ parsers (libtorch's
//! unpickler, ONNX Runtime) and anything that may recurse deeply run in child processes
//! under `ulimit -v` (a crash or an over-large allocation there ends the child, and is
//! reported against its case). Case counts are the defaults below, or
//! `SEGTOOL_SWEEP_CASES` for every sweep. Each sweep prints a summary line (run with
//! `--nocapture` to see them).

mod common;
#[path = "sweep_support/mod.rs"]
mod sweep_support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use common::{p, segtool};
use segtool_runtime::{Backend, OrtOptions, Segmenter};
use sweep_support::{case_count, mutations, ChildRunner, CountingAlloc, Tally};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const MIB: usize = 1 << 20;
/// In-process parsers of small files (all fixtures are under 2 MiB): no single allocation
/// above this.
const SMALL_FILE_BOUND: usize = 64 * MIB;
/// Image decoding: the decoded buffer may reach the limit images are refused over
/// (`segtool_core::images::MAX_DECODED_BYTES`), plus the RGB copy.
const IMAGE_BOUND: usize = 520 * MIB;
/// Virtual memory of a child process (libtorch and ONNX Runtime mapped in).
const CHILD_VMEM_KIB: u64 = 8 << 20;
const LIMIT: Duration = Duration::from_secs(30);

fn child_runner() -> ChildRunner {
    ChildRunner {
        runner_test: "sweep_child",
        vmem_kib: CHILD_VMEM_KIB,
        limit: LIMIT,
    }
}

struct Fixtures {
    dir: PathBuf,
    onnx: Vec<u8>,
    checkpoint: Vec<u8>,
    pth: PathBuf,
}

/// The valid files every sweep starts from, made once per test process: the tiny DANet's
/// checkpoint and its `segtool export`, the PyTorch files of tests/reference/hostile_pth.py.
fn fixtures() -> &'static Fixtures {
    static F: OnceLock<Fixtures> = OnceLock::new();
    F.get_or_init(|| {
        // Under target/tmp, replaced each run (a static is never dropped: a tempdir
        // would be left behind in /tmp by every run).
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("hostile_inputs");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (_, _, ckpt) = common::tiny_checkpoint(&dir, 3);
        let onnx = dir.join("m.onnx");
        let out = segtool(&["export", "--checkpoint", p(&ckpt), "--onnx", p(&onnx)]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let pth = dir.join("pth");
        std::fs::create_dir_all(&pth).unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/hostile_pth.py");
        let status = common::python().arg(script).arg(&pth).status().unwrap();
        assert!(status.success(), "hostile_pth.py failed");
        Fixtures {
            onnx: std::fs::read(&onnx).unwrap(),
            checkpoint: std::fs::read(&ckpt).unwrap(),
            dir,
            pth,
        }
    })
}

fn case_dir(name: &str) -> PathBuf {
    let d = fixtures().dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn err_string(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn anyhow_string(e: anyhow::Error) -> String {
    format!("{e:#}")
}

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

// ---- ONNX ------------------------------------------------------------------------------

#[test]
fn sweep_onnx_streaming_reader() {
    let f = fixtures();
    let hot = protobuf_length_offsets(&f.onnx);
    let cases = mutations(&f.onnx, 0x0a11, case_count(1200), &hot);
    let dir = case_dir("onnx_stream");
    let mut meta = Tally::new("onnx metadata (load_spec)");
    meta.run_in_process(&dir, "onnx", &cases, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_runtime::load_spec(p).map(drop).map_err(err_string)
    });
    let mut io = Tally::new("onnx graph io (model_io)");
    io.run_in_process(&dir, "onnx", &cases, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_runtime::triton::model_io(p)
            .map(drop)
            .map_err(err_string)
    });
    meta.finish();
    io.finish();
}

/// Runs a model the way `segtool infer` does: open, then one 24x16 image.
fn open_and_run(path: &Path, backend: Backend) -> Result<(), String> {
    let mut s = Segmenter::open(path, backend).map_err(err_string)?;
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
    let mut t = Tally::new("onnx tract (Segmenter::open + segment)");
    t.run_in_process(
        &case_dir("onnx_tract"),
        "onnx",
        &cases,
        LIMIT,
        512 * MIB,
        |p| open_and_run(p, Backend::Tract),
    );
    t.finish();
}

#[test]
fn sweep_onnx_ort() {
    let f = fixtures();
    let hot = protobuf_length_offsets(&f.onnx);
    let cases = mutations(&f.onnx, 0x0e7, case_count(150), &hot);
    let mut t = Tally::new("onnx ort (Segmenter::open + segment)");
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
        segtool_runtime::load_spec(p)
            .map_err(err_string)
            .and(segtool_runtime::triton::model_io(p).map_err(err_string))
            .map(drop)
    });
    t.finish();
    for kind in ["tract", "ort"] {
        let mut t = Tally::new(&format!("onnx hand-made ({kind})"));
        child_runner().run(&mut t, &dir, "onnx", kind, &cases);
        t.finish();
    }
}

// ---- safetensors checkpoints -----------------------------------------------------------

/// The safetensors header (JSON) of `bytes` and where the data starts.
fn st_header(bytes: &[u8]) -> (serde_json::Value, usize) {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    (serde_json::from_slice(&bytes[8..8 + n]).unwrap(), 8 + n)
}

fn st_with_header(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
    let text = serde_json::to_vec(header).unwrap();
    let mut out = (text.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&text);
    out.extend_from_slice(data);
    out
}

fn load_checkpoint(p: &Path) -> Result<(), String> {
    let ckpt = segtool_train::Checkpoint::read(p).map_err(anyhow_string)?;
    segtool_train::load_model(&ckpt, tch::Device::Cpu)
        .map(drop)
        .map_err(|e| format!("{}: {e:#}", p.display()))
}

#[test]
fn sweep_safetensors_checkpoints() {
    let f = fixtures();
    let (_, data_start) = st_header(&f.checkpoint);
    let cases = mutations(&f.checkpoint, 0x5afe, case_count(150), &[0, 4, data_start]);
    let dir = case_dir("safetensors");
    let mut t = Tally::new("safetensors (Checkpoint::read + load_model)");
    t.run_in_process(
        &dir,
        "safetensors",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        load_checkpoint,
    );
    t.finish();
    let mut t = Tally::new("safetensors (import::read_state_dict)");
    let few = &cases[..cases.len().min(case_count(200))];
    t.run_in_process(&dir, "safetensors", few, LIMIT, SMALL_FILE_BOUND, |p| {
        segtool_train::import::read_state_dict(p)
            .map(drop)
            .map_err(anyhow_string)
    });
    t.finish();
}

#[test]
fn safetensors_huge_lengths_and_nesting() {
    let f = fixtures();
    let (header, start) = st_header(&f.checkpoint);
    let data = &f.checkpoint[start..];
    let mut cases = Vec::new();
    let mut b = f.checkpoint.clone();
    b[..8].copy_from_slice(&(1u64 << 63).to_le_bytes());
    cases.push(("header length 2^63", b));
    let name = header
        .as_object()
        .unwrap()
        .keys()
        .find(|k| *k != "__metadata__")
        .unwrap()
        .clone();
    let mut h = header.clone();
    h[&name]["shape"] = serde_json::json!([1u64 << 38]); // 2^38 f32 = 1 TB
    cases.push(("a tensor declaring 1 TB (shape)", st_with_header(&h, data)));
    let mut h = header.clone();
    h[&name]["data_offsets"] = serde_json::json!([0, 1u64 << 40]);
    cases.push((
        "a tensor declaring 1 TB (data_offsets)",
        st_with_header(&h, data),
    ));
    let mut h = header.clone();
    h[&name]["shape"] = serde_json::json!([u64::MAX, u64::MAX]);
    cases.push(("shape overflowing u64", st_with_header(&h, data)));
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let text = format!("{{\"x\": {deep}}}");
    let mut b = (text.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(text.as_bytes());
    cases.push(("header JSON nesting 100000 arrays", b));
    let cases: Vec<_> = cases
        .into_iter()
        .map(|(w, bytes)| sweep_support::Case {
            what: w.into(),
            bytes,
        })
        .collect();
    let mut t = Tally::new("safetensors hand-made");
    let dir = case_dir("safetensors_hand");
    t.run_in_process(
        &dir,
        "safetensors",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        load_checkpoint,
    );
    let refused = t.refused;
    t.finish();
    assert_eq!(refused, cases.len(), "every hand-made file is refused");
}

// ---- PyTorch .pth (libtorch's unpickler: in children) ----------------------------------

#[test]
fn sweep_pth_zip_and_legacy() {
    let f = fixtures();
    for (name, seed, n) in [("zip.pth", 0x21b, 250), ("legacy.pth", 0x1e9, 250)] {
        let valid = std::fs::read(f.pth.join(name)).unwrap();
        let cases = mutations(&valid, seed, case_count(n), &[0, 2, 12, 30]);
        let mut t = Tally::new(&format!("pth {name} (import::read_state_dict)"));
        child_runner().run(&mut t, &case_dir("pth"), "pth", "pth", &cases);
        t.finish();
    }
}

#[test]
fn pth_hand_made_hostile_files() {
    let f = fixtures();
    let names = [
        "deep_list_zip.pth",
        "deep_list_legacy.pth",
        "deep_tuple_zip.pth",
        "deep_dict_zip.pth",
        "self_list_zip.pth",
        "numel_2e62_zip.pth",
        "numel_1tb_zip.pth",
        "deflate_4gb_zip.pth",
    ];
    let cases: Vec<_> = names
        .iter()
        .map(|n| sweep_support::Case {
            what: n.to_string(),
            bytes: std::fs::read(f.pth.join(n)).unwrap(),
        })
        .collect();
    let mut t = Tally::new("pth hand-made");
    // 3 GiB of address space: libtorch's own mappings fit, a 4 GiB buffer reserved from
    // the patched size field would not.
    let runner = ChildRunner {
        vmem_kib: 3 << 20,
        ..child_runner()
    };
    runner.run(&mut t, &case_dir("pth_hand"), "pth", "pth", &cases);
    let (refused, accepted) = (t.refused, t.accepted);
    t.finish();
    // deflate_4gb_zip.pth is a sound archive whose size field lies: it may load, within
    // the bound; every other file is refused.
    assert_eq!((refused, accepted), (cases.len() - 1, 1));
}

// ---- TOML configs ----------------------------------------------------------------------

fn load_config(p: &Path) -> Result<(), String> {
    let c =
        segtool_core::config::RunConfig::preset_or_file(p.to_str().unwrap()).map_err(err_string)?;
    c.validate().map_err(|e| format!("{}: {e}", p.display()))
}

#[test]
fn sweep_toml_configs() {
    let text = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/cityscapes-danet-r101.toml"),
    )
    .unwrap();
    let cases = mutations(&text, 0x70e1, case_count(1200), &[]);
    let mut t = Tally::new("toml config (preset_or_file + validate)");
    t.run_in_process(
        &case_dir("toml"),
        "toml",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        load_config,
    );
    t.finish();
    // Deep nesting, in a child: a recursive parser would overflow the stack.
    let deep = [
        format!("a = {}{}", "[".repeat(100_000), "]".repeat(100_000)),
        format!("a = {}1{}", "{b = ".repeat(100_000), "}".repeat(100_000)),
        format!("{}\n", "[a.b.c.d.e.f]\n".repeat(20_000)),
        format!("[{}]\n", vec!["a"; 100_000].join(".")),
    ];
    let cases: Vec<_> = deep
        .iter()
        .enumerate()
        .map(|(i, d)| sweep_support::Case {
            what: format!("nesting {i}"),
            bytes: d.clone().into_bytes(),
        })
        .collect();
    let mut t = Tally::new("toml config nesting");
    child_runner().run(&mut t, &case_dir("toml_deep"), "toml", "toml", &cases);
    let refused = t.refused;
    t.finish();
    assert_eq!(refused, cases.len(), "every hand-made file is refused");
}

// ---- TensorRT calibration cache ----------------------------------------------------------

#[test]
fn sweep_calibration_cache() {
    // The only reader is trt_cache::parse (text in, None when malformed): no file of its
    // own, so the name in the error is added here; the sweep checks it never panics.
    let mut t = std::collections::BTreeMap::new();
    for (i, name) in ["image", "a/conv:0", "head.pam/Softmax:0", "logits"]
        .iter()
        .enumerate()
    {
        t.insert(name.to_string(), 0.5 + i as f32);
    }
    let text = segtool_calibration::trt_cache::cache_text(&t);
    let cases = mutations(text.as_bytes(), 0xca1, case_count(1000), &[]);
    let mut tally = Tally::new("calibration cache (trt_cache::parse)");
    tally.run_in_process(
        &case_dir("calib"),
        "cache",
        &cases,
        LIMIT,
        SMALL_FILE_BOUND,
        |p| {
            let bytes = std::fs::read(p).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            match segtool_calibration::trt_cache::parse(&text) {
                Some(_) => Ok(()),
                None => Err(format!("{}: not a calibration cache", p.display())),
            }
        },
    );
    tally.finish();
}

// ---- images ------------------------------------------------------------------------------

fn encode(img: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

#[test]
fn sweep_png_and_jpeg_images() {
    let rgb = image::DynamicImage::ImageRgb8(common::test_image(2, 48, 32));
    let mask = image::DynamicImage::ImageLuma8(image::GrayImage::from_fn(48, 32, |x, y| {
        image::Luma([((x / 8 + y / 8) % 5) as u8])
    }));
    let png = encode(&rgb, image::ImageFormat::Png);
    let jpeg = encode(&rgb, image::ImageFormat::Jpeg);
    let mask_png = encode(&mask, image::ImageFormat::Png);
    // PNG: IHDR width / height at 16 / 20; JPEG: the SOF0 segment.
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap_or(2);
    let dir = case_dir("images");
    for (name, ext, valid, hot, mask) in [
        (
            "png (dataset::read_rgb)",
            "png",
            &png,
            vec![8, 16, 20, 33],
            false,
        ),
        (
            "jpeg (dataset::read_rgb)",
            "jpg",
            &jpeg,
            vec![2, sof + 5, sof + 7],
            false,
        ),
        (
            "png mask (dataset::read_mask)",
            "png",
            &mask_png,
            vec![8, 16, 20, 33],
            true,
        ),
    ] {
        let cases = mutations(valid, 0x1a6 + valid.len() as u64, case_count(600), &hot);
        let mut t = Tally::new(name);
        t.run_in_process(&dir, ext, &cases, LIMIT, IMAGE_BOUND, move |p| {
            if mask {
                segtool_core::dataset::read_mask(p)
                    .map(drop)
                    .map_err(err_string)
            } else {
                segtool_core::dataset::read_rgb(p)
                    .map(drop)
                    .map_err(err_string)
            }
        });
        t.finish();
    }
}

/// A PNG whose header declares `w` x `h` (8-bit, `color`: 0 gray, 2 RGB) and whose data
/// is one tiny IDAT: what an image bomb's first bytes look like.
fn png_declaring(w: u32, h: u32, color: u8) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, color, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn image_bomb_is_refused_naming_size_and_limit() {
    let dir = case_dir("bomb");
    let rgb = dir.join("bomb.png");
    std::fs::write(&rgb, png_declaring(30000, 30000, 2)).unwrap();
    let gray = dir.join("bomb_mask.png");
    std::fs::write(&gray, png_declaring(30000, 30000, 0)).unwrap();
    sweep_support::reset_largest_alloc();
    let e1 = segtool_core::dataset::read_rgb(&rgb)
        .unwrap_err()
        .to_string();
    let e2 = segtool_core::dataset::read_mask(&gray)
        .unwrap_err()
        .to_string();
    let e3 = segtool_calibration::read_image(&rgb)
        .unwrap_err()
        .to_string();
    let largest = sweep_support::largest_alloc();
    for e in [&e1, &e2, &e3] {
        assert!(e.contains("30000x30000") && e.contains("MiB limit"), "{e}");
    }
    assert!(
        e1.contains("bomb.png") && e2.contains("bomb_mask.png"),
        "{e1} / {e2}"
    );
    assert!(largest < MIB, "allocated {largest} bytes before refusing");
    // Through the command: refused with the same words, without allocating (ulimit -v
    // 8 GiB: the 2.7 GB buffer alone would not fit beside libtorch and ONNX Runtime).
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {CHILD_VMEM_KIB}; exec \"$@\""))
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_segtool"))
        .args(["infer", "--model", p(&fixtures().dir.join("m.onnx"))])
        .args(["--input", p(&rgb), "--out", p(&dir.join("out"))])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bomb.png") && err.contains("30000x30000") && err.contains("MiB limit"),
        "{err}"
    );
    println!("image bomb: {e1}");
}

// ---- raw frames --------------------------------------------------------------------------

#[test]
fn raw_frames_of_the_wrong_length_are_refused() {
    let onnx = fixtures().dir.join("m.onnx");
    let (w, h) = (24usize, 16usize);
    let frame = w * h * 3;
    for len in [1, frame - 1, frame + 1, 2 * frame - 1, 3 * frame + 7] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_segtool"))
            .args(["infer", "--model", p(&onnx), "--raw", &format!("{w}x{h}")])
            .args(["--out", "-", "--threads", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, &vec![7u8; len]);
        });
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{len} bytes accepted");
        let whole = len / frame;
        assert!(
            err.contains(&format!("{} of {frame} bytes", len % frame))
                && err.contains(&format!("frame {whole}")),
            "{len} bytes: {err}"
        );
        assert_eq!(
            out.stdout.len(),
            whole * w * h,
            "{len} bytes: whole frames still out"
        );
    }
}

// ---- the child side ----------------------------------------------------------------------

/// Runs sweep cases when re-run by [`ChildRunner`]; a no-op otherwise.
#[test]
fn sweep_child() {
    sweep_support::child_main(|kind, path| match kind {
        "ort" => open_and_run(path, Backend::Ort(OrtOptions::new().with_intra_threads(1))),
        "tract" => open_and_run(path, Backend::Tract),
        "pth" => segtool_train::import::read_state_dict(path)
            .map(drop)
            .map_err(anyhow_string),
        "toml" => load_config(path),
        other => panic!("unknown sweep kind {other}"),
    });
}
