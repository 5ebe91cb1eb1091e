//! A video pipeline: every frame answered, in frame order (`OrderedStream`), with a
//! bounded window of frames in flight so that memory stays flat.
//!
//! `cargo run -p segtool-runtime --example video_pipeline [MODEL.onnx]` (without a model,
//! a tiny test model is written to a temporary folder). Built and run by `make test`.

use std::path::Path;

use image::{Rgb, RgbImage};
use segtool_runtime::{
    batching::{BatchConfig, BatchServer},
    EngineKind, Segmenter,
};
use segtool_testkit::tiny_model_file;

/// Pushes 12 frames through an ordered stream; returns the frame indices in the order
/// their masks came back.
fn run(model: &Path) -> Result<Vec<u64>, Box<dyn std::error::Error>> {
    let segmenters = (0..2)
        .map(|_| {
            Segmenter::builder(model)
                .engine(EngineKind::Tract)
                .threads(1)
                .open()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let server = BatchServer::from_segmenters(BatchConfig::new().with_max_batch(2), segmenters)?;
    let stream = server.ordered_stream(4);
    let mut order = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..12u32 {
                let frame = RgbImage::from_fn(80, 60, |x, y| Rgb([(x + i) as u8, y as u8, 90]));
                stream.push(frame); // waits while the window is full
            }
            stream.finish();
        });
        while let Some(out) = stream.next() {
            let out = out?;
            order.push(
                out.served
                    .and_then(|s| s.frame)
                    .expect("ordered streams number their frames"),
            );
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })?;
    Ok(order)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let model = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => tiny_model_file(dir.path())?,
    };
    let order = run(&model)?;
    println!("{} frames answered in order: {order:?}", order.len());
    Ok(())
}

#[test]
fn frames_come_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let order = run(&tiny_model_file(dir.path()).unwrap()).unwrap();
    assert_eq!(order, (0..12).collect::<Vec<u64>>());
}
