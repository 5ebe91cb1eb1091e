//! A robot's loop: the camera outruns the model, so the newest frame wins
//! (`LatestStream`). The camera thread submits without waiting; the consumer takes each
//! answer with its frame index and latency; frames that were replaced are counted, never
//! run late.
//!
//! `cargo run -p segtool-runtime --example robot_loop [MODEL.onnx]` (without a model, a
//! tiny test model is written to a temporary folder). Built and run by `make test`.

use std::path::Path;
use std::time::Duration;

use image::{Rgb, RgbImage};
use segtool_runtime::{
    batching::{BatchConfig, BatchServer},
    EngineKind, Segmenter,
};
use segtool_testkit::tiny_model_file;

/// Runs 40 camera frames at 1 ms intervals through a newest-frame stream; returns
/// (answered, replaced or expired, submitted).
fn run(model: &Path) -> Result<(u64, u64, u64), Box<dyn std::error::Error>> {
    let seg = Segmenter::builder(model)
        .engine(EngineKind::Tract)
        .threads(1)
        .open()?;
    let server = BatchServer::from_segmenters(BatchConfig::new(), vec![seg])?;
    let stream = server.latest_stream(1);
    let submitted = 40u64;
    std::thread::scope(|scope| {
        scope.spawn(|| {
            for i in 0..submitted {
                let frame =
                    RgbImage::from_fn(64, 48, |x, y| Rgb([(x * 4) as u8, (y * 5) as u8, i as u8]));
                stream.submit(frame); // never waits for the model
                std::thread::sleep(Duration::from_millis(1));
            }
            stream.finish();
        });
        let (mut answered, mut dropped) = (0, 0);
        while let Some(frame) = stream.next() {
            match frame.output() {
                Some(out) => {
                    answered += 1;
                    assert_eq!(out.mask.dim(), (48, 64));
                    let _latency = frame.submitted.elapsed();
                }
                None => dropped += 1,
            }
        }
        Ok((answered, dropped, submitted))
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let model = match std::env::args().nth(1) {
        Some(path) => path.into(),
        None => tiny_model_file(dir.path())?,
    };
    let (answered, dropped, submitted) = run(&model)?;
    println!("{submitted} frames submitted: {answered} answered, {dropped} replaced by newer ones");
    Ok(())
}

#[test]
fn every_frame_is_answered_or_counted() {
    let dir = tempfile::tempdir().unwrap();
    let (answered, dropped, submitted) = run(&tiny_model_file(dir.path()).unwrap()).unwrap();
    assert!(answered >= 1);
    assert_eq!(answered + dropped, submitted);
}
