//! `segtool import` of checkpoints in the official DANet v0.5.0 format
//! (tests/reference/official_checkpoints.py: `.pth.tar` with `state_dict`, `module.`
//! prefixes, `pretrained.*` / `head.*` names, the unused `pretrained.fc.*`), for the
//! three layouts users meet: ResNet-101 OS8 multi-grid (4, 8, 16) with the 7x7 stem (the
//! released DANet101), ResNet-50 OS8, and ResNet-50 with the deep stem at OS16. Depth,
//! block type, width, stem and classes come from the file; only `--output-stride` and
//! `--multi-grid` are given. The imported model's logits must match the independent
//! float64 PyTorch DANet (danet_ref.py) within 1e-4 relative.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::OnceLock;

use common::{p, python, segtool};
use segtool_model_spec::BlockKind;
use segtool_train::Checkpoint;
use tch::{Kind, Tensor};

/// Max |ours - PyTorch| over max |PyTorch|, per output, our float32 against PyTorch's
/// float64. The float32 noise floor observed on these fixtures (libtorch CPU, 2 threads):
/// 2.2e-6 .. 3.9e-6, the same as PyTorch's own float32 run (printed beside it), so 1e-4
/// leaves a factor 25; a temperature bug (energies / sqrt(d) in PAM and CAM) moves the
/// logits by 5.5e-2 .. 8.8e-2.
const TOLERANCE: f64 = 1e-4;

/// The fixtures, written once per test run under target/tmp.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("import_official");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/official_checkpoints.py");
        let status = python()
            .arg(script)
            .arg(&dir)
            .status()
            .expect("python runs (scripts/setup.sh installs the venv)");
        assert!(status.success(), "official_checkpoints.py failed");
        dir
    })
}

fn case(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixtures().join("cases.json")).unwrap();
    let cases: serde_json::Value = serde_json::from_str(&text).unwrap();
    cases[name].clone()
}

fn tensors(path: &Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .collect()
}

fn import(file: &str, flags: &[&str], out: &Path) -> Output {
    let from = fixtures().join(file);
    let args = [&["import", "--from", p(&from)], flags, &["--out", p(out)]].concat();
    segtool(&args)
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Imports case `name` with `flags` through the binary, checks what it inferred and
/// printed, and compares the imported model's eval logits with PyTorch's.
fn import_and_compare(name: &str, flags: &[&str], backbone_name: &str) {
    let c = case(name);
    let dir = tempfile::tempdir().unwrap();
    let ckpt_path = dir.path().join(format!("{name}.safetensors"));
    let o = import(&format!("{name}.pth.tar"), flags, &ckpt_path);
    let (stdout, stderr) = text(&o);
    eprintln!("segtool import {name} {flags:?}:\n{stdout}{stderr}");
    assert!(
        o.status.success(),
        "{name}: import failed:\n{stdout}{stderr}"
    );

    // The unused ImageNet classifier is reported and ignored.
    assert!(stdout.contains("2 unexpected (ignored)"), "{stdout}");
    assert!(
        stdout.contains("pretrained.fc.weight") && stdout.contains("pretrained.fc.bias"),
        "{stdout}"
    );
    // What came from the weights, and what from the flags (with how to change it).
    let os = c["output_stride"].as_i64().unwrap();
    let deep = c["deep_stem"].as_bool().unwrap();
    let stem = if deep { "deep stem" } else { "7x7 stem" };
    assert!(
        stdout.contains(&format!("architecture from the weights: {backbone_name}"))
            && stdout.contains(stem),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("output stride {os}")), "{stdout}");
    assert!(
        stdout.contains("not stored in weights") && stdout.contains("--multi-grid"),
        "{stdout}"
    );

    let ckpt = Checkpoint::read(&ckpt_path).unwrap();
    let (spec, b) = (&ckpt.spec, &ckpt.spec.backbone);
    assert_eq!(spec.backbone_name, backbone_name);
    assert_eq!(b.block, BlockKind::Bottleneck);
    let layers: Vec<usize> = serde_json::from_value(c["layers"].clone()).unwrap();
    assert_eq!(b.layers.to_vec(), layers);
    assert_eq!(b.width, c["width"].as_i64().unwrap());
    assert_eq!(b.deep_stem, deep);
    assert_eq!(b.output_stride, os);
    let grid: Option<Vec<i64>> = serde_json::from_value(c["multi_grid"].clone()).unwrap();
    assert_eq!(b.multi_grid, grid);
    assert_eq!(spec.num_classes() as u64, c["classes"].as_u64().unwrap());

    let (_vs, model) = segtool_train::load_model(&ckpt, tch::Device::Cpu).unwrap();
    let inputs = tensors(&fixtures().join(format!("{name}.input.safetensors")));
    let ours = tch::no_grad(|| model.forward_all(&inputs["image"], false));
    let reference = tensors(&fixtures().join(format!("{name}.logits.safetensors")));
    let torch32 = tensors(&fixtures().join(format!("{name}.torch32.safetensors")));
    let relative = |ours: &Tensor, theirs: &Tensor| {
        let diff = (ours.to_kind(Kind::Double) - theirs).abs().max();
        diff.double_value(&[]) / theirs.abs().max().double_value(&[])
    };
    for (output, t) in [
        ("fused", &ours.fused),
        ("position", &ours.position),
        ("channel", &ours.channel),
    ] {
        let theirs = &reference[output];
        assert_eq!(t.size(), theirs.size(), "{name} {output}");
        let std = theirs.std(true).double_value(&[]);
        let peak = theirs.abs().max().double_value(&[]);
        let rel = relative(t, theirs);
        let floor = relative(&torch32[output], theirs);
        eprintln!(
            "{name} {output}: logits std {std:.3}, max |logit| {peak:.3}; max |tch - pytorch| \
             / max |pytorch| = {rel:.3e} (PyTorch float32: {floor:.3e})"
        );
        // Well conditioned: O(1-10) logits, where a wrong temperature shows.
        assert!(
            (0.3..50.0).contains(&std),
            "{name} {output}: logits std {std}"
        );
        assert!(
            rel < TOLERANCE,
            "{name} {output}: relative difference {rel:.3e} exceeds {TOLERANCE:e}"
        );
    }
    // The fixture can tell: 1/sqrt(d) in the attention would have failed by far.
    let scaled = tensors(&fixtures().join(format!("{name}.scaled.safetensors")));
    let bug = relative(&ours.fused, &scaled["fused"]);
    eprintln!("{name}: against a 1/sqrt(d) attention: {bug:.3e} relative");
    assert!(bug > 100.0 * TOLERANCE, "{name}: {bug:.3e}");
}

