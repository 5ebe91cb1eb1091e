//! segtool's SGD (optim.rs) against `torch.optim.SGD` (fp64 reference): two parameter
//! groups at different learning rates that change every step, weight decay, momentum,
//! with and without Nesterov. Agreement within 1e-6 (fp32 updates vs fp64 reference).

use crate::common;

use common::{python, read_tensors, tensor_to_f32, write_tensors};
use segtool_train::optim::{Sgd, SgdConfig};
use tch::{nn, Kind, Tensor};

fn check(nesterov: bool) {
    let dir = tempfile::tempdir().unwrap();
    let vs = nn::VarStore::new(tch::Device::Cpu);
    let root = vs.root();
    tch::manual_seed(7);
    let a = (&root / "pretrained" / "conv").var(
        "weight",
        &[3, 4],
        nn::Init::Randn {
            mean: 0.0,
            stdev: 1.0,
        },
    );
    let b = (&root / "head" / "conv").var(
        "bias",
        &[5],
        nn::Init::Randn {
            mean: 0.0,
            stdev: 1.0,
        },
    );
    let (momentum, weight_decay, lrs) = (0.9, 0.05, [0.1, 0.07, 0.02, 0.01]);
    let grads: Vec<(Tensor, Tensor)> = lrs
        .iter()
        .map(|_| {
            (
                Tensor::randn([3, 4], (Kind::Float, tch::Device::Cpu)),
                Tensor::randn([5], (Kind::Float, tch::Device::Cpu)),
            )
        })
        .collect();
    let mut inputs = vec![
        ("param.pretrained.conv.weight".to_string(), a.copy()),
        ("param.head.conv.bias".to_string(), b.copy()),
    ];
    for (k, (ga, gb)) in grads.iter().enumerate() {
        inputs.push((format!("grad.{k}.pretrained.conv.weight"), ga.copy()));
        inputs.push((format!("grad.{k}.head.conv.bias"), gb.copy()));
    }
    let named: Vec<(&str, &Tensor)> = inputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    write_tensors(&dir.path().join("in.safetensors"), &named);

    let mut sgd = Sgd::new(
        &vs,
        SgdConfig {
            momentum,
            weight_decay,
            nesterov,
        },
    );
    let mut ours = Vec::new();
    for (lr, (ga, gb)) in lrs.iter().zip(&grads) {
        sgd.zero_grad();
        ((&a * ga).sum(Kind::Float) + (&b * gb).sum(Kind::Float)).backward();
        sgd.step([*lr, lr * 10.0]);
        ours.push((tensor_to_f32(&a), tensor_to_f32(&b)));
    }

    let lr_list = lrs.map(|l| l.to_string()).join(",");
    let mut cmd = python();
    cmd.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/reference/sgd_ref.py"
    ))
    .arg(dir.path().join("in.safetensors"))
    .arg(dir.path().join("out.safetensors"))
    .args(["--lrs", &lr_list, "--momentum", &momentum.to_string()])
    .args(["--weight-decay", &weight_decay.to_string()]);
    if nesterov {
        cmd.arg("--nesterov");
    }
    let status = cmd.status().expect("running python");
    assert!(status.success(), "sgd_ref.py failed");
    let reference = read_tensors(&dir.path().join("out.safetensors"));
    for (k, (oa, ob)) in ours.iter().enumerate() {
        let ra = &reference[&format!("step.{k}.pretrained.conv.weight")].1;
        let rb = &reference[&format!("step.{k}.head.conv.bias")].1;
        let diff = common::max_abs_diff(oa, ra).max(common::max_abs_diff(ob, rb));
        assert!(
            diff < 1e-6,
            "nesterov={nesterov} step {k}: max abs diff {diff:e}"
        );
    }
}

#[test]
fn sgd_matches_torch_optim_sgd() {
    check(false);
}

#[test]
fn nesterov_sgd_matches_torch_optim_sgd() {
    check(true);
}
