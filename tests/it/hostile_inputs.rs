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
//! reported against its case). Case counts are each sweep's default (in hostile_inputs/), or
//! `SEGTOOL_SWEEP_CASES` for every sweep. Each sweep prints a summary line (run with
//! `--nocapture` to see them).
//!
//! The shared fixtures and bounds live here, the cases by parser family in
//! `hostile_inputs/`: ONNX, checkpoints (safetensors, .pth), configs (TOML, calibration
//! cache), images and raw frames.

#[path = "hostile_inputs/checkpoints.rs"]
mod checkpoints;
use crate::common;
#[path = "hostile_inputs/configs.rs"]
mod configs;
#[path = "hostile_inputs/images.rs"]
mod images;
#[path = "hostile_inputs/onnx.rs"]
mod onnx;
#[path = "sweep_support/mod.rs"]
mod sweep_support;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use common::{p, segtool};
use segtool_runtime::EngineKind;
use sweep_support::{ChildRunner, CountingAlloc};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const MIB: usize = 1 << 20;
/// In-process parsers of small files (all fixtures are under 2 MiB): no single allocation
/// above this.
const SMALL_FILE_BOUND: usize = 64 * MIB;
/// Image decoding: the decoded buffer may reach the limit images are refused over
/// (`segtool_model_spec::images::MAX_DECODED_BYTES`), plus the RGB copy.
const IMAGE_BOUND: usize = 520 * MIB;
/// Virtual memory of a child process (libtorch and ONNX Runtime mapped in).
const CHILD_VMEM_KIB: u64 = 8 << 20;
const LIMIT: Duration = Duration::from_secs(30);

fn child_runner() -> ChildRunner {
    ChildRunner {
        runner_test: "hostile_inputs::sweep_child",
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

// ---- the child side ----------------------------------------------------------------------

/// Runs sweep cases when re-run by [`ChildRunner`]; a no-op otherwise.
#[test]
fn sweep_child() {
    sweep_support::child_main(|kind, path| match kind {
        "ort" => onnx::open_and_run(path, EngineKind::Ort),
        "tract" => onnx::open_and_run(path, EngineKind::Tract),
        "pth" => segtool_train::import::read_state_dict(path)
            .map(drop)
            .map_err(anyhow_string),
        "toml" => configs::load_config(path),
        other => panic!("unknown sweep kind {other}"),
    });
}