#[test]
fn resnet101_os8_multi_grid_7x7_stem() {
    // The released DANet101's layout.
    import_and_compare(
        "r101_os8_mg",
        &["--output-stride", "8", "--multi-grid", "4,8,16"],
        "resnet101",
    );
}

#[test]
fn resnet50_os8_imports_with_no_flag() {
    import_and_compare("r50_os8", &[], "resnet50");
}

#[test]
fn resnet50_deep_stem_os16() {
    import_and_compare("r50_deep_os16", &["--output-stride", "16"], "resnet50");
}

#[test]
fn backbone_and_deep_stem_flags_only_check_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("x.safetensors");

    let o = import("r101_os8_mg.pth.tar", &["--backbone", "resnet50"], &out);
    let (stdout, stderr) = text(&o);
    eprintln!("{stderr}");
    assert!(!o.status.success(), "{stdout}");
    assert!(
        stderr.contains("--backbone resnet50")
            && stderr.contains("[3, 4, 6, 3]")
            && stderr.contains("resnet101")
            && stderr.contains("[3, 4, 23, 3]"),
        "{stderr}"
    );
    assert!(!out.exists());

    let o = import("r101_os8_mg.pth.tar", &["--deep-stem"], &out);
    let (_, stderr) = text(&o);
    eprintln!("{stderr}");
    assert!(!o.status.success());
    assert!(
        stderr.contains("7x7 stem") && stderr.contains("`pretrained.conv1.weight`"),
        "{stderr}"
    );

    // Dilations the file cannot check are still validated against its blocks.
    let o = import("r101_os8_mg.pth.tar", &["--multi-grid", "4,8"], &out);
    let (_, stderr) = text(&o);
    eprintln!("{stderr}");
    assert!(!o.status.success());
    assert!(stderr.contains("multi_grid [4, 8]"), "{stderr}");

    // Flags that agree with the file are accepted.
    let o = import(
        "r50_deep_os16.pth.tar",
        &[
            "--backbone",
            "resnet50",
            "--deep-stem",
            "--output-stride",
            "16",
        ],
        &out,
    );
    let (stdout, stderr) = text(&o);
    assert!(o.status.success(), "{stdout}{stderr}");
    let spec = Checkpoint::read(&out).unwrap().spec;
    assert!(spec.backbone.deep_stem && spec.backbone.output_stride == 16);
}
