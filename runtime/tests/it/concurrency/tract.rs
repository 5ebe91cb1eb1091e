//! The batching engine over real tract sessions (only with the `tract` feature).

use std::time::Duration;

use image::{Rgb, RgbImage};
use ndarray::Axis;
use segtool_runtime::batching::{BatchConfig, BatchServer, Handle};
use segtool_runtime::expert::normalise;
use segtool_runtime::expert::Engine;
use segtool_runtime::expert::SegmenterExt;
use segtool_testkit::tiny_spec;

/// The real thing: two tract sessions of a tiny ONNX model give exactly the masks and
/// logits of `Segmenter::segment`.
#[test]
fn tract_sessions_match_segmenter() {
    use segtool_runtime::{expert::TractEngine, EngineKind, Segmenter};
    use segtool_testkit::tiny_model_bytes;

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rgb.onnx");
    let weights = [
        [1.0, 0.0, 0.0],
        [0.0, 1.0, 0.0],
        [0.0, 0.0, 1.0],
        [0.5, 0.5, -1.0],
    ];
    std::fs::write(
        &path,
        tiny_model_bytes(&tiny_spec(4), &weights, &[0.0, 0.1, -0.1, 0.2]),
    )
    .unwrap();
    let imgs: Vec<RgbImage> = (0..12u32)
        .map(|i| {
            let (w, h) = [(5, 3), (8, 8), (2, 6)][i as usize % 3];
            RgbImage::from_fn(w, h, |x, y| {
                let v = |k: u32| ((i * 37 + x * 53 + y * 91 + k * 71) % 256) as u8;
                Rgb([v(0), v(1), v(2)])
            })
        })
        .collect();

    let mut seg = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .with_logits(true);
    let spec = seg.spec().clone();
    let config = BatchConfig::new()
        .with_max_batch(4)
        .with_max_wait(Duration::from_millis(20))
        .with_logits(true);
    let server = BatchServer::from_factory(config, spec.clone(), 2, |_| {
        Ok(Box::new(TractEngine::open(&path)?) as Box<dyn Engine>)
    })
    .unwrap();
    assert!(server.stats().workers.iter().all(|w| w.engine == "tract"));
    let handles: Vec<Handle> = imgs.iter().map(|img| server.submit(img.clone())).collect();
    // The same images as normalised tensors.
    let tensors: Vec<Handle> = imgs
        .iter()
        .map(|img| server.submit(normalise(img, &spec).index_axis_move(Axis(0), 0)))
        .collect();
    for ((img, h), t) in imgs.iter().zip(handles).zip(tensors) {
        let want = seg.segment(img).unwrap();
        let got = h.wait().unwrap();
        assert_eq!(got.mask, want.mask);
        assert_eq!(got.logits, want.logits);
        assert_eq!(t.wait().unwrap().mask, want.mask);
    }
    let all = server.segment_all(imgs.clone()).unwrap();
    assert_eq!(all.len(), imgs.len());
    let stats = server.stats();
    eprintln!("tract: {stats:#?}");
    assert_eq!(stats.requests(), 36);
    assert!(stats.mean_batch_size() > 1.0);
}
