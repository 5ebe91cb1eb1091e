//! Where tract spends its time on a model (a benchmark aid, not a test): every node of
//! the optimised plan timed over a few runs, summed by op kind, and the slowest nodes.
//!
//! ```text
//! cargo run --release -p segtool-runtime --example tract_profile -- MODEL.onnx 512 2 [runs]
//! ```
//!
//! The plan is built as `TractEngine` builds it (concrete NCHW f32 input of the given
//! side, `into_optimized`, a private pool of the given thread count, the plain eval
//! order). Also printed: resident memory after loading, planning and each run, and the
//! nodes during which the first run's peak rose by 16 MiB or more. `ORDER=<substring>`
//! lists the plan's order of the matching nodes; `TRACT_RAM_ORDER=1` plans with tract's
//! memory-minimising order instead; knobs such as `TRACT_LAZY_IM2COL_MIN_KERNEL` are read
//! from the environment by tract itself.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tract_onnx::prelude::multithread::Executor;
use tract_onnx::prelude::*;
use tract_onnx::tract_hir::tract_core;

fn main() -> TractResult<()> {
    let args: Vec<String> = std::env::args().collect();
    let (path, side, threads) = match &args[..] {
        [_, p, s, t, ..] => (p.clone(), s.parse::<usize>()?, t.parse::<usize>()?),
        _ => {
            eprintln!("usage: tract_profile MODEL.onnx SIDE THREADS [RUNS]");
            std::process::exit(2);
        }
    };
    let runs: usize = args.get(4).map_or(Ok(2), |r| r.parse())?;
    let t0 = Instant::now();
    let model = tract_onnx::onnx().model_for_path(&path)?;
    println!("loaded: {}", memory());
    let model = model
        .with_input_fact(0, f32::fact([1, 3, side, side]).into())?
        .into_optimized()?;
    let executor = Executor::multithread_with_name(threads, "profile");
    let plan = model.into_runnable_with_options(&RunOptions {
        executor: Some(executor),
        // As `TractEngine` plans (see there); TRACT_RAM_ORDER=1 for tract's default order.
        skip_order_opt_ram: std::env::var("TRACT_RAM_ORDER").is_err(),
        ..RunOptions::default()
    })?;
    println!("plan: {:.1} s, {}", t0.elapsed().as_secs_f64(), memory());
    if let Ok(filter) = std::env::var("ORDER") {
        for &id in plan.order_without_consts() {
            let node = plan.model().node(id);
            if node.name.contains(&filter) {
                println!("order: {} ({})", node.name, node.op().name());
            }
        }
    }
    let input: Tensor =
        tract_ndarray::Array4::<f32>::from_shape_fn((1, 3, side, side), |(_, c, y, x)| {
            ((c * 31 + y * 7 + x * 3) % 17) as f32 / 17.0 - 0.5
        })
        .into();
    let mut per_node: HashMap<usize, Duration> = HashMap::new();
    // Peak resident memory reached while each node ran, when it raised the peak (MiB).
    let mut peak_raised: Vec<(usize, u64, u64)> = Vec::new();
    let mut state = plan.spawn()?;
    for run in 0..=runs {
        let t = Instant::now();
        let timed = run > 0; // the first run warms up
        state.run_plan_with_eval(
            tvec!(input.clone().into()),
            |session, op_state, node, inputs| {
                let t = Instant::now();
                let before = kib("VmHWM:");
                let out = tract_core::plan::eval(session, op_state, node, inputs);
                if timed {
                    *per_node.entry(node.id).or_default() += t.elapsed();
                } else {
                    let after = kib("VmHWM:");
                    if after > before {
                        peak_raised.push((node.id, before / 1024, after / 1024));
                    }
                }
                out
            },
        )?;
        println!(
            "run {run}: {:.0} ms, {}",
            t.elapsed().as_secs_f64() * 1e3,
            memory()
        );
    }
    report(plan.model(), per_node, &peak_raised, runs);
    Ok(())
}

/// Per run: time by op kind (top 20), the nodes that raised the peak memory on the first
/// run, and every node by time.
fn report(
    model: &TypedModel,
    per_node: HashMap<usize, Duration>,
    peak_raised: &[(usize, u64, u64)],
    runs: usize,
) {
    let total: Duration = per_node.values().sum();
    let mut by_op: HashMap<String, (Duration, usize)> = HashMap::new();
    for (&id, &d) in &per_node {
        let e = by_op
            .entry(model.node(id).op().name().to_string())
            .or_default();
        e.0 += d;
        e.1 += 1;
    }
    let mut by_op: Vec<_> = by_op.into_iter().collect();
    by_op.sort_by_key(|op| std::cmp::Reverse(op.1 .0));
    println!(
        "\nper run, by op ({:.0} ms in nodes):",
        total.as_secs_f64() * 1e3 / runs as f64
    );
    for (op, (d, n)) in by_op.iter().take(20) {
        println!(
            "{:>9.1} ms {:>5.1}%  {n:>4} x {op}",
            d.as_secs_f64() * 1e3 / runs as f64,
            100.0 * d.as_secs_f64() / total.as_secs_f64()
        );
    }
    println!("\nnodes that raised the peak on the first run (MiB before -> after):");
    for (id, before, after) in peak_raised {
        if after - before >= 16 {
            let node = model.node(*id);
            println!(
                "{before:>6} -> {after:>6}  {} ({})",
                node.name,
                node.op().name()
            );
        }
    }
    let mut nodes: Vec<_> = per_node.into_iter().collect();
    nodes.sort_by_key(|node| std::cmp::Reverse(node.1));
    println!("\nslowest nodes:");
    for (id, d) in nodes.iter().take(usize::MAX) {
        let node = model.node(*id);
        let facts: Vec<String> = node
            .outputs
            .iter()
            .map(|o| format!("{:?}", o.fact))
            .collect();
        println!(
            "{:>9.1} ms  {} ({}) -> {}",
            d.as_secs_f64() * 1e3 / runs as f64,
            node.name,
            node.op().name(),
            facts.join(", ")
        );
    }
}

/// Resident and peak resident memory of this process (Linux), e.g. `rss 812 MiB, peak 1.9 GiB`.
fn memory() -> String {
    format!(
        "rss {} MiB, peak {} MiB",
        kib("VmRSS:") / 1024,
        kib("VmHWM:") / 1024
    )
}

/// A `/proc/self/status` field in KiB (0 where there is none).
fn kib(key: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0)
}
