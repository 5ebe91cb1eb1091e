#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `segtool infer` (globs, raw frames on stdin, --labels/--logits) and `segtool bench` on a
//! tiny exported DANet.
//!
//! The shared setup (a tiny exported model, three images) lives here; the cases in
//! `infer/`.

#[path = "infer/bad_inputs.rs"]
mod bad_inputs;
#[path = "infer/batch.rs"]
mod batch;
#[path = "infer/fixed_graph.rs"]
mod fixed_graph;
use crate::common;
#[path = "infer/live.rs"]
mod live;

use common::{p, segtool};

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const W: u32 = 48;
const H: u32 = 32;

/// Runs segtool with `stdin` piped in; returns its output.
fn segtool_stdin(args: &[&str], stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_segtool"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("segtool starts");
    let mut pipe = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    // Feed from a thread so a full stdout pipe cannot deadlock us.
    let feeder = std::thread::spawn(move || {
        let _ = pipe.write_all(&bytes);
    });
    let out = child.wait_with_output().expect("segtool finishes");
    feeder.join().unwrap();
    out
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "segtool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Exports the tiny model and writes three images (plus non-image clutter) to `d/imgs`.
fn setup(d: &Path) -> (PathBuf, Vec<image::RgbImage>) {
    let (_, _, ckpt) = common::tiny_checkpoint(d, 7);
    let onnx = d.join("m.onnx");
    ok(&segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&onnx),
    ]));
    let imgs_dir = d.join("imgs");
    std::fs::create_dir_all(&imgs_dir).unwrap();
    let images: Vec<_> = (0..3).map(|seed| common::test_image(seed, W, H)).collect();
    for (i, img) in images.iter().enumerate() {
        img.save(imgs_dir.join(format!("img{i}.png"))).unwrap();
    }
    std::fs::write(imgs_dir.join("notes.txt"), "not an image").unwrap();
    image::RgbImage::from_pixel(16, 24, image::Rgb([200, 40, 90]))
        .save(imgs_dir.join("other.png"))
        .unwrap();
    (onnx, images)
}

fn labels(path: &Path) -> Vec<u8> {
    let img = image::open(path).unwrap();
    assert_eq!(img.color(), image::ColorType::L8, "{}", path.display());
    assert_eq!((img.width(), img.height()), (W, H));
    img.into_luma8().into_raw()
}
