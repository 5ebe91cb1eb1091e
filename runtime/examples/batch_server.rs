//! A batch server: requests from many threads share the engines, batched dynamically
//! (`BatchServer`); each caller waits on its own handle.
//!
//! `cargo run -p segtool-runtime --example batch_server [MODEL.onnx]` (without a model, a
//! tiny test model is written to a temporary folder). Built and run by `make test`.

use std::path::Path;
use std::time::Duration;

use image::{Rgb, RgbImage};
use segtool_runtime::{
    batching::{BatchConfig, BatchServer},
    EngineKind, Segmenter,
};
use segtool_testkit::tiny_model_file;

/// Four client threads submit 5 images each; returns (requests, batches) served.
fn run(model: &Path) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    // The builder a single Segmenter takes; one engine session per worker.
    let builder = Segmenter::builder(model)
        .engine(EngineKind::Tract)
        .threads(1);
    let config = BatchConfig::new()
        .with_max_batch(4)
        .with_max_wait(Duration::from_millis(5));
    let server = BatchServer::open(&builder, 1, config)?;
    std::thread::scope(|scope| {
        for client in 0..4u8 {
            let server = &server;
            scope.spawn(move || {
                for i in 0..5u8 {
                    let img = RgbImage::from_fn(32, 32, |x, y| {
                        Rgb([x as u8 * 8, y as u8 * 8, client * 60 + i])
                    });
                    let out = server.submit(img).wait().expect("answered");
                    assert_eq!(out.mask.dim(), (32, 32));
                }
            });
        }
    });
    let stats = server.stats();
    Ok((stats.requests(), stats.batches()))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let model = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => tiny_model_file(dir.path())?,
    };
    let (requests, batches) = run(&model)?;
    println!("{requests} requests served in {batches} batches");
    Ok(())
}

#[test]
fn every_request_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (requests, batches) = run(&tiny_model_file(dir.path()).unwrap()).unwrap();
    assert_eq!(requests, 20);
    assert!((1..=20).contains(&batches));
}
