//! The C API from C: compiles `tests/c/segment.c` against `include/segtool.h` and the
//! `libsegtool.so` cargo built for this test, runs it on a tiny model (tract; ONNX Runtime
//! too when it can be found), compares its class map with `segtool_runtime::Segmenter`'s,
//! and runs it under valgrind to check that nothing leaks.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use image::{Rgb, RgbImage};
use segtool_runtime::card::CardRequest;
use segtool_runtime::{EngineKind, Segmenter};
use segtool_testkit::{foreign_model_bytes, tiny_model_bytes, tiny_spec};

use crate::common;
use common::{lib_dir, show};

const W: u32 = 7;
const H: u32 = 5;

/// Same image as `fill_image` in segment.c (without the row padding).
fn synthetic_image() -> RgbImage {
    RgbImage::from_fn(W, H, |x, y| {
        if y < 3 {
            let mut p = [10u8; 3];
            p[y as usize] = 240;
            Rgb(p)
        } else {
            Rgb([
                (x * 37 + y * 11) as u8,
                (x * 53 + y * 71) as u8,
                (x * 89 + y * 29 + 40) as u8,
            ])
        }
    })
}

/// A model from elsewhere (no segtool metadata: `foreign.onnx`) and its card, in `dir`.
fn foreign_model(dir: &Path) -> (PathBuf, PathBuf) {
    let model = dir.join("foreign.onnx");
    std::fs::write(&model, foreign_model_bytes(3, 3, false)).unwrap();
    let card = dir.join("card.toml");
    std::fs::write(
        &card,
        "num_classes = 3\n[input]\nchannels = \"bgr\"\nmean = [0.5, 0.5, 0.5]\nstd = [0.25, 0.25, 0.25]\n",
    )
    .unwrap();
    (model, card)
}

/// A temp dir with `rgb.onnx` (class = dominant normalised channel) and `garbage.onnx`.
fn models() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("rgb.onnx");
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(
        &model,
        tiny_model_bytes(&tiny_spec(3), &identity, &[0.0; 3]),
    )
    .unwrap();
    let garbage = dir.path().join("garbage.onnx");
    std::fs::write(&garbage, b"\x08\x08 not a model \xff\xff").unwrap();
    (dir, model, garbage)
}

/// The class map `Segmenter::segment` (tract) computes for the synthetic image.
fn rust_class_map(builder: segtool_runtime::SegmenterBuilder) -> Vec<u8> {
    let mut seg = builder.engine(EngineKind::Tract).open().unwrap();
    let mask = seg.segment(&synthetic_image()).unwrap().mask;
    assert_eq!(mask.dim(), (H as usize, W as usize));
    mask.to_le_bytes()
}

/// Compiles segment.c once per test process; returns the executable.
fn c_program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile("segment", &[]))
}

/// Runs segment.c for `engine`, optionally under a wrapper (valgrind); returns the output
/// and the class map it wrote.
fn run_c(wrapper: &[&str], engine: &str) -> (Output, Option<Vec<u8>>) {
    let (dir, model, garbage) = models();
    let map_path = dir.path().join("map.bin");
    let (foreign, card) = foreign_model(dir.path());
    let foreign_map_path = dir.path().join("foreign-map.bin");
    let mut cmd = match wrapper.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg(c_program());
            c
        }
        None => Command::new(c_program()),
    };
    // cargo's LD_LIBRARY_PATH (which outranks the program's RUNPATH) may list a stale
    // uplifted copy first: put the library the program was linked against ahead of it.
    let mut library_path = std::ffi::OsString::from(lib_dir());
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        library_path.push(":");
        library_path.push(old);
    }
    let output = cmd
        .env("LD_LIBRARY_PATH", library_path)
        .arg(&model)
        .arg(&garbage)
        .arg(engine)
        .arg(&map_path)
        .args([&foreign, &card, &foreign_map_path])
        .output()
        .unwrap();
    let read_map = |path: &Path| {
        std::fs::read(path).ok().map(|bytes| {
            let header = format!("{W} {H}\n");
            assert!(bytes.starts_with(header.as_bytes()), "map header");
            bytes[header.len()..].to_vec()
        })
    };
    let map = read_map(&map_path);
    if output.status.success() {
        // Only compare when the program got that far.
        let expected = rust_class_map(Segmenter::builder(&model));
        assert_eq!(
            map.as_deref(),
            Some(expected.as_slice()),
            "C class map differs from Segmenter::segment"
        );
        // The card through the C ABI: the builder's own result, nothing added.
        let expected =
            rust_class_map(Segmenter::builder(&foreign).card(CardRequest::new().card_file(&card)));
        assert_eq!(
            read_map(&foreign_map_path).as_deref(),
            Some(expected.as_slice()),
            "C class map of the card-driven model differs from Segmenter::segment"
        );
    }
    (output, map)
}

