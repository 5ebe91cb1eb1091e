#![cfg(all(feature = "train", feature = "ort", feature = "tract"))]
//! `segtool infer` (globs, raw frames on stdin, --labels/--logits) and `segtool bench` on a
//! tiny exported DANet.

mod common;

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

#[test]
fn glob_raw_frames_logits_and_bench() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (onnx, images) = setup(d);
    let pred = d.join("pred");
    // Glob (quoted: segtool expands it): img0..img2, not other.png or notes.txt.
    let pattern = format!("{}/img*.png", p(&d.join("imgs")));
    let first = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        &pattern,
        "--out",
        p(&pred),
        "--labels",
        "--logits",
        "--batch-size",
        "2",
        "--threads",
        "1",
    ]);
    ok(&first);
    // All three share one size, so the session was fixed to it (and said so).
    let summary = String::from_utf8_lossy(&first.stdout);
    assert!(summary.contains(&format!("fixed {H}x{W}")), "{summary}");
    for i in 0..3 {
        for suffix in ["mask.png", "overlay.png", "labels.png", "logits.npy"] {
            assert!(pred.join(format!("img{i}_{suffix}")).is_file(), "{suffix}");
        }
    }
    assert!(!pred.join("other_mask.png").exists());
    let png_labels: Vec<Vec<u8>> = (0..3)
        .map(|i| labels(&pred.join(format!("img{i}_labels.png"))))
        .collect();
    // A random model should still predict more than one class somewhere.
    let distinct: std::collections::HashSet<u8> = png_labels.concat().into_iter().collect();
    assert!(distinct.len() > 1, "degenerate prediction {distinct:?}");

    // --logits: numpy loads [5, H, W] float32 whose argmax is the mask.
    for i in 0..3 {
        let npy = pred.join(format!("img{i}_logits.npy"));
        let argmax = d.join(format!("argmax{i}.bin"));
        let script = "import sys, numpy as np\n\
                      a = np.load(sys.argv[1])\n\
                      assert a.dtype == np.float32, a.dtype\n\
                      print(a.shape)\n\
                      a.argmax(axis=0).astype(np.uint8).tofile(sys.argv[2])\n";
        let out = common::python()
            .args(["-c", script, p(&npy), p(&argmax)])
            .output()
            .expect("python runs");
        ok(&out);
        let shape = String::from_utf8_lossy(&out.stdout);
        assert_eq!(shape.trim(), format!("(5, {H}, {W})"));
        assert_eq!(std::fs::read(&argmax).unwrap(), png_labels[i], "image {i}");
    }

    // The dynamic-shape session gives the same masks (batch 2 then 1, like above).
    let dynamic = d.join("pred_dynamic");
    let out = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        &pattern,
        "--out",
        p(&dynamic),
        "--labels",
        "--batch-size",
        "2",
        "--dynamic-shapes",
    ]);
    ok(&out);
    assert!(!String::from_utf8_lossy(&out.stdout).contains("fixed"));
    for (i, want) in png_labels.iter().enumerate() {
        assert_eq!(&labels(&dynamic.join(format!("img{i}_labels.png"))), want);
    }

    // Explicit files, a folder and a glob mixed; duplicates are dropped, same outputs.
    let pred2 = d.join("pred2");
    ok(&segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        p(&d.join("imgs/img1.png")),
        "--input",
        &format!("{}/img[02].png", p(&d.join("imgs"))),
        p(&d.join("imgs/img1.png")),
        // Another size in the same batch: its own engine run.
        p(&d.join("imgs/other.png")),
        "--out",
        p(&pred2),
        "--labels",
        "--no-overlay",
        "--engine",
        "tract",
    ]));
    for i in 0..3 {
        assert_eq!(
            labels(&pred2.join(format!("img{i}_labels.png"))),
            png_labels[i]
        );
    }
    assert!(!pred2.join("img0_overlay.png").exists());
    let other = image::open(pred2.join("other_mask.png")).unwrap();
    assert_eq!((other.width(), other.height()), (16, 24));
    // A pattern matching nothing names itself.
    let out = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        &format!("{}/zz*.png", p(&d.join("imgs"))),
        "--out",
        p(&pred2),
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("zz*.png"));

    // Raw frames on stdin -> raw class maps on stdout, identical to the PNG path.
    let frames: Vec<u8> = images.iter().flat_map(|i| i.as_raw().clone()).collect();
    let raw = format!("{W}x{H}");
    for batch in ["1", "2"] {
        let out = segtool_stdin(
            &[
                "infer",
                "--model",
                p(&onnx),
                "--raw",
                &raw,
                "--out",
                "-",
                "--batch-size",
                batch,
                "--threads",
                "1",
            ],
            &frames,
        );
        ok(&out);
        assert_eq!(out.stdout.len(), 3 * (W * H) as usize);
        assert!(
            out.stdout == png_labels.concat(),
            "raw class maps differ from the PNG path (batch {batch})"
        );
    }
    // Raw frames -> PNGs in a folder.
    let pred3 = d.join("pred3");
    ok(&segtool_stdin(
        &[
            "infer",
            "--model",
            p(&onnx),
            "--raw",
            &raw,
            "--out",
            p(&pred3),
            "--labels",
        ],
        &frames,
    ));
    for i in 0..3 {
        assert!(pred3.join(format!("frame_{i:06}_mask.png")).is_file());
        assert_eq!(
            labels(&pred3.join(format!("frame_{i:06}_labels.png"))),
            png_labels[i]
        );
    }

    // Bad --raw sizes: unparsable, zero, and frames that do not divide the input.
    for bad in ["48", "48x", "0x32", "axb"] {
        let out = segtool_stdin(
            &["infer", "--model", p(&onnx), "--raw", bad, "--out", "-"],
            &frames,
        );
        assert!(!out.status.success(), "--raw {bad} accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("WIDTHxHEIGHT"), "--raw {bad}: {err}");
    }
    let frame = (W * H * 3) as usize;
    let out = segtool_stdin(
        &["infer", "--model", p(&onnx), "--raw", &raw, "--out", "-"],
        &frames[..2 * frame + 100],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("100 of {frame} bytes")) && err.contains("frame 2"),
        "{err}"
    );
    // The two whole frames before it were still written.
    assert_eq!(out.stdout, png_labels[..2].concat());
    // --out - without --raw is refused.
    let out = segtool(&[
        "infer",
        "--model",
        p(&onnx),
        "--input",
        &pattern,
        "--out",
        "-",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--raw"));

    // bench: JSON with per-batch-size latency stats, throughput and the provider.
    let json_path = d.join("f.json");
    let out = segtool(&[
        "bench",
        "--model",
        p(&onnx),
        "--iterations",
        "3",
        "--warmup",
        "1",
        "--batch-sizes",
        "1,2",
        "--size",
        &format!("{H}x{W}"),
        "--threads",
        "1",
        "--json",
        p(&json_path),
    ]);
    ok(&out);
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("median") && table.contains("img/s"),
        "{table}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(report["engine"], "onnxruntime");
    assert_eq!(report["provider"], "cpu");
    assert_eq!(report["threads"], 1);
    assert_eq!(report["size"]["height"], H);
    assert_eq!(report["size"]["width"], W);
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for (r, n) in results.iter().zip([1, 2]) {
        assert_eq!(r["batch_size"], n);
        assert_eq!(r["iterations"], 3);
        assert!(r["throughput_ips"].as_f64().unwrap() > 0.0);
        for key in ["latency_ms", "preprocess_ms", "engine_ms", "postprocess_ms"] {
            let s = &r[key];
            let v = |k: &str| s[k].as_f64().unwrap_or_else(|| panic!("{key}.{k}"));
            assert!(v("min") <= v("median") && v("median") <= v("p90") && v("p90") <= v("p99"));
        }
        assert!(
            r["latency_ms"]["min"].as_f64().unwrap() >= r["engine_ms"]["min"].as_f64().unwrap()
        );
    }
    // tract, by duration.
    ok(&segtool(&[
        "bench",
        "--model",
        p(&onnx),
        "--engine",
        "tract",
        "--duration",
        "0.2",
        "--warmup",
        "0",
        "--size",
        &format!("{H}x{W}"),
    ]));
}

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

/// `--raw --live`: newest frame wins. Frames arrive as fast as a pipe gives them, so most
/// are dropped; the counts add up, the newest frame is always answered, masks exist for
/// exactly the answered frames (named by index, or prefixed by it on stdout), smoothing
/// is refused for `--argmax` exports; ordered raw streams report their flicker; `bench
/// --stream` reports latency percentiles and drops in both modes.
#[test]
fn live_raw_frames_flicker_and_stream_bench() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (onnx, _) = setup(d);
    const N: usize = 30;
    let frames: Vec<u8> = (0..N as u32)
        .flat_map(|i| common::test_image(i % 4, W, H).into_raw())
        .collect();
    let wxh = format!("{W}x{H}");
    let count = |summary: &str, what: &str| -> usize {
        let at = summary
            .find(what)
            .unwrap_or_else(|| panic!("{what} in {summary}"));
        let digits: String = summary[..at]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .chars()
            .filter(char::is_ascii_digit)
            .collect();
        digits.parse().unwrap()
    };

    let live = d.join("live");
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(&onnx),
            "--raw",
            &wxh,
            "--live",
            "--smooth",
            "0.6",
            "--out",
            p(&live),
            "--threads",
            "1",
        ],
        &frames,
    );
    ok(&out);
    let summary = String::from_utf8_lossy(&out.stdout).to_string();
    eprintln!("{summary}");
    let submitted = count(&summary, "frame(s) submitted");
    let answered = count(&summary, "answered,");
    let dropped = count(&summary, "dropped (");
    assert_eq!(submitted, N, "{summary}");
    assert_eq!(answered + dropped, N, "{summary}");
    assert!(summary.contains("arrival-to-mask ms p50"), "{summary}");
    let mut written: Vec<usize> = std::fs::read_dir(&live)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix("_mask.png")?
                .strip_prefix("frame_")?
                .parse()
                .ok()
        })
        .collect();
    written.sort();
    assert_eq!(written.len(), answered);
    assert_eq!(
        written.last(),
        Some(&(N - 1)),
        "the newest frame is always answered"
    );
    assert!(live
        .join(format!("frame_{:06}_overlay.png", N - 1))
        .is_file());

    // stdout: 8-byte index, then W*H class bytes, per answered frame.
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(&onnx),
            "--raw",
            &wxh,
            "--live",
            "--out",
            "-",
        ],
        &frames,
    );
    ok(&out);
    let record = 8 + (W * H) as usize;
    assert_eq!(out.stdout.len() % record, 0);
    let indices: Vec<u64> = out
        .stdout
        .chunks(record)
        .map(|r| u64::from_le_bytes(r[..8].try_into().unwrap()))
        .collect();
    assert!(indices.windows(2).all(|w| w[0] < w[1]), "{indices:?}");
    assert_eq!(indices.last(), Some(&(N as u64 - 1)));
    let summary = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(count(&summary, "answered,"), indices.len(), "{summary}");

    // Ordered raw frames report their flicker.
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(&onnx),
            "--raw",
            &wxh,
            "--out",
            p(&d.join("ordered")),
        ],
        &frames,
    );
    ok(&out);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("flicker"), "{summary}");

    // Smoothing needs logits.
    let argmax = d.join("argmax.onnx");
    let (_, _, ckpt) = common::tiny_checkpoint(d, 7);
    ok(&segtool(&[
        "export",
        "--checkpoint",
        p(&ckpt),
        "--onnx",
        p(&argmax),
        "--argmax",
    ]));
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(&argmax),
            "--raw",
            &wxh,
            "--live",
            "--smooth",
            "0.5",
            "--out",
            p(&d.join("x")),
        ],
        &frames,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--smooth") && err.contains("--argmax"),
        "{err}"
    );

    // bench --stream, both modes, generated frames; JSON as bench writes it.
    for live in [false, true] {
        let json = d.join(format!("stream-{live}.json"));
        let mut args = vec![
            "bench",
            "--model",
            p(&onnx),
            "--stream",
            "--fps",
            "200",
            "--frames",
            "40",
            "--size",
            "32x48",
            "--threads",
            "1",
            "--json",
            p(&json),
        ];
        if live {
            args.push("--live");
        }
        ok(&segtool(&args));
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let s = &report["stream"];
        assert_eq!(s["mode"], if live { "newest-frame" } else { "ordered" });
        assert_eq!(s["frames"], 40);
        let (answered, dropped) = (
            s["answered"].as_u64().unwrap(),
            s["dropped"].as_u64().unwrap(),
        );
        assert_eq!(answered + dropped, 40, "{s}");
        if !live {
            assert_eq!(dropped, 0);
        }
        for key in ["median", "p90", "p99"] {
            assert!(s["latency_ms"][key].as_f64().unwrap() > 0.0, "{s}");
        }
        assert!(report["provider"].is_string());
    }
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
