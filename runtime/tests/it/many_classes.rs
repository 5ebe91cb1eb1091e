//! A model of 300 classes end to end: the segmenter, the batch server and its streams
//! answer 16-bit class maps whose ids above 255 are the ones the model's colour grid
//! puts there, and the argmax of the logits they return, taken here by hand.

use image::RgbImage;
use ndarray::{Array2, Array3};
use segtool_runtime::batching::{BatchConfig, BatchServer};
use segtool_runtime::{colorize, ClassMap, EngineKind, Segmenter};
use segtool_testkit::{many_classes_model_bytes, many_classes_pixel};

const CLASSES: usize = 300;
const H: usize = 12;
const W: usize = 25;

/// Frame `seed`'s class ids: every id 0..299 over a dozen frames, 256.. on each.
fn ids(seed: usize) -> Array2<u16> {
    Array2::from_shape_fn((H, W), |(y, x)| ((seed * 61 + y * W + x) % CLASSES) as u16)
}

fn frame(ids: &Array2<u16>) -> RgbImage {
    RgbImage::from_fn(W as u32, H as u32, |x, y| {
        image::Rgb(many_classes_pixel(
            ids[[y as usize, x as usize]].into(),
            CLASSES,
        ))
    })
}

/// The first largest logit of every pixel, by hand.
fn argmax_by_hand(logits: &Array3<f32>) -> Array2<u16> {
    let (c, h, w) = logits.dim();
    Array2::from_shape_fn((h, w), |(y, x)| {
        (1..c).fold(0, |best, k| {
            if logits[[k, y, x]] > logits[[best, y, x]] {
                k
            } else {
                best
            }
        }) as u16
    })
}

fn model(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("grid300.onnx");
    std::fs::write(&path, many_classes_model_bytes(CLASSES)).unwrap();
    path
}

#[test]
fn a_300_class_model_answers_16_bit_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let mut seg = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .logits(true)
        .open()
        .unwrap();
    for seed in 0..3 {
        let want = ids(seed);
        assert!(want.iter().any(|&c| c > 255));
        let out = seg.segment(&frame(&want)).unwrap();
        assert_eq!(out.mask.bits(), 16, "300 classes: u16 ids");
        assert_eq!(out.mask.as_u16().unwrap(), want.view(), "frame {seed}");
        let logits = out.logits.as_ref().expect("asked for");
        assert_eq!(logits.dim().0, CLASSES);
        assert_eq!(out.mask.to_u16(), argmax_by_hand(logits), "frame {seed}");
        // Colours past the 256th palette entry.
        let colours = colorize(&out.mask, &seg.spec().palette);
        let c = want[[H - 1, W - 1]] as usize;
        assert_eq!(
            colours.get_pixel(W as u32 - 1, H as u32 - 1).0,
            seg.spec().palette[c]
        );
    }
}

#[test]
fn the_batch_server_and_its_streams_answer_16_bit_ids() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let segs = (0..2)
        .map(|_| {
            Segmenter::builder(&path)
                .engine(EngineKind::Tract)
                .open()
                .unwrap()
        })
        .collect();
    let server = BatchServer::from_segmenters(BatchConfig::new().with_max_batch(3), segs).unwrap();
    let wants: Vec<Array2<u16>> = (0..6).map(ids).collect();
    let answers = server
        .segment_all(wants.iter().map(frame).collect())
        .unwrap();
    for (out, want) in answers.iter().zip(&wants) {
        assert_eq!(out.mask, ClassMap::U16(want.clone()));
        assert!(out.served.is_some_and(|s| s.batch_size >= 1));
    }
    let stream = server.ordered_stream(wants.len());
    for want in &wants {
        stream.push(frame(want)); // the window holds them all: no wait
    }
    stream.finish();
    for (i, want) in wants.iter().enumerate() {
        let out = stream.next().unwrap().unwrap();
        assert_eq!(out.served.and_then(|s| s.frame), Some(i as u64));
        assert_eq!(out.mask.as_u16().unwrap(), want.view(), "frame {i}");
    }
    let live = server.latest_stream(1);
    live.submit(frame(&wants[0]));
    live.finish();
    let answered = std::iter::from_fn(|| live.next())
        .find_map(|f| f.into_output())
        .expect("the one frame is answered");
    assert_eq!(answered.mask.as_u16().unwrap(), wants[0].view());
}
