//! The segmenter on the tiny 1x1-conv model: mixed sizes in order, logits, and the
//! fallback report, through tract and ONNX Runtime.

use std::path::Path;

#[cfg(feature = "ort")]
use crate::expert::OrtEngine;
use crate::segmenter::SegmenterExt;
use crate::{EngineKind, Segmenter};
#[cfg(feature = "ort")]
use crate::{Fallback, ModelFileError, OrtOptions, Provider, RuntimeError};
use image::{Rgb, RgbImage};
use segtool_testkit::{tiny_model_bytes, tiny_spec};

/// Class 0 scores red, class 1 green, class 2 blue: the mask is the dominant channel.
fn write_rgb_model(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("rgb.onnx");
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
    path
}

fn images() -> Vec<RgbImage> {
    let mut a = RgbImage::from_pixel(4, 3, Rgb([250, 0, 0]));
    a.put_pixel(1, 1, Rgb([0, 0, 250]));
    let b = RgbImage::from_pixel(2, 2, Rgb([0, 250, 0]));
    let c = RgbImage::from_pixel(4, 3, Rgb([0, 0, 250]));
    vec![a, b, c]
}

fn check_results(seg: &mut Segmenter) {
    let imgs = images();
    let out = seg.segment_batch(&imgs).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].mask.dim(), (3, 4));
    assert_eq!(out[0].mask.get((0, 0)), Some(0));
    assert_eq!(out[0].mask.get((1, 1)), Some(2));
    assert!(out[1].mask.iter().all(|m| m == 1));
    assert!(out[2].mask.iter().all(|m| m == 2));
    assert_eq!(out[0].logits.as_ref().unwrap().dim(), (3, 3, 4));
    let single = seg.segment(&imgs[0]).unwrap();
    assert_eq!(single.mask, out[0].mask);
}

#[cfg(feature = "tract")]
#[test]
fn segmenter_with_tract_handles_mixed_sizes_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let mut seg = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .with_logits(true);
    assert_eq!(seg.spec(), &tiny_spec(3));
    assert_eq!(
        (seg.engine().name(), seg.engine().provider()),
        ("tract", "cpu")
    );
    check_results(&mut seg);
}

/// Needs `libonnxruntime` (ORT_DYLIB_PATH or the build-time path): a missing reference
/// without it (a failure under `make test`, else a counted skip).
#[cfg(feature = "ort")]
#[test]
fn segmenter_with_ort_falls_back_to_cpu_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_provider(Provider::Cuda { device_id: 0 });
    let seg = match Segmenter::builder(&path)
        .engine(EngineKind::Ort)
        .ort_options(options)
        .open()
    {
        Err(RuntimeError::OrtLibraryNotFound { tried }) => {
            return segtool_testkit::missing_reference(
                format_args!("the ONNX Runtime library (tried {tried:?})"),
                "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
            );
        }
        other => other.unwrap(),
    };
    let mut seg = seg.with_logits(true);
    assert_eq!(seg.engine().name(), "onnxruntime");
    if seg.engine().provider() == "cpu" {
        assert!(seg.engine().fallback_reason().unwrap().contains("cuda:0"));
        assert!(
            matches!(&seg.fallbacks()[0], Fallback::Provider { requested, running, .. }
                if requested == "cuda:0" && running == "cpu"),
            "{:?}",
            seg.fallbacks()
        );
    }
    check_results(&mut seg);

    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, b"\x08\x08garbage").unwrap();
    let err = OrtEngine::open(&bad, &OrtOptions::new()).err().unwrap();
    assert!(
        matches!(err, RuntimeError::File(ModelFileError::Invalid { .. }))
            && err.to_string().contains("bad.onnx"),
        "{err}"
    );
}

