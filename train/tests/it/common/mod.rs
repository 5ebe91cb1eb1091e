//! Helpers shared by the train crate's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use safetensors::tensor::{Dtype, TensorView};
use segtool_model_spec::{BackboneSpec, BlockKind, ModelSpec};
use segtool_train::DaNet;
use tch::{nn, Kind, Tensor};

pub fn spec(backbone: BackboneSpec, classes: usize) -> ModelSpec {
    ModelSpec::new(
        "test",
        backbone,
        (0..classes).map(|c| format!("c{c}")).collect(),
    )
}

/// A bottleneck ResNet small enough for tests: [1, 1, 1, 2] blocks, width 8.
pub fn small_bottleneck(output_stride: i64, multi_grid: Option<Vec<i64>>) -> BackboneSpec {
    BackboneSpec {
        block: BlockKind::Bottleneck,
        layers: [1, 1, 1, 2],
        width: 8,
        output_stride,
        multi_grid,
        deep_stem: false,
        stem_widths: None,
        contract_dilation: true,
    }
}

/// A model whose every variable is random: weights, biases, BN affine and running
/// statistics, and non-zero attention gammas (zero gammas would hide PAM/CAM entirely).
pub fn random_model(spec: &ModelSpec, seed: i64) -> (nn::VarStore, DaNet) {
    // libtorch's generator is process-global: tests running in parallel threads would
    // interleave their draws between `manual_seed` and the last fill, and a seed would
    // no longer fix the weights. One model is drawn at a time.
    static DRAWING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _drawing = DRAWING.lock().unwrap_or_else(|e| e.into_inner());
    tch::manual_seed(seed);
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let model = DaNet::new(&vs.root(), spec);
    tch::no_grad(|| {
        // Sorted: `variables()` is a HashMap, whose order (and so which draw each
        // variable gets) would otherwise change from one process to the next.
        let mut variables: Vec<_> = vs.variables().into_iter().collect();
        variables.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, mut var) in variables {
            let shape = var.size();
            let fresh = if name.ends_with("running_var") {
                Tensor::rand(shape.as_slice(), (Kind::Float, tch::Device::Cpu)) + 0.5
            } else if name.ends_with("running_mean") || name.ends_with(".bias") {
                Tensor::randn(shape.as_slice(), (Kind::Float, tch::Device::Cpu)) * 0.1
            } else if name.ends_with("gamma") {
                Tensor::from_slice(&[if name.contains(".sa.") { 0.7f32 } else { -0.4 }])
            } else if shape.len() == 1 {
                // BN scales below 1 keep activations O(1) through the residual stack, as
                // in a trained network; CAM's unscaled X X^T energies otherwise reach 1e4.
                Tensor::rand(shape.as_slice(), (Kind::Float, tch::Device::Cpu)) * 0.5 + 0.45
            } else {
                continue; // conv weights keep their (random) kaiming init
            };
            var.copy_(&fresh);
        }
    });
    (vs, model)
}

pub fn tensor_to_f32(t: &Tensor) -> Vec<f32> {
    Vec::<f32>::try_from(&t.to_kind(Kind::Float).contiguous().view(-1)).unwrap()
}

pub fn write_tensors(path: &Path, tensors: &[(&str, &Tensor)]) {
    let owned: Vec<(String, Vec<usize>, Vec<u8>)> = tensors
        .iter()
        .map(|(n, t)| {
            let shape = t.size().iter().map(|&d| d as usize).collect();
            (
                n.to_string(),
                shape,
                tensor_to_f32(t)
                    .iter()
                    .flat_map(|v| v.to_le_bytes())
                    .collect(),
            )
        })
        .collect();
    let views: Vec<(&str, TensorView)> = owned
        .iter()
        .map(|(n, s, d)| {
            (
                n.as_str(),
                TensorView::new(Dtype::F32, s.clone(), d).unwrap(),
            )
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

pub fn read_tensors(path: &Path) -> HashMap<String, (Vec<usize>, Vec<f32>)> {
    let bytes = std::fs::read(path).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, v)| {
            let data = v
                .data()
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            (n, (v.shape().to_vec(), data))
        })
        .collect()
}

/// The venv's python (set by scripts/setup.sh), else `python3` on PATH.
pub fn python() -> Command {
    Command::new(std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into()))
}

pub fn reference_script() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/danet_ref.py")
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}
