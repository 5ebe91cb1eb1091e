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
            let img = image::open(frames.join(format!("f{i}.png")))
                .unwrap()
                .to_rgb8();
            let want = seg.segment(&img).unwrap();
            assert_eq!(want.mask.dim(), (h as usize, w as usize));
            let palette = &seg.spec().palette;
            let coloured: Vec<u8> = want
                .mask
                .iter()
                .flat_map(|&c| palette[c as usize])
                .collect();
            let got = mask_png(&out.join(format!("f{i}_mask.png")));
            assert!(got == coloured, "batch {batch}, frame {i} ({w}x{h})");
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
    let img = image::open(frames.join("f2.png")).unwrap().to_rgb8();
    let want = seg.segment(&img).unwrap();
    let palette = &seg.spec().palette;
    let coloured: Vec<u8> = want
        .mask
        .iter()
        .flat_map(|&c| palette[c as usize])
        .collect();
    assert!(mask_png(&out.join("f2_mask.png")) == coloured, "{stderr}");
}