/// A graph fixed to 6x8: its card resizes images of any size to it (OpenCV's bilinear,
/// as training resizes) and brings the scores back to the image (bilinear, the spec's
/// `align_corners`) before the argmax, in the segmenter and in the batch server alike.
#[cfg(feature = "tract")]
#[test]
fn a_fixed_size_graph_gets_fitted_images_and_frame_size_masks() {
    use crate::batching::{BatchConfig, BatchServer};
    use crate::expert::SegmenterExt;
    use crate::segmentation::postprocess::{argmax, resize_bilinear};
    use segtool_model_spec::protocol::resize::resize_linear_u8;
    let dir = tempfile::tempdir().unwrap();
    let plain = std::fs::read(write_rgb_model(dir.path())).unwrap();
    let path = dir.path().join("fixed.onnx");
    std::fs::write(&path, segtool_testkit::with_fixed_size(&plain, 3, 6, 8)).unwrap();
    let open = || {
        Segmenter::builder(&path)
            .engine(EngineKind::Tract)
            .threads(1)
            .open()
    };
    let mut seg = open().unwrap();
    assert_eq!(seg.graph_size(), Some((6, 8)));
    assert_eq!(seg.card().card.input.size, Some([6, 8]));
    assert_eq!(
        seg.card().source_of("input.size"),
        Some(&crate::card::CardSource::Graph)
    );
    // Red on the left, green on the right, with a blue square: boundaries the 20 -> 8
    // resize blurs, so the filter and the order of upsampling and argmax show.
    let frame = RgbImage::from_fn(20, 15, |x, y| match (x, y) {
        (12..=15, 4..=9) => Rgb([0, 30, 250]),
        (0..=9, _) => Rgb([250, 10, 10]),
        _ => Rgb([0, 240, 0]),
    });
    let small =
        RgbImage::from_raw(8, 6, resize_linear_u8(frame.as_raw(), 15, 20, 3, 6, 8)).unwrap();
    let scores = seg
        .preparer()
        .logits(true)
        .prepare(std::slice::from_ref(&small));
    let scores = seg.run(scores.unwrap()).unwrap().decode().unwrap();
    let at_graph = scores[0].mask.clone();
    let logits = scores[0]
        .logits
        .clone()
        .unwrap()
        .insert_axis(ndarray::Axis(0));
    let align = seg.spec().align_corners;
    let want = argmax(resize_bilinear(logits.view(), 15, 20, align).view()).remove(0);
    let got = seg.segment(&frame).unwrap();
    assert_eq!(got.mask, want);
    assert!(got.mask.iter().any(|c| c == 2), "the blue square survives");
    // The graph also fixes its batch at 1: batches of one size run in pieces of one.
    let batch = seg
        .segment_batch(&[frame.clone(), small, frame.clone()])
        .unwrap();
    let masks: Vec<_> = batch.into_iter().map(|s| s.mask).collect();
    assert_eq!(masks, [want.clone(), at_graph, want.clone()]);
    let server = BatchServer::from_segmenters(BatchConfig::new(), vec![open().unwrap()]).unwrap();
    let served = server.segment_all(vec![frame.clone(), frame]).unwrap();
    assert!(served.iter().all(|s| s.mask == want));
}

