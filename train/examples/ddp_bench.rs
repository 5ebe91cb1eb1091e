//! Data-parallel throughput on this machine, in one run:
//! 1. DANet training steps at a fixed global batch: 1 process x 2 intra-op threads
//!    against 2 ranks (gloo on 127.0.0.1, SyncBN + DDP) x 1 thread each;
//! 2. the gloo group's all-reduce (sum, fp32) bandwidth at 1, 16 and 64 MB between 2
//!    ranks: algorithm bandwidth = bytes / time (for 2 ranks, ring bus bandwidth equals it).
//!
//!     cargo run --release -p segtool-train --example ddp_bench -- \
//!         [--backbone tiny|resnet18] [--crop 64] [--batch 4] [--steps 10]
//!
//! The ranks are this binary re-executed under `segtool_train::distributed::Launcher`
//! (DDP_BENCH_CHILD=train|allreduce); rank 0 prints their results.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::distributed::{
    Backend, Ddp, DistEnv, LaunchConfig, Launcher, ProcessGroup, ReduceOp,
};
use segtool_train::{TrainConfig, Trainer};
use tch::{Kind, Tensor};

const CHILD_VAR: &str = "DDP_BENCH_CHILD";
const WARMUP: usize = 2;

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn backbone() -> Result<BackboneSpec> {
    match arg::<String>("--backbone", "tiny".into()).as_str() {
        "tiny" => Ok(BackboneSpec::tiny()),
        name => {
            let depth: usize = name.trim_start_matches("resnet").parse()?;
            BackboneSpec::resnet(depth, 8).context("unknown ResNet depth")
        }
    }
}

/// Seconds per training step (after warm-up) on `batch` images, optionally data-parallel.
fn train_steps(batch: i64, group: Option<Arc<ProcessGroup>>) -> Result<f64> {
    let (crop, steps) = (arg("--crop", 64i64), arg("--steps", 10usize));
    let spec = ModelSpec::new(
        "bench",
        backbone()?,
        (0..19).map(|c| format!("c{c}")).collect(),
    );
    let cfg = TrainConfig {
        iterations: WARMUP + steps,
        batch_size: batch as usize,
        progress: false,
        ..TrainConfig::default()
    };
    let mut trainer = Trainer::new(&spec, cfg)?;
    if let Some(group) = group {
        trainer.enable_sync_bn(group.clone());
        trainer.enable_ddp(Ddp::new(
            group,
            segtool_train::distributed::DEFAULT_BUCKET_MB,
        ))?;
    }
    let images = Tensor::randn([batch, 3, crop, crop], (Kind::Float, tch::Device::Cpu));
    let masks = Tensor::randint(19, [batch, crop, crop], (Kind::Int64, tch::Device::Cpu));
    let mut start = Instant::now();
    for it in 0..WARMUP + steps {
        if it == WARMUP {
            start = Instant::now();
        }
        trainer.step(&images, &masks, it)?;
    }
    Ok(start.elapsed().as_secs_f64() / steps as f64)
}

fn join() -> Result<(DistEnv, Arc<ProcessGroup>)> {
    let env = DistEnv::from_env()?.context("no torchrun environment")?;
    let group = ProcessGroup::new(&env.group_options(Backend::Gloo, Duration::from_secs(120)))?;
    Ok((env, Arc::new(group)))
}

fn child(kind: &str) -> Result<()> {
    tch::set_num_threads(1);
    let (env, group) = join()?;
    match kind {
        "train" => {
            let global = arg("--batch", 4i64);
            let per_step = train_steps(global / env.world_size as i64, Some(group.clone()))?;
            // The slowest rank sets the pace.
            let mut t = Tensor::from_slice(&[per_step]);
            group.all_reduce(&mut t, ReduceOp::Max)?;
            if env.rank == 0 {
                let s = t.double_value(&[0]);
                println!(
                    "  2 ranks x 1 thread:  {:.3} s/step  {:.2} img/s",
                    s,
                    global as f64 / s
                );
            }
        }
        "allreduce" => {
            for mb in [1usize, 16, 64] {
                let n = (mb << 20) / 4;
                let mut t = Tensor::ones([n as i64], (Kind::Float, tch::Device::Cpu));
                group.all_reduce(&mut t, ReduceOp::Sum)?; // warm-up: connections, buffers
                let reps = if mb >= 64 { 5 } else { 10 };
                group.barrier()?;
                let start = Instant::now();
                for _ in 0..reps {
                    group.all_reduce(&mut t, ReduceOp::Sum)?;
                }
                let s = start.elapsed().as_secs_f64() / reps as f64;
                if env.rank == 0 {
                    let bytes = (n * 4) as f64;
                    println!(
                        "  all_reduce {mb:>3} MB: {:.2} ms  {:.2} GB/s",
                        s * 1e3,
                        bytes / s / 1e9
                    );
                }
            }
        }
        other => anyhow::bail!("unknown child {other}"),
    }
    Ok(())
}

fn launch(kind: &str) -> Result<()> {
    let exe = std::env::current_exe()?;
    let args: Vec<String> = std::env::args().skip(1).collect();
    Launcher::new(LaunchConfig {
        nproc_per_node: 2,
        ..LaunchConfig::default()
    })?
    .run(|_env| {
        let mut cmd = Command::new(&exe);
        cmd.args(&args)
            .env(CHILD_VAR, kind)
            .env("OMP_NUM_THREADS", "1");
        cmd
    })
}

fn main() -> Result<()> {
    if let Ok(kind) = std::env::var(CHILD_VAR) {
        return child(&kind);
    }
    let global = arg("--batch", 4i64);
    println!(
        "DANet {} crop {} global batch {global}, {} timed steps, {} cores",
        arg::<String>("--backbone", "tiny".into()),
        arg("--crop", 64i64),
        arg("--steps", 10usize),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    tch::set_num_threads(2);
    let s = train_steps(global, None)?;
    println!(
        "  1 rank x 2 threads:  {:.3} s/step  {:.2} img/s",
        s,
        global as f64 / s
    );
    launch("train")?;
    println!("gloo all_reduce (sum, fp32), 2 ranks on 127.0.0.1:");
    launch("allreduce")?;
    Ok(())
}
