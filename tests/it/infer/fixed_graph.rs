//! A model exported at a fixed input size, fed frames of another size: `segtool infer`,
//! one image at a time and in batches, fits them to the graph and gives the masks the
//! runtime's `Segmenter` gives (the pipeline every front end runs), at the frames' size.

use std::path::Path;

use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{EngineKind, Segmenter};

use crate::common::{self, ok, p, segtool};

fn mask_png(path: &Path) -> Vec<u8> {
    image::open(path).unwrap().to_rgb8().into_raw()
}

/// The `_mask.png` pixels `segtool infer` should write for the frame at `path`: the
/// segmenter's mask in the model's palette, at the frame's size.
fn expected_png(seg: &mut Segmenter, path: &Path) -> Vec<u8> {
    let img = image::open(path).unwrap().to_rgb8();
    let mask = seg.segment(&img).unwrap().mask;
    assert_eq!(mask.dim(), (img.height() as usize, img.width() as usize));
    let palette = &seg.spec().palette;
    mask.iter().flat_map(|c| palette[c as usize]).collect()
}

#[test]
fn a_fixed_size_graph_takes_frames_of_another_size_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (_, _, ckpt) = common::tiny_checkpoint(dir.path(), 7);
    let onnx = dir.path().join("fixed.onnx");
    ok(segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&onnx),
        "--input-size",
        "64x96",
    ]));
    let frames = dir.path().join("frames");
    std::fs::create_dir_all(&frames).unwrap();
    // Two sizes, neither the graph's.
    let sizes = [(80u32, 40u32), (80, 40), (50, 70)];
    for (i, &(w, h)) in sizes.iter().enumerate() {
        common::test_image(i as u32, w, h)
            .save(frames.join(format!("f{i}.png")))
            .unwrap();
    }
    let mut seg = Segmenter::builder(&onnx)
        .engine(EngineKind::Ort)
        .threads(1)
        .open()
        .unwrap();
    assert_eq!(seg.graph_size(), Some((64, 96)));
    for batch in ["1", "3"] {
        let out = dir.path().join(format!("masks{batch}"));
        ok(segtool(&[
            "infer",
            "--model",
            p(&onnx),
            "--input",
            p(&frames),
            "--out",
            p(&out),
            "--engine",
            "ort",
            "--threads",
            "1",
            "--batch-size",
            batch,
            "--no-overlay",
        ]));
        for (i, &(w, h)) in sizes.iter().enumerate() {
            let want = expected_png(&mut seg, &frames.join(format!("f{i}.png")));
            let got = mask_png(&out.join(format!("f{i}_mask.png")));
            assert!(got == want, "batch {batch}, frame {i} ({w}x{h})");
        }
    }
    // One input size: infer plans ONNX Runtime's memory for the tensor the graph takes
    // (its own size), not for the frames'.
    let out = dir.path().join("single");
    let stderr = ok(segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        p(&frames.join("f2.png")),
        "--out",
        p(&out),
        "--engine",
        "ort",
        "--threads",
        "1",
        "--no-overlay",
    ]));
    let want = expected_png(&mut seg, &frames.join("f2.png"));
    assert!(mask_png(&out.join("f2_mask.png")) == want, "{stderr}");
}