#[test]
fn c_program_with_tract_matches_rust_segmenter() {
    let (output, map) = run_c(&[], "tract");
    assert!(output.status.success(), "{}", show(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("engine tract provider cpu"), "{stdout}");
    assert!(stdout.contains("all C API checks passed"), "{stdout}");
    let map = map.unwrap();
    // The first three rows are pure red, green, blue: classes 0, 1, 2.
    for y in 0..3 {
        assert!(map[y * W as usize..(y + 1) * W as usize]
            .iter()
            .all(|&c| c == y as u8));
    }
}

#[test]
fn c_program_with_auto_engine() {
    let (output, _) = run_c(&[], "auto");
    assert!(output.status.success(), "{}", show(&output));
    eprintln!("{}", String::from_utf8_lossy(&output.stdout));
}

/// Needs ONNX Runtime (ORT_DYLIB_PATH, as exported by scripts/setup.sh): a missing
/// reference without it (a failure under `make test`, else a counted skip).
#[test]
fn c_program_with_onnx_runtime_matches_rust_segmenter() {
    let Some(dylib) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| Path::new(p).is_file()) else {
        return segtool_testkit::missing_reference(
            "the ONNX Runtime library (ORT_DYLIB_PATH is not set to an existing file)",
            "source \"$(bash scripts/setup.sh)\" (it sets ORT_DYLIB_PATH to the onnxruntime wheel's)",
        );
    };
    eprintln!("ONNX Runtime: {}", dylib.to_string_lossy());
    let (output, _) = run_c(&[], "ort");
    assert!(output.status.success(), "{}", show(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("engine onnxruntime provider cpu"),
        "{stdout}"
    );
}

/// Runs the tract program under valgrind: no memory errors, nothing definitely or
/// indirectly lost. "Still reachable" blocks (process-wide caches of the engines) and
/// "possibly lost" ones (thread stacks) do not count.
#[test]
fn c_program_has_no_leaks_under_valgrind() {
    let valgrind = ["/usr/bin/valgrind", "/usr/local/bin/valgrind"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    let Some(valgrind) = valgrind else {
        return segtool_testkit::missing_reference(
            "valgrind (/usr/bin/valgrind)",
            "bash scripts/setup.sh installs it (apt-get install valgrind)",
        );
    };
    let mut wrapper = vec![valgrind];
    wrapper.extend(common::VALGRIND_OPTIONS);
    let started = std::time::Instant::now();
    let (output, _) = run_c(&wrapper, "tract");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            ["lost:", "reachable:", "ERROR SUMMARY", "All heap blocks"]
                .iter()
                .any(|k| l.contains(k))
        })
        .collect();
    eprintln!(
        "valgrind ({:.1} s):\n{}",
        started.elapsed().as_secs_f32(),
        summary.join("\n")
    );
    assert!(output.status.success(), "{}", show(&output));
    let clean = |kind: &str| {
        stderr.contains("All heap blocks were freed")
            || stderr
                .lines()
                .any(|l| l.contains(&format!("{kind} lost: 0 bytes in 0 blocks")))
            || !stderr.contains(&format!("{kind} lost:"))
    };
    assert!(clean("definitely") && clean("indirectly"), "{stderr}");
    assert!(stderr.contains("ERROR SUMMARY: 0 errors"), "{stderr}");
}

/// The header also compiles as C++ (extern "C" guards), as ROS nodes include it.
#[test]
fn header_compiles_as_cpp() {
    let cxx = std::env::var_os("CXX").unwrap_or_else(|| "c++".into());
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = "#include <segtool.h>\n\
               extern \"C\" segtool_status f(segtool_segmenter *s) { return segtool_palette(s, 0, nullptr); }\n\
               int main() { segtool_options o = segtool_options_default(); return o.strict ? 1 : 0; }\n";
    let mut child = match Command::new(&cxx)
        .args([
            "-std=c++17",
            "-Wall",
            "-Werror",
            "-fsyntax-only",
            "-x",
            "c++",
            "-",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            return segtool_testkit::missing_reference(
                format_args!("a C++ compiler ({cxx:?}: {e})"),
                "the build needs one too (train/csrc): install g++ or set CXX",
            );
        }
    };
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(src.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{}", show(&output));
}
