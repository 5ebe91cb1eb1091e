//! The newest-frame C API from C: compiles `tests/c/live.c` (a camera thread submitting
//! faster than the model, an inference thread taking answers) against
//! `include/segtool.h` and the `libsegtool.so` cargo built, runs it on a tiny model with
//! tract and ONNX Runtime (ORT_DYLIB_PATH), and under valgrind; and `tests/c/cameras.c`
//! (two cameras on one handle, against `segtool_segment`).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use segtool_testkit::{tiny_model_bytes, tiny_spec};

use crate::common;
use common::{command, show, valgrind, valgrind_clean, VALGRIND_OPTIONS};

fn c_program() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| common::compile("live", &["-pthread"]))
}

/// Runs live.c (see [`run`]).
fn run_live(wrapper: &[&str], engine: &str) -> Output {
    run(c_program(), wrapper, engine)
}

/// Runs `program` on the identity 1x1-conv model (class = dominant channel).
fn run(program: &Path, wrapper: &[&str], engine: &str) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("rgb.onnx");
    let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(
        &model,
        tiny_model_bytes(&tiny_spec(3), &identity, &[0.0; 3]),
    )
    .unwrap();
    command(wrapper, program)
        .arg(&model)
        .arg(engine)
        .output()
        .unwrap()
}

#[test]
fn live_c_program_with_tract() {
    let output = run_live(&[], "tract");
    assert!(output.status.success(), "{}", show(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}");
    assert!(stdout.contains("all live C API checks passed"), "{stdout}");
}

/// Needs ONNX Runtime (ORT_DYLIB_PATH, as exported by scripts/setup.sh): a missing
/// reference without it (a failure under `make test`, else a counted skip).
#[test]
fn live_c_program_with_onnx_runtime() {
    if std::env::var_os("ORT_DYLIB_PATH").is_none_or(|p| !Path::new(&p).is_file()) {
        return segtool_testkit::missing_reference(
            "the ONNX Runtime library (ORT_DYLIB_PATH is not set to an existing file)",
            "source \"$(bash scripts/setup.sh)\" (it sets ORT_DYLIB_PATH to the onnxruntime wheel's)",
        );
    }
    let output = run_live(&[], "ort");
    assert!(output.status.success(), "{}", show(&output));
}

/// The camera and inference threads, the stream's worker thread and every handle under
/// valgrind: no memory errors, nothing definitely or indirectly lost.
#[test]
fn live_c_program_has_no_leaks_under_valgrind() {
    let Some(valgrind) = valgrind() else {
        return segtool_testkit::missing_reference(
            "valgrind (/usr/bin/valgrind)",
            "bash scripts/setup.sh installs it (apt-get install valgrind)",
        );
    };
    let mut wrapper = vec![valgrind];
    wrapper.extend(VALGRIND_OPTIONS);
    let started = std::time::Instant::now();
    let output = run_live(&wrapper, "tract");
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!(
        "valgrind ({:.1} s):\n{}\n{}",
        started.elapsed().as_secs_f32(),
        String::from_utf8_lossy(&output.stdout),
        stderr
            .lines()
            .filter(|l| ["lost:", "reachable:", "ERROR SUMMARY"]
                .iter()
                .any(|k| l.contains(k)))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(output.status.success(), "{}", show(&output));
    assert!(valgrind_clean(&stderr), "{stderr}");
}

/// Two cameras on one live handle, from C: every class map equal to `segtool_segment`'s,
/// each source's counts exact.
#[test]
fn two_cameras_c_program_with_tract() {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    let exe = EXE.get_or_init(|| common::compile("cameras", &[]));
    let output = run(exe, &[], "tract");
    assert!(output.status.success(), "{}", show(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    eprintln!("{stdout}");
    assert!(
        stdout.contains("all camera C API checks passed"),
        "{stdout}"
    );
}
