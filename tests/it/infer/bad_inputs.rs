//! Unreadable images (`--keep-going`) and raw frame sizes past the bound.

use crate::common::{self, p, segtool};

use super::{setup, H, W};

/// A folder with three good PNGs, a truncated PNG and a text file named `.png`:
/// `--keep-going` writes the three, names both bad files with a reason and fails at the
/// end with the counts; without it the first bad file stops the run, named.
#[test]
fn keep_going_skips_unreadable_images() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (onnx, _) = setup(d);
    let mixed = d.join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    for seed in 0..3 {
        common::test_image(seed, W, H)
            .save(mixed.join(format!("img{seed}.png")))
            .unwrap();
    }
    // Same size in its header as the good ones, cut off in the pixel data.
    let mut png = Vec::new();
    common::test_image(9, W, H)
        .write_to(&mut std::io::Cursor::new(&mut png), image::ImageFormat::Png)
        .unwrap();
    std::fs::write(mixed.join("img3_truncated.png"), &png[..png.len() / 2]).unwrap();
    std::fs::write(mixed.join("img4_text.png"), "not an image at all\n").unwrap();

    let out_dir = d.join("kept");
    let out = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        p(&mixed),
        "--out",
        p(&out_dir),
        "--keep-going",
        "--no-overlay",
        "--threads",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success(),
        "--keep-going with bad inputs exited 0: {stderr}"
    );
    for i in 0..3 {
        assert!(
            out_dir.join(format!("img{i}_mask.png")).is_file(),
            "img{i}: {stderr}"
        );
    }
    for bad in ["img3_truncated", "img4_text"] {
        assert!(!out_dir.join(format!("{bad}_mask.png")).exists(), "{bad}");
    }
    let line = |name: &str| {
        stderr
            .lines()
            .find(|l| l.starts_with("skipped") && l.contains(name))
            .unwrap_or_else(|| panic!("{name} not reported: {stderr}"))
            .to_string()
    };
    assert!(
        line("img3_truncated.png").contains("truncated image"),
        "{stderr}"
    );
    assert!(line("img4_text.png").contains("corrupt image"), "{stderr}");
    assert!(
        stderr.contains("processed 3 images, 2 failed: ")
            && stderr.contains("img3_truncated.png, ")
            && stderr.contains("img4_text.png"),
        "{stderr}"
    );
    // The text file's unreadable header did not keep the session from being fixed to the
    // size the other headers agree on.
    assert!(stdout.contains(&format!("fixed {H}x{W}")), "{stdout}");

    // Without --keep-going: the first bad file in input order stops the run, named.
    let out = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        p(&mixed),
        "--out",
        p(&d.join("stopped")),
        "--threads",
        "1",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "bad inputs accepted: {stderr}");
    assert!(
        stderr.contains("img3_truncated.png") && stderr.contains("truncated image"),
        "{stderr}"
    );
    assert!(!stderr.contains("img4_text.png"), "{stderr}");
}

/// A raw frame size past the decoded-image bound is refused when parsed, before any
/// buffer exists, naming the size and the limit.
#[test]
fn huge_raw_frame_size_is_refused_up_front() {
    let out = common::segtool(&["infer", "--model", "unread.onnx", "--raw", "30000x30000"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("frame too large") && stderr.contains("30000x30000 pixels need 2575 MiB"),
        "{stderr}"
    );
    assert!(stderr.contains("over the 512 MiB limit"), "{stderr}");
}
