#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! mmsegmentation's DANet files (`{meta: {CLASSES, PALETTE, config}, state_dict}` from an
//! `EncoderDecoder` with ResNetV1c, DAHead and an FCN auxiliary head) import with no flag
//! and compute what mmseg's own model computes.
//!
//! The reference is mmsegmentation 1.2.2 itself, built from its registry
//! (tests/reference/mmseg_ref.py), align_corners false and true, random
//! weights made well conditioned (BN statistics recalibrated, attention gammas non-zero,
//! logits O(1-10)). Our float32 logits are compared with mmseg's float64 run: max |ours -
//! mmseg| / max |mmseg| < 1e-4 for tch and for ONNX Runtime on every export target, and
//! tract on the targets it runs. The float32 noise floor (mmseg's own float32 run against
//! its float64 one) is printed beside each figure: 2e-6 .. 4e-6 here, so 1e-4 leaves a
//! factor of 25 or more, while the bugs the fixtures can tell apart (1/sqrt(d) in PAM, the
//! other align_corners) are checked to move the logits by more than 100x the tolerance.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::{p, python, segtool};
use segtool_export::{ExportOptions, ExportTarget};
use segtool_runtime::expert::run_logits;
use segtool_runtime::{
    expert::{OrtEngine, TractEngine},
    OrtOptions,
};
use segtool_train::Checkpoint;
use tch::{Kind, Tensor};

const TOLERANCE: f64 = 1e-4;

struct Fixture {
    dir: PathBuf,
    /// The file as a user holds it (a zoo-like name).
    pth: PathBuf,
}

