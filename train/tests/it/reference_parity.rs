//! The tch DANet against an independent PyTorch DANet (tests/reference/danet_ref.py,
//! written from DESIGN.md, computing in float64) that loads our safetensors checkpoint
//! with `load_state_dict(strict=True)`. Tolerance: 1e-4 absolute on every output.

use crate::common;

use common::*;
use segtool_model_spec::BackboneSpec;
use segtool_train::checkpoint;
use tch::{Kind, Tensor};

fn check_against_pytorch(spec: segtool_model_spec::ModelSpec, input: [i64; 4], seed: i64) {
    let dir = tempfile::tempdir().unwrap();
    let (vs, model) = random_model(&spec, seed);
    let ckpt = dir.path().join("model.safetensors");
    checkpoint::save(&ckpt, &vs, &spec, &Default::default()).unwrap();

    let image = Tensor::randn(input, (Kind::Float, tch::Device::Cpu));
    let ours = tch::no_grad(|| model.forward_all(&image, false));
    let inputs = dir.path().join("inputs.safetensors");
    write_tensors(&inputs, &[("image", &image)]);
    let outputs = dir.path().join("outputs.safetensors");
    let status = python()
        .arg(reference_script())
        .args([&ckpt, &inputs, &outputs])
        .status()
        .expect("python runs (scripts/setup.sh installs the venv)");
    assert!(status.success(), "reference script failed");

    let reference = read_tensors(&outputs);
    for (name, t) in [
        ("fused", &ours.fused),
        ("position", &ours.position),
        ("channel", &ours.channel),
    ] {
        let (shape, values) = &reference[name];
        let ours_shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
        assert_eq!(shape, &ours_shape, "{name} shape");
        let diff = max_abs_diff(&tensor_to_f32(t), values);
        let scale = values.iter().fold(0f32, |m, v| m.max(v.abs()));
        eprintln!("{name}: max |tch - pytorch| = {diff:.3e} (max |output| {scale:.3e})");
        assert!(diff < 1e-4, "{name}: max abs diff {diff} exceeds 1e-4");
    }
}

#[test]
fn tiny_basic_os8_matches_pytorch() {
    check_against_pytorch(spec(BackboneSpec::tiny(), 5), [2, 3, 64, 80], 1);
}

#[test]
fn bottleneck_os16_and_multigrid_os8_match_pytorch() {
    check_against_pytorch(spec(small_bottleneck(16, None), 3), [1, 3, 72, 56], 2);
    check_against_pytorch(
        spec(small_bottleneck(8, Some(vec![4, 8])), 4),
        [2, 3, 48, 64],
        3,
    );
}
