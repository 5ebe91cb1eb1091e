//! Shared by the plugin's tests: the `libgstsegtool.so` cargo built, put in a folder of
//! its own that `GST_PLUGIN_PATH` names (so GStreamer finds it the way users' pipelines
//! do), tiny models written in code, test frames, and `gst-launch-1.0` runs with a
//! timeout.

#![allow(dead_code)] // each test binary uses its part

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use image::RgbImage;
use segtool_testkit::{tiny_model_bytes, tiny_spec};

/// The `libgstsegtool.so` built with this test binary: `deps/` or `target/<profile>/`,
/// whichever copy is newer (`cargo test` rebuilds only the one in `deps/`).
fn built_plugin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let candidates = [
        deps.parent().unwrap().join("libgstsegtool.so"),
        deps.join("libgstsegtool.so"),
    ];
    candidates
        .iter()
        .filter_map(|p| Some((std::fs::metadata(p).and_then(|m| m.modified()).ok()?, p)))
        .max()
        .map(|(_, p)| p.clone())
        .unwrap_or_else(|| panic!("libgstsegtool.so not found in {candidates:?}; cargo builds it (crate-type cdylib) before this test"))
}

/// The folder `GST_PLUGIN_PATH` names: a copy of the built plugin alone (the `deps/`
/// folder holds hundreds of other libraries GStreamer would try to load).
pub fn plugin_dir() -> PathBuf {
    static COPY: Once = Once::new();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("gst-plugins");
    COPY.call_once(|| {
        std::fs::create_dir_all(&dir).unwrap();
        // Copy, then rename over: another test process may have the old copy loaded.
        let tmp = dir.join(format!(".libgstsegtool.so.{}", std::process::id()));
        std::fs::copy(built_plugin(), &tmp).unwrap();
        std::fs::rename(&tmp, dir.join("libgstsegtool.so")).unwrap();
    });
    dir
}

/// The environment GStreamer runs with in these tests: the plugin's folder, and a
/// registry cache of this target folder's own.
pub fn gst_env() -> Vec<(&'static str, PathBuf)> {
    vec![
        ("GST_PLUGIN_PATH", plugin_dir()),
        (
            "GST_REGISTRY",
            Path::new(env!("CARGO_TARGET_TMPDIR")).join("gst-registry.bin"),
        ),
    ]
}

/// Initialises GStreamer in this process with [`gst_env`] (once).
pub fn init() {
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        for (k, v) in gst_env() {
            std::env::set_var(k, v);
        }
        gst::init().unwrap();
        assert!(
            gst::ElementFactory::find("segtoolseg").is_some(),
            "segtoolseg not found through GST_PLUGIN_PATH={:?}",
            plugin_dir()
        );
    });
}

/// 4 classes of a 1x1 conv: red, green, blue dominance and dark pixels.
pub const WEIGHTS: [[f32; 3]; 4] = [
    [1.0, 0.0, 0.0],
    [0.0, 1.0, 0.0],
    [0.0, 0.0, 1.0],
    [-1.0, -1.0, -1.0],
];

/// Writes the tiny model of [`tiny_model`] with its input fixed to `height` x `width`
/// (batch 1), as an export for a fixed camera size has it.
pub fn fixed_model(dir: &Path, classes: usize, height: i64, width: i64) -> PathBuf {
    let plain = std::fs::read(tiny_model(dir, classes)).unwrap();
    let fixed = segtool_testkit::with_fixed_size(&plain, classes as i64, height, width);
    let path = dir.join(format!("fixed{classes}_{height}x{width}.onnx"));
    std::fs::write(&path, fixed).unwrap();
    path
}

/// Writes a tiny model with `classes` classes (the first 4 as [`WEIGHTS`], then mixes)
/// into `dir`; returns its path.
pub fn tiny_model(dir: &Path, classes: usize) -> PathBuf {
    let spec = tiny_spec(classes);
    let weights: Vec<[f32; 3]> = (0..classes)
        .map(|c| {
            WEIGHTS.get(c).copied().unwrap_or_else(|| {
                let k = c as f32;
                [(k * 0.37).sin(), (k * 0.71).cos(), (k * 1.13).sin()]
            })
        })
        .collect();
    let bias: Vec<f32> = (0..classes).map(|c| c as f32 * 0.001).collect();
    let path = dir.join(format!("tiny{classes}.onnx"));
    std::fs::write(&path, tiny_model_bytes(&spec, &weights, &bias)).unwrap();
    path
}

/// A deterministic frame with regions of every class and noise.
pub fn frame(seed: u32, w: u32, h: u32) -> RgbImage {
    let mut state = seed.wrapping_mul(2654435761).wrapping_add(12345);
    RgbImage::from_fn(w, h, |x, y| {
        state = state.wrapping_mul(1664525).wrapping_add(1013904223);
        let n = (state >> 24) as u8 / 4;
        let band = ((x + y + seed) / 4) % 4;
        let base: [u8; 3] = match band {
            0 => [200, 40, 40],
            1 => [40, 200, 40],
            2 => [40, 40, 200],
            _ => [10, 10, 10],
        };
        image::Rgb(base.map(|c| c.saturating_add(n)))
    })
}

/// `gst-launch-1.0 -q` with `args` (one pipeline description), killed after `limit`.
pub fn gst_launch(args: &str, limit: Duration) -> Output {
    let mut cmd = Command::new("gst-launch-1.0");
    cmd.arg("-q").args(args.split_whitespace());
    run_with_limit(cmd, limit)
}

/// Runs `cmd` with [`gst_env`], stdout and stderr captured, killing it after `limit`
/// (the test then fails: a hang).
pub fn run_with_limit(mut cmd: Command, limit: Duration) -> Output {
    for (k, v) in gst_env() {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning (is gstreamer1.0-tools installed? scripts/setup.sh installs it)");
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {limit:?} (a hang):\n{}",
                show(&out)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The `segtool` binary cargo built for the workspace's tests (`target/<profile>/segtool`).
pub fn segtool_bin() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().unwrap().parent().unwrap().join("segtool");
    assert!(
        bin.is_file(),
        "{bin:?} missing: `cargo test --workspace --no-run` (make test) builds it"
    );
    bin
}
