//! Peak memory of one DANet training step with each attention implementation.
//!
//! `cargo run -p segtool-train --example attention_memory [-- SIZE [DEPTH]]` (default
//! 512, ResNet-50, OS8, batch 1, CPU). Each implementation runs in its own child process
//! (a fresh heap, so one run cannot reuse the other's freed pages); the child builds the
//! trainer and the batch, reads its peak RSS (VmHWM in /proc/self/status), takes one SGD
//! step (forward, 3x CE, backward, update) and reads VmHWM again. The growth is what the
//! step itself needed at its peak, next to the analytic estimates of
//! `segtool_train::model`.

use std::process::Command;

use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::model::{module_costs, pam_cam_attention_bytes, AttentionImpl};
use segtool_train::{TrainConfig, Trainer};
use tch::{Device, Kind, Tensor};

const MIB: f64 = 1024.0 * 1024.0;

/// A field of /proc/self/status in bytes (`VmHWM`, `VmRSS`).
fn status_bytes(field: &str) -> u64 {
    segtool_model_spec::process::memory_kib(field)
        .unwrap_or_else(|| panic!("no {field} in /proc/self/status (Linux only)"))
        * 1024
}

fn spec(depth: usize) -> ModelSpec {
    let classes = (0..19).map(|c| format!("c{c}")).collect();
    ModelSpec::new(
        &format!("resnet{depth}"),
        BackboneSpec::resnet(depth, 8).expect("resnet depth"),
        classes,
    )
}

/// One step in this process; prints `hwm_before rss_before hwm_after seconds`.
fn child(attention: AttentionImpl, size: i64, depth: usize) {
    let spec = spec(depth);
    let config = TrainConfig {
        iterations: 1,
        batch_size: 1,
        progress: false,
        attention,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, config).expect("trainer");
    let images = Tensor::randn([1, 3, size, size], (Kind::Float, Device::Cpu));
    let masks = Tensor::randint(19, [1, size, size], (Kind::Int64, Device::Cpu));
    let (hwm, rss) = (status_bytes("VmHWM"), status_bytes("VmRSS"));
    let start = std::time::Instant::now();
    trainer.step(&images, &masks, 0).expect("step");
    let seconds = start.elapsed().as_secs_f64();
    println!("{hwm} {rss} {} {seconds}", status_bytes("VmHWM"));
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--child") {
        let attention = args[2].parse().expect("explicit or sdpa");
        return child(
            attention,
            args[3].parse().unwrap(),
            args[4].parse().unwrap(),
        );
    }
    let size: i64 = args.get(1).map_or(512, |s| s.parse().expect("SIZE"));
    let depth: usize = args.get(2).map_or(50, |s| s.parse().expect("DEPTH"));
    let spec = spec(depth);
    println!(
        "one training step, DANet-ResNet{depth} OS8, 1x3x{size}x{size}, CPU, {} intra-op threads",
        tch::get_num_threads()
    );
    let params: u64 = module_costs(&spec, size, size, AttentionImpl::Explicit)
        .iter()
        .map(|c| c.params)
        .sum();
    println!(
        "{params} parameters: {:.0} MiB of weights; the step adds as much for gradients and again for SGD momentum",
        params as f64 * 4.0 / MIB
    );
    println!(
        "{:>9} {:>13} {:>13} {:>11} {:>10} {:>10} {:>8}",
        "attention", "peak RSS MiB", "step +MiB", "est. act.", "PAM MiB", "CAM MiB", "step s"
    );
    for attention in [AttentionImpl::Explicit, AttentionImpl::Sdpa] {
        let name = format!("{attention:?}").to_lowercase();
        let out = Command::new(std::env::current_exe().unwrap())
            .args(["--child", &name, &size.to_string(), &depth.to_string()])
            .output()
            .expect("child runs");
        assert!(
            out.status.success(),
            "{name} child failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let v: Vec<f64> = text
            .split_whitespace()
            .map(|x| x.parse().unwrap())
            .collect();
        let (_hwm_before, rss_before, hwm_after, seconds) = (v[0], v[1], v[2], v[3]);
        let activations: u64 = module_costs(&spec, size, size, attention)
            .iter()
            .map(|c| c.activations)
            .sum();
        let bytes = pam_cam_attention_bytes(&spec, size, size, attention);
        println!(
            "{name:>9} {:>13.0} {:>13.0} {:>11.0} {:>10.2} {:>10.2} {seconds:>8.1}",
            hwm_after / MIB,
            (hwm_after - rss_before) / MIB,
            activations as f64 * 4.0 / MIB,
            bytes.pam as f64 / MIB,
            bytes.cam as f64 / MIB,
        );
    }
    println!("step +MiB: peak RSS during the step minus RSS before it; est. act.: the analytic");
    println!("fp32 activation estimate (model::module_costs); PAM/CAM: attention bytes per image");
}
