//! Every export contract through the runtime's serving paths: the plain graph,
//! `--preprocess` (uint8 NHWC in), `--argmax` (class map out) and both, each run by a
//! `Segmenter`, a `BatchServer` built from segmenters and its ordered stream. The server
//! and the stream must give the segmenter's masks exactly (they take the same path), and
//! every variant the plain graph's masks (the deployment ops change nothing).

use std::time::Duration;

use segtool_runtime::batching::{BatchConfig, BatchServer};
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{EngineKind, OutputKind, Segmenter};

use crate::deploy_tests::{images, tempdir, tiny, write_checkpoint};
use crate::{export_onnx, ExportOptions, ExportTarget};

fn open(path: &std::path::Path, engine: EngineKind) -> Option<Segmenter> {
    match Segmenter::builder(path).engine(engine).threads(1).open() {
        Err(segtool_runtime::RuntimeError::OrtLibraryNotFound { tried }) => {
            crate::testutil::skip::missing_reference(
                format_args!("the ONNX Runtime library (tried {tried:?})"),
                "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
            );
            None
        }
        other => Some(other.unwrap()),
    }
}

fn masks(segs: impl IntoIterator<Item = segtool_runtime::ClassMap>) -> Vec<u8> {
    segs.into_iter().flat_map(|m| m.to_le_bytes()).collect()
}

#[test]
fn batch_server_and_ordered_stream_serve_every_export_contract() {
    let spec = tiny(4);
    let dir = tempdir("serving");
    let ckpt = write_checkpoint(&dir, &spec, 5);
    // Two sizes, so batches also group by size.
    let mut frames = images(40, 32, 1);
    frames.extend(images(24, 40, 3));
    let variants = [(false, false), (true, false), (false, true), (true, true)];
    for engine in [EngineKind::Tract, EngineKind::Ort] {
        let mut plain: Option<Vec<u8>> = None;
        for (preprocess, argmax) in variants {
            let path = dir.join(format!("p{}a{}.onnx", preprocess as u8, argmax as u8));
            let opts = ExportOptions::for_target(ExportTarget::Tract)
                .with_preprocess(preprocess)
                .with_argmax(argmax);
            export_onnx(&ckpt, &path, &opts).unwrap();
            let Some(mut seg) = open(&path, engine) else {
                return;
            };
            let c = seg.contract();
            assert_eq!(
                (
                    c.input == segtool_runtime::InputLayout::NhwcU8,
                    c.output == OutputKind::Mask
                ),
                (preprocess, argmax)
            );
            let expected = masks(
                seg.segment_batch(&frames)
                    .unwrap()
                    .into_iter()
                    .map(|s| s.mask),
            );

            let config = BatchConfig::new()
                .with_max_batch(3)
                .with_max_wait(Duration::from_millis(2))
                .with_queue_capacity(16);
            let workers = vec![seg, open(&path, engine).unwrap()];
            let server = BatchServer::from_segmenters(config, workers).unwrap();
            let served = server.segment_all(frames.clone()).unwrap();
            assert_eq!(
                masks(served.into_iter().map(|s| s.mask)),
                expected,
                "{engine} server {c}"
            );

            let stream = server.ordered_stream(4);
            let streamed = std::thread::scope(|s| {
                s.spawn(|| {
                    for f in &frames {
                        stream.push(f.clone());
                    }
                    stream.finish();
                });
                let mut out = Vec::new();
                while let Some(r) = stream.next() {
                    out.push(r.unwrap());
                }
                out
            });
            assert_eq!(
                streamed
                    .iter()
                    .map(|o| o.served.and_then(|s| s.frame).unwrap())
                    .collect::<Vec<_>>(),
                (0..frames.len() as u64).collect::<Vec<_>>()
            );
            assert_eq!(
                masks(streamed.into_iter().map(|o| o.mask)),
                expected,
                "{engine} stream {c}"
            );

            match &plain {
                None => plain = Some(expected),
                Some(p) => {
                    let differ = p.iter().zip(&expected).filter(|(a, b)| a != b).count();
                    assert_eq!(
                        differ,
                        0,
                        "{engine} {c}: {differ} of {} pixels differ from the plain graph",
                        p.len()
                    );
                }
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}