/// Writes mmseg's model for (`depth`, `align_corners`) once per test run.
fn fixture(depth: u32, align_corners: bool, file_name: &str, extra: &[&str]) -> Fixture {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("mmseg_import")
        .join(format!("r{depth}_ac{}", align_corners as u8));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/mmseg_ref.py");
    let o = python()
        .arg(script)
        .args(["checkpoint", p(&dir), "--depth", &depth.to_string()])
        .args(["--align-corners", if align_corners { "1" } else { "0" }])
        .args(extra)
        .output()
        .expect("python runs (scripts/setup.sh installs the venv with mmsegmentation)");
    assert!(
        o.status.success(),
        "mmseg_ref.py failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let pth = dir.join(file_name);
    std::fs::rename(dir.join("mmseg.pth"), &pth).unwrap();
    Fixture { dir, pth }
}

fn tensors(path: &Path) -> HashMap<String, Tensor> {
    Tensor::read_safetensors(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .into_iter()
        .collect()
}

fn relative(ours: &Tensor, theirs: &Tensor) -> f64 {
    let diff = (ours.to_kind(Kind::Double) - theirs.to_kind(Kind::Double))
        .abs()
        .max();
    diff.double_value(&[]) / theirs.abs().max().double_value(&[])
}

fn import(f: &Fixture, flags: &[&str]) -> (PathBuf, String) {
    let out = f.dir.join("imported.safetensors");
    let args = [&["import", "--from", p(&f.pth)], flags, &["--out", p(&out)]].concat();
    let o = segtool(&args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("segtool import {}:\n{stdout}{stderr}", f.pth.display());
    assert!(o.status.success(), "import failed:\n{stdout}{stderr}");
    (out, stdout)
}

/// Imports the file with no flag, then checks the spec, tch's logits (main and auxiliary)
/// and the exports for `ort_targets` in ONNX Runtime and for `tract_targets` in tract
/// against mmseg.
fn check(
    depth: u32,
    align_corners: bool,
    f: &Fixture,
    ort_targets: &[ExportTarget],
    tract_targets: &[ExportTarget],
) {
    let (ckpt_path, stdout) = import(f, &[]);
    assert!(stdout.contains(" 0 missing, 0 unexpected"), "{stdout}");
    let ckpt = Checkpoint::read(&ckpt_path).unwrap();
    let spec = &ckpt.spec;
    let layers = if depth == 50 {
        [3, 4, 6, 3]
    } else {
        [3, 4, 23, 3]
    };
    assert_eq!(spec.backbone.layers, layers);
    let base = spec.backbone.width;
    assert_eq!(spec.backbone.stem_conv_widths(), [base / 2, base / 2, base]);
    assert!(spec.backbone.deep_stem && spec.backbone.contract_dilation);
    assert_eq!(spec.backbone.output_stride, 8);
    assert_eq!(spec.align_corners, align_corners);
    assert_eq!(
        (spec.inter_channels(), spec.qk_channels()),
        (8 * base, base)
    );
    let aux = spec.aux_head.as_ref().expect("aux head imported");
    assert_eq!(
        (aux.in_layer, aux.channels, aux.loss_weight),
        (3, 4 * base, 0.4)
    );
    assert_eq!(
        spec.classes[..2],
        ["thing0".to_string(), "thing1".to_string()]
    );
    assert_eq!(spec.palette[1], [37, 91, 151]);

    let input = &tensors(&f.dir.join("input.safetensors"))["image"];
    let reference = tensors(&f.dir.join("logits.safetensors"));
    let torch32 = tensors(&f.dir.join("torch32.safetensors"));
    let (_vs, model) = segtool_train::load_model(&ckpt, tch::Device::Cpu).unwrap();
    let ours = tch::no_grad(|| model.forward_all(input, false));
    let name = format!("R-{depth} align_corners={align_corners}");
    for (what, t) in [("fused", &ours.fused), ("aux", ours.aux.as_ref().unwrap())] {
        let theirs = &reference[what];
        assert_eq!(t.size(), theirs.size(), "{name} {what}");
        let std = theirs.std(true).double_value(&[]);
        let rel = relative(t, theirs);
        let floor = relative(&torch32[what], theirs);
        eprintln!(
            "{name} tch {what}: logits std {std:.3}; max |tch - mmseg64| / max |mmseg64| = \
             {rel:.2e} (mmseg float32: {floor:.2e})"
        );
        assert!(
            (0.3..50.0).contains(&std),
            "{name} {what}: logits std {std}"
        );
        assert!(rel < TOLERANCE, "{name} {what}: {rel:.3e} > {TOLERANCE:e}");
    }
    for (bug, file) in [
        ("1/sqrt(d) in PAM", "scaled.safetensors"),
        ("the other align_corners", "flipped.safetensors"),
    ] {
        let wrong = relative(&ours.fused, &tensors(&f.dir.join(file))["fused"]);
        eprintln!("{name}: against {bug}: {wrong:.2e}");
        assert!(
            wrong > 100.0 * TOLERANCE,
            "{name}: {bug} would pass ({wrong:.2e})"
        );
    }

    let x: ndarray::Array4<f32> = {
        let v: Vec<f32> = Vec::try_from(input.flatten(0, -1)).unwrap();
        let s: Vec<usize> = input.size().iter().map(|&d| d as usize).collect();
        ndarray::Array4::from_shape_vec((s[0], s[1], s[2], s[3]), v).unwrap()
    };
    let fused = &reference["fused"];
    let compare = |engine: &str, target: ExportTarget, out: ndarray::Array4<f32>| {
        let t = Tensor::from_slice(out.as_slice().unwrap()).view_(fused.size());
        let rel = relative(&t, fused);
        eprintln!("{name} {engine} ({} export): {rel:.2e}", target.name());
        assert!(
            rel < TOLERANCE,
            "{name} {engine} {}: {rel:.3e}",
            target.name()
        );
    };
    for target in ExportTarget::ALL {
        let (in_ort, in_tract) = (
            ort_targets.contains(&target),
            tract_targets.contains(&target),
        );
        if !in_ort && !in_tract {
            continue;
        }
        let onnx = f.dir.join(format!("{}.onnx", target.name()));
        segtool_export::export_onnx(&ckpt_path, &onnx, &ExportOptions::for_target(target)).unwrap();
        if in_ort {
            let options = OrtOptions::new().with_intra_threads(2);
            let mut ort = OrtEngine::open(&onnx, &options).unwrap();
            compare("ort", target, run_logits(&mut ort, x.view()).unwrap());
        }
        if in_tract {
            let mut tract = TractEngine::open(&onnx).unwrap();
            compare("tract", target, run_logits(&mut tract, x.view()).unwrap());
        }
        std::fs::remove_file(&onnx).unwrap();
    }
}

/// The zoo's widths (stem 32/32/64, head 512/64, aux 256): the file as users hold it.
#[test]
fn resnet50_align_corners_false_imports_with_no_flag() {
    let f = fixture(50, false, "danet_r50-d8_512x1024_80k_cityscapes.pth", &[]);
    check(50, false, &f, &ExportTarget::ALL, &[ExportTarget::Tract]);
    let spec = Checkpoint::read(&f.dir.join("imported.safetensors"))
        .unwrap()
        .spec;
    assert_eq!(spec.backbone.width, 64);
    let test = spec.mmseg_test.unwrap();
    assert_eq!((test.crop, test.scale), (None, [2048, 1024]));
    aux_export_matches_mmseg(&f);
}

#[test]
fn resnet50_align_corners_true_from_the_zoo_file_name() {
    // No config in the meta: the 769x769 name says align_corners and slide 769/513.
    let f = fixture(
        50,
        true,
        "danet_r50-d8_769x769_40k_cityscapes_20200530_025703-76681c60.pth",
        &["--no-config", "--base", "16"],
    );
    check(
        50,
        true,
        &f,
        &ExportTarget::ALL,
        &[ExportTarget::Legacy, ExportTarget::TensorRt],
    );
    let ckpt = Checkpoint::read(&f.dir.join("imported.safetensors")).unwrap();
    let test = ckpt.spec.mmseg_test.unwrap();
    assert_eq!(
        (test.crop, test.stride, test.scale),
        (Some(769), Some(513), [2048, 1024])
    );
}

/// R-101 (23 blocks in layer3) at a quarter of the widths (the structure is the zoo's):
/// every export target is covered by the R-50 cases; here the ORT-target export in ONNX
/// Runtime and the tract-target one in tract.
#[test]
fn resnet101_both_align_corners() {
    for align in [false, true] {
        let size = ["--height", "48", "--width", "56", "--base", "16"];
        let f = fixture(
            101,
            align,
            "danet_r101-d8_512x1024_80k_cityscapes.pth",
            &size,
        );
        check(101, align, &f, &[ExportTarget::Ort], &[ExportTarget::Tract]);
        let _ = std::fs::remove_dir_all(&f.dir);
    }
}

/// `--aux` adds `aux_logits`, checked with onnxruntime's Python API against mmseg.
fn aux_export_matches_mmseg(f: &Fixture) {
    let onnx = f.dir.join("aux.onnx");
    let o = segtool(&[
        "export",
        "--checkpoint",
        p(&f.dir.join("imported.safetensors")),
        "--aux",
        "--onnx",
        p(&onnx),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = f.dir.join("aux_ort.safetensors");
    let code = "import sys, onnxruntime as ort\n\
                from safetensors.numpy import load_file, save_file\n\
                s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n\
                x = load_file(sys.argv[2])['image']\n\
                names = [o.name for o in s.get_outputs()]\n\
                assert names == ['logits', 'aux_logits'], names\n\
                l, a = s.run(None, {'image': x})\n\
                save_file({'fused': l, 'aux': a}, sys.argv[3])\n";
    let o = python()
        .args([
            "-c",
            code,
            p(&onnx),
            p(&f.dir.join("input.safetensors")),
            p(&out),
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got = tensors(&out);
    let reference = tensors(&f.dir.join("logits.safetensors"));
    for what in ["fused", "aux"] {
        let rel = relative(&got[what], &reference[what]);
        eprintln!("--aux export in onnxruntime (Python), {what}: {rel:.2e}");
        assert!(rel < TOLERANCE, "{what}: {rel:.3e}");
    }
    // Without --aux (the default) there is one output.
    let plain = f.dir.join("plain.onnx");
    let ckpt = f.dir.join("imported.safetensors");
    segtool_export::export_onnx(&ckpt, &plain, &ExportOptions::default()).unwrap();
    let spec = segtool_runtime::expert::load_spec(&plain).unwrap();
    assert!(spec.aux_head.is_some() && !spec.align_corners);
    let mut tract = TractEngine::open(&plain).unwrap();
    let x: Vec<f32> =
        Vec::try_from(tensors(&f.dir.join("input.safetensors"))["image"].flatten(0, -1)).unwrap();
    let shape = tensors(&f.dir.join("input.safetensors"))["image"].size();
    let x = ndarray::Array4::from_shape_vec(
        (shape[0] as usize, 3, shape[2] as usize, shape[3] as usize),
        x,
    )
    .unwrap();
    // one output: the engine's logits are the fused head's
    let got = run_logits(&mut tract, x.view()).unwrap();
    let t = Tensor::from_slice(got.as_slice().unwrap()).view_(reference["fused"].size());
    assert!(relative(&t, &reference["fused"]) < TOLERANCE);
}

#[test]
fn an_mmseg_pspnet_is_refused_naming_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/mmseg_ref.py");
    let o = python()
        .arg(script)
        .args(["pspnet", p(dir.path()), "--depth", "50"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = dir.path().join("x.safetensors");
    let o = segtool(&[
        "import",
        "--from",
        p(&dir.path().join("pspnet.pth")),
        "--out",
        p(&out),
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    eprintln!("{stderr}");
    assert!(!o.status.success());
    assert!(
        stderr.contains("pspnet.pth")
            && stderr.contains("not a DAHead")
            && stderr.contains("decode_head.pam_in_conv.conv.weight")
            && stderr.contains("psp_modules"),
        "{stderr}"
    );
    assert!(!out.exists());
}
