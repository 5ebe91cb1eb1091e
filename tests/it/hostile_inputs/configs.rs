//! Configs: TOML run configs (mutations in process, deep nesting in children) and the
//! TensorRT calibration cache text.

use std::path::Path;

use super::{case_dir, child_runner, err_string, LIMIT, SMALL_FILE_BOUND};
use super::sweep_support::{self, case_count, mutations, Tally};

// ---- TOML configs ----------------------------------------------------------------------

pub(super) fn load_config(p: &Path) -> Result<(), String> {
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
    // own, so the name in the error is added here; the sweep checks it never panics. The
    // seed is written by hand: the writer refuses names with ':', a file may hold them.
    let mut text = String::from("TRT-8601-EntropyCalibration2\n");
    for (i, name) in ["image", "a/conv:0", "head.pam/Softmax:0", "logits"]
        .iter()
        .enumerate()
    {
        let scale = (0.5 + i as f32) / 127.0;
        text.push_str(&format!("{name}: {:08x}\n", scale.to_bits()));
    }
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
