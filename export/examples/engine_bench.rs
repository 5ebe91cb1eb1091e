//! Latency of one exported model in segtool-runtime's tract (or ORT) engine, for
//! bench/export_vs_torch_onnx.py (which measures the process's peak RSS around it).
//!
//!     cargo run -p segtool-export --example engine_bench -- MODEL.onnx tract|ort H W [RUNS]
//!
//! Prints one JSON line: load time, first run (includes tract's plan for the size), and
//! the median of RUNS further runs, in ms.
use std::time::Instant;

use ndarray::Array4;
use segtool_runtime::expert::Engine;

fn main() {
    let a: Vec<String> = std::env::args().collect();
    assert!(
        a.len() >= 5,
        "usage: engine_bench MODEL tract|ort H W [RUNS]"
    );
    let (h, w): (usize, usize) = (a[3].parse().unwrap(), a[4].parse().unwrap());
    let runs: usize = a.get(5).map_or(2, |r| r.parse().unwrap());
    let t = Instant::now();
    let mut engine: Box<dyn Engine> = match a[2].as_str() {
        "tract" => Box::new(segtool_runtime::expert::TractEngine::open(&a[1]).unwrap()),
        "ort" => Box::new(
            segtool_runtime::expert::OrtEngine::open(
                &a[1],
                &segtool_runtime::OrtOptions::new().with_intra_threads(2),
            )
            .unwrap(),
        ),
        e => panic!("unknown engine {e}"),
    };
    let load = t.elapsed().as_secs_f64() * 1e3;
    let x = Array4::from_shape_fn((1, 3, h, w), |(_, c, y, x)| {
        (((x * 7 + y * 3 + c * 11) % 97) as f32 / 48.0) - 1.0
    });
    let t = Instant::now();
    let _ = segtool_runtime::expert::run_logits(engine.as_mut(), x.view()).unwrap();
    let first = t.elapsed().as_secs_f64() * 1e3;
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            let _ = segtool_runtime::expert::run_logits(engine.as_mut(), x.view()).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let median = if times.is_empty() {
        first
    } else {
        times[times.len() / 2]
    };
    // Peak RSS of this process (VmHWM, KiB).
    let hwm = segtool_model_spec::process::memory_kib("VmHWM")
        .map_or_else(|| "null".to_string(), |kib| kib.to_string());
    println!(
        "{{\"engine\": \"{}\", \"load_ms\": {load:.1}, \"first_ms\": {first:.1}, \"median_ms\": {median:.1}, \"runs\": {runs}, \"vm_hwm_kib\": {hwm}}}",
        engine.name()
    );
}