/// Accuracy mode is refused, naming the model, where its card says the protocol cannot
/// run it (a class map, a resize of its own), and for a batch server.
#[cfg(feature = "tract")]
#[test]
fn accuracy_mode_is_refused_where_it_cannot_run() {
    use crate::pipeline::accuracy::AccuracyOptions;
    use crate::batching::{BatchConfig, BatchServer};
    use crate::RuntimeError;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("argmax.onnx");
    std::fs::write(&path, segtool_testkit::foreign_model_bytes(3, 3, true)).unwrap();
    let card = dir.path().join("argmax.card.toml");
    let fields =
        "classes = [\"a\", \"b\", \"c\"]\n[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.2, 0.2, 0.2]\n";
    std::fs::write(&card, fields).unwrap();
    let foreign = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .card(crate::card::CardRequest::new().card_file(&card))
        .open()
        .unwrap();
    match foreign.with_accuracy(AccuracyOptions::default()) {
        Err(RuntimeError::AccuracyMode { why, .. }) => assert!(why.contains("card"), "{why}"),
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    // What refuses is what the card says, not where the model came from: the same card
    // on a graph answering logits runs, one with a resize of its own does not.
    let logits = dir.path().join("logits.onnx");
    std::fs::write(&logits, segtool_testkit::foreign_model_bytes(3, 3, false)).unwrap();
    let open_logits = |fields: &str| {
        std::fs::write(&card, fields).unwrap();
        Segmenter::builder(&logits)
            .engine(EngineKind::Tract)
            .card(crate::card::CardRequest::new().card_file(&card))
            .open()
            .unwrap()
            .with_accuracy(AccuracyOptions::default())
    };
    assert!(open_logits(fields).is_ok());
    let resized = fields.replace("[input]\n", "[input]\nsize = [16, 16]\n");
    match open_logits(&resized) {
        Err(RuntimeError::AccuracyMode { why, .. }) => {
            assert!(why.contains("input.size"), "{why}")
        }
        other => panic!("expected a refusal, got {:?}", other.err()),
    }
    let plain = write_rgb_model(dir.path());
    let seg = Segmenter::builder(&plain)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .with_accuracy(AccuracyOptions::default())
        .unwrap();
    assert!(seg.accuracy().is_some());
    let refused = BatchServer::from_segmenters(BatchConfig::new(), vec![seg]);
    assert!(refused.is_err(), "a batch server in accuracy mode");
}

/// OpenVINO through the builder: mixed sizes in order and logits as the other engines
/// give them; a device that is absent (no Intel GPU here) falls back to the CPU and says
/// why, and is an error when strict. Without the library: a missing reference (a failure
/// under `make test`, else a counted skip).
#[cfg(feature = "openvino")]
#[test]
fn segmenter_with_openvino_handles_mixed_sizes_and_reports_an_absent_device() {
    use crate::engines::openvino_options::Device;
    use crate::{Fallback, RuntimeError};
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let open = |device: Device, strict: bool| {
        Segmenter::builder(&path)
            .engine(EngineKind::OpenVino)
            .device(device)
            .threads(1)
            .strict(strict)
            .logits(true)
            .open()
    };
    let mut seg = match open(Device::Cpu, false) {
        Err(RuntimeError::OpenVinoLibraryNotFound { tried }) => {
            return segtool_testkit::missing_reference(
                format_args!("the OpenVINO library (tried {tried:?})"),
                "source \"$(bash scripts/setup.sh)\" (SEGTOOL_OPENVINO_LIB: the openvino wheel's)",
            );
        }
        other => other.unwrap(),
    };
    assert_eq!(
        (seg.engine().name(), seg.engine().provider()),
        ("openvino", "cpu")
    );
    check_results(&mut seg);
    assert!(seg.engine().ran_in().unwrap().contains("f32"));
    let gpu_present = open(Device::Gpu, true).is_ok();
    if !gpu_present {
        let seg = open(Device::Gpu, false).unwrap();
        match seg.fallbacks() {
            [Fallback::Provider {
                requested,
                running,
                reason,
            }] => {
                assert_eq!(
                    (requested.as_str(), running.as_str()),
                    ("openvino:GPU", "cpu")
                );
                assert!(reason.contains("no GPU"), "{reason}");
            }
            other => panic!("expected one device fallback, got {other:?}"),
        }
        match open(Device::Gpu, true) {
            Err(RuntimeError::FallbackRefused { fallback, .. }) => {
                assert!(fallback.contains("GPU"), "{fallback}")
            }
            other => panic!("strict: expected a refusal, got {:?}", other.err()),
        }
    }
}

/// The batch server opens its workers from the builder a single segmenter takes: the
/// same masks, one engine per worker, and at least one worker.
#[cfg(feature = "tract")]
#[test]
fn a_batch_server_opens_from_the_segmenter_builder() {
    use crate::batching::{BatchConfig, BatchError, BatchServer};
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let builder = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .threads(1);
    let server = BatchServer::open(&builder, 2, BatchConfig::new()).unwrap();
    assert_eq!(server.workers(), 2);
    let mut seg = builder.clone().open().unwrap();
    let want: Vec<_> = images()
        .iter()
        .map(|i| seg.segment(i).unwrap().mask)
        .collect();
    let got: Vec<_> = server
        .segment_all(images())
        .unwrap()
        .into_iter()
        .map(|s| s.mask)
        .collect();
    assert_eq!(got, want);
    assert!(matches!(
        BatchServer::open(&builder, 0, BatchConfig::new()),
        Err(BatchError::InvalidConfig(_))
    ));
}

/// The pipeline's first stage reads frames in any pixel format with padded rows in place,
/// and gives what the same pixels as RGB images give: at the graph's size (no copy) and
/// fitted to a fixed-size graph (through RGB copies) alike, grouped by size.
#[cfg(feature = "tract")]
#[test]
fn frames_in_place_and_rgb_images_give_the_same_masks() {
    use crate::{Frame, PixelFormat};
    let dir = tempfile::tempdir().unwrap();
    let plain = write_rgb_model(dir.path());
    let fixed = dir.path().join("fixed.onnx");
    let bytes = std::fs::read(&plain).unwrap();
    std::fs::write(&fixed, segtool_testkit::with_fixed_size(&bytes, 3, 6, 8)).unwrap();
    // BGRA rows padded to a stride of 4 extra bytes, three frames of two sizes.
    let image = |w: u32, h: u32, seed: u32| {
        RgbImage::from_fn(w, h, |x, y| {
            let v = (x * 37 + y * 91 + seed * 53) % 256;
            Rgb([v as u8, (255 - v) as u8, ((v * 7) % 256) as u8])
        })
    };
    let images = [image(8, 6, 1), image(11, 5, 2), image(8, 6, 3)];
    let buffers: Vec<(Vec<u8>, usize)> = images
        .iter()
        .map(|img| {
            let stride = img.width() as usize * 4 + 4;
            let mut buf = vec![0u8; stride * img.height() as usize];
            for (x, y, p) in img.enumerate_pixels() {
                let at = y as usize * stride + x as usize * 4;
                buf[at..at + 4].copy_from_slice(&[p[2], p[1], p[0], 255]);
            }
            (buf, stride)
        })
        .collect();
    let frames: Vec<Frame<'_>> = buffers
        .iter()
        .zip(&images)
        .map(|((buf, stride), img)| {
            Frame::new(buf, img.width(), img.height(), *stride, PixelFormat::Bgra8).unwrap()
        })
        .collect();
    for model in [&plain, &fixed] {
        let mut seg = Segmenter::builder(model)
            .engine(EngineKind::Tract)
            .threads(1)
            .open()
            .unwrap();
        let from_frames = seg.preparer().prepare_frames(&frames).unwrap();
        assert_eq!(from_frames.len(), 3);
        let got = seg.run(from_frames).unwrap().decode().unwrap();
        let want = seg.segment_batch(&images).unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.mask, w.mask, "{}: frame {i}", model.display());
            let (h, w) = (images[i].height() as usize, images[i].width() as usize);
            assert_eq!(g.mask.dim(), (h, w));
        }
    }
}
