//! One training iteration of DANet in segtool's trainer (the code `segtool train` runs),
//! timed: forward, loss, backward and the SGD update separately, then whole steps.
//! Prints one JSON line; bench/train_step_vs_torch.py runs it beside PyTorch eager.
//!
//!     cargo run --release -p segtool-train --example train_step_bench -- \
//!         [--backbone resnet50] [--crop 384] [--batch 2] [--threads 2] [--steps 5]

use std::time::Instant;

use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::trainer::danet_loss;
use segtool_train::{TrainConfig, Trainer};
use tch::{Kind, Tensor};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seconds(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64()
}

fn main() -> anyhow::Result<()> {
    let depth: usize = arg::<String>("--backbone", "resnet50".into())
        .trim_start_matches("resnet")
        .parse()?;
    let (crop, batch, threads, steps) = (
        arg("--crop", 384i64),
        arg("--batch", 2i64),
        arg("--threads", 2i32),
        arg("--steps", 5usize),
    );
    tch::set_num_threads(threads);
    let backbone = BackboneSpec::resnet(depth, 8).expect("known depth");
    let classes = (0..19).map(|c| format!("class{c}")).collect();
    let spec = ModelSpec::new(&format!("resnet{depth}"), backbone, classes);
    let config = TrainConfig {
        iterations: 1000,
        batch_size: batch as usize,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, config)?;
    tch::manual_seed(0);
    let images = Tensor::randn([batch, 3, crop, crop], (Kind::Float, tch::Device::Cpu));
    let masks = Tensor::randint(19, [batch, crop, crop], (Kind::Int64, tch::Device::Cpu));

    // Warm-up (allocator, oneDNN primitive caches), as the PyTorch side does.
    trainer.step(&images, &masks, 0)?;
    let mut step_times = Vec::new();
    for it in 1..=steps {
        step_times.push(seconds(|| {
            trainer.step(&images, &masks, it).expect("step");
        }));
    }
    step_times.sort_by(f64::total_cmp);

    // Where the time goes: the same step taken apart.
    let (mut forward, mut backward, mut update) = (0.0, 0.0, 0.0);
    for it in 0..steps {
        let mut loss = None;
        forward += seconds(|| {
            let out = trainer.model.forward_all(&images, true);
            loss = Some(danet_loss(&out, &masks, [1.0; 3]));
        });
        trainer.optimizer.zero_grad();
        backward += seconds(|| loss.expect("loss").backward());
        let lr = trainer.config.lr_at(it);
        update += seconds(|| trainer.optimizer.step([lr, lr * 10.0]));
    }
    let n = steps as f64;
    println!(
        "{}",
        serde_json::json!({
            "engine": "segtool",
            "median_step_s": step_times[step_times.len() / 2],
            "forward_s": forward / n,
            "backward_s": backward / n,
            "update_s": update / n,
            "threads": threads,
        })
    );
    Ok(())
}
