//! `--raw --live` (newest frame wins), flicker of ordered raw streams, `bench --stream`.

use std::path::Path;

use crate::common::{self, p, segtool};

use super::{ok, segtool_stdin, setup, H, W};

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
    let frames: Vec<u8> = (0..N as u32)
        .flat_map(|i| common::test_image(i % 4, W, H).into_raw())
        .collect();
    let wxh = format!("{W}x{H}");
    newest_frame_wins_into_a_folder(d, &onnx, &wxh, &frames);
    newest_frame_wins_on_stdout(&onnx, &wxh, &frames);
    // Ordered raw frames report their flicker.
    let ordered = d.join("ordered");
    let args = [
        "infer",
        "--model",
        p(&onnx),
        "--raw",
        &wxh,
        "--out",
        p(&ordered),
    ];
    let out = segtool_stdin(&args, &frames);
    ok(&out);
    let summary = String::from_utf8_lossy(&out.stdout);
    assert!(summary.contains("flicker"), "{summary}");
    smoothing_needs_logits(d, &wxh, &frames);
    stream_bench_in_both_modes(d, &onnx);
}

const N: usize = 30;

/// The number just before `what` in a summary line.
fn count(summary: &str, what: &str) -> usize {
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
}

fn newest_frame_wins_into_a_folder(d: &Path, onnx: &Path, wxh: &str, frames: &[u8]) {
    let live = d.join("live");
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(onnx),
            "--raw",
            wxh,
            "--live",
            "--smooth",
            "0.6",
            "--out",
            p(&live),
            "--threads",
            "1",
        ],
        frames,
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
}

fn newest_frame_wins_on_stdout(onnx: &Path, wxh: &str, frames: &[u8]) {
    // stdout: 8-byte index, then W*H class bytes, per answered frame.
    let out = segtool_stdin(
        &[
            "infer",
            "--model",
            p(onnx),
            "--raw",
            wxh,
            "--live",
            "--out",
            "-",
        ],
        frames,
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
}

fn smoothing_needs_logits(d: &Path, wxh: &str, frames: &[u8]) {
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
            wxh,
            "--live",
            "--smooth",
            "0.5",
            "--out",
            p(&d.join("x")),
        ],
        frames,
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--smooth") && err.contains("--argmax"),
        "{err}"
    );
}

fn stream_bench_in_both_modes(d: &Path, onnx: &Path) {
    // bench --stream, both modes, generated frames; JSON as bench writes it.
    for live in [false, true] {
        let json = d.join(format!("stream-{live}.json"));
        let mut args = vec![
            "bench",
            "--model",
            p(onnx),
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
