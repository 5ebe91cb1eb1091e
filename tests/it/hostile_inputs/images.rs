//! Images (PNG, JPEG, masks; image bombs) and raw frames of the wrong size.

use std::process::{Command, Stdio};

use super::{case_dir, err_string, fixtures, CHILD_VMEM_KIB, IMAGE_BOUND, LIMIT, MIB};
use crate::common::{self, p};
use super::sweep_support::{self, case_count, mutations, Tally};

fn encode(img: &image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    img.write_to(&mut out, format).unwrap();
    out.into_inner()
}

#[test]
fn sweep_png_and_jpeg_images() {
    let rgb = image::DynamicImage::ImageRgb8(common::test_image(2, 48, 32));
    let mask = image::DynamicImage::ImageLuma8(image::GrayImage::from_fn(48, 32, |x, y| {
        image::Luma([((x / 8 + y / 8) % 5) as u8])
    }));
    let png = encode(&rgb, image::ImageFormat::Png);
    let jpeg = encode(&rgb, image::ImageFormat::Jpeg);
    let mask_png = encode(&mask, image::ImageFormat::Png);
    // PNG: IHDR width / height at 16 / 20; JPEG: the SOF0 segment.
    let sof = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).unwrap_or(2);
    let dir = case_dir("images");
    for (name, ext, valid, hot, mask) in [
        (
            "png (dataset::read_rgb)",
            "png",
            &png,
            vec![8, 16, 20, 33],
            false,
        ),
        (
            "jpeg (dataset::read_rgb)",
            "jpg",
            &jpeg,
            vec![2, sof + 5, sof + 7],
            false,
        ),
        (
            "png mask (dataset::read_mask)",
            "png",
            &mask_png,
            vec![8, 16, 20, 33],
            true,
        ),
    ] {
        let cases = mutations(valid, 0x1a6 + valid.len() as u64, case_count(600), &hot);
        let mut t = Tally::new(name);
        t.run_in_process(&dir, ext, &cases, LIMIT, IMAGE_BOUND, move |p| {
            if mask {
                segtool_core::dataset::read_mask(p)
                    .map(drop)
                    .map_err(err_string)
            } else {
                segtool_core::dataset::read_rgb(p)
                    .map(drop)
                    .map_err(err_string)
            }
        });
        t.finish();
    }
}

/// A PNG whose header declares `w` x `h` (8-bit, `color`: 0 gray, 2 RGB) and whose data
/// is one tiny IDAT: what an image bomb's first bytes look like.
fn png_declaring(w: u32, h: u32, color: u8) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8], data: &[u8]) {
        out.extend_from_slice(&(data.len() as u32).to_be_bytes());
        let mut body = kind.to_vec();
        body.extend_from_slice(data);
        out.extend_from_slice(&body);
        out.extend_from_slice(&crc32(&body).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend_from_slice(&w.to_be_bytes());
    ihdr.extend_from_slice(&h.to_be_bytes());
    ihdr.extend_from_slice(&[8, color, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xedb8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn image_bomb_is_refused_naming_size_and_limit() {
    let dir = case_dir("bomb");
    let rgb = dir.join("bomb.png");
    std::fs::write(&rgb, png_declaring(30000, 30000, 2)).unwrap();
    let gray = dir.join("bomb_mask.png");
    std::fs::write(&gray, png_declaring(30000, 30000, 0)).unwrap();
    sweep_support::reset_largest_alloc();
    let e1 = segtool_core::dataset::read_rgb(&rgb)
        .unwrap_err()
        .to_string();
    let e2 = segtool_core::dataset::read_mask(&gray)
        .unwrap_err()
        .to_string();
    let e3 = segtool_calibration::read_image(&rgb)
        .unwrap_err()
        .to_string();
    let largest = sweep_support::largest_alloc();
    for e in [&e1, &e2, &e3] {
        assert!(e.contains("30000x30000") && e.contains("MiB limit"), "{e}");
    }
    assert!(
        e1.contains("bomb.png") && e2.contains("bomb_mask.png"),
        "{e1} / {e2}"
    );
    assert!(largest < MIB, "allocated {largest} bytes before refusing");
    // Through the command: refused with the same words, without allocating (ulimit -v
    // 8 GiB: the 2.7 GB buffer alone would not fit beside libtorch and ONNX Runtime).
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!("ulimit -v {CHILD_VMEM_KIB}; exec \"$@\""))
        .arg("bash")
        .arg(env!("CARGO_BIN_EXE_segtool"))
        .args(["infer", "--model", p(&fixtures().dir.join("m.onnx"))])
        .args(["--input", p(&rgb), "--out", p(&dir.join("out"))])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("bomb.png") && err.contains("30000x30000") && err.contains("MiB limit"),
        "{err}"
    );
    println!("image bomb: {e1}");
}

// ---- raw frames --------------------------------------------------------------------------

#[test]
fn raw_frames_of_the_wrong_length_are_refused() {
    let onnx = fixtures().dir.join("m.onnx");
    let (w, h) = (24usize, 16usize);
    let frame = w * h * 3;
    for len in [1, frame - 1, frame + 1, 2 * frame - 1, 3 * frame + 7] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_segtool"))
            .args(["infer", "--model", p(&onnx), "--raw", &format!("{w}x{h}")])
            .args(["--out", "-", "--threads", "1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let _ = std::io::Write::write_all(&mut stdin, &vec![7u8; len]);
        });
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{len} bytes accepted");
        let whole = len / frame;
        assert!(
            err.contains(&format!("{} of {frame} bytes", len % frame))
                && err.contains(&format!("frame {whole}")),
            "{len} bytes: {err}"
        );
        assert_eq!(
            out.stdout.len(),
            whole * w * h,
            "{len} bytes: whole frames still out"
        );
    }
}
