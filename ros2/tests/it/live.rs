//! The live node against Eclipse Cyclone DDS (PyPI `cyclonedds`, the DDS behind ROS 2's
//! rmw_cyclonedds) in another process, playing the camera and the viewer
//! (tests/reference/ros2_camera.py): ROS 2 type names on `rt/...` topics, XCDR1.
//!
//! - Every mask the viewer receives equals the runtime's `Segmenter` on the same frame
//!   (the library `segtool infer` runs), stamp and frame_id carried through.
//! - answered + dropped = sent, by the node's own `/diagnostics`, which arrive, with the
//!   options the engine was opened with.
//! - Each bad message (unknown encodings, short step, short data, big-endian flag; a
//!   corrupt JPEG) is counted under its cause, and the node keeps answering.
//! - Compressed input works; a camera on another domain id reaches nothing.
//! - SIGINT ends the node within a second, exit 0.
//! - A node stopped and continued (SIGSTOP, SIGCONT: Ctrl-Z, a debugger) still
//!   discovers and answers: its DDS threads survive the interrupted poll.

#[path = "../../../tests/it/common/npy_file.rs"]
mod npy_file;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use segtool_runtime::{EngineKind, Segmenter, SegmenterOptions};
use segtool_testkit::{tiny_model_bytes, tiny_spec};
use serde_json::Value;

/// A 3-class pixelwise model (class = dominant colour) in `dir`.
fn model(dir: &Path) -> PathBuf {
    let path = dir.join("rgb.onnx");
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
    path
}

/// A domain id of this test process's own (tests run in parallel, and other runs may
/// share the machine's loopback); ROS 2 domain ids stop at 232.
fn domain(offset: u32) -> u32 {
    20 + (std::process::id() % 90) * 2 + offset
}

struct NodeProcess(Child);

impl NodeProcess {
    fn start(model: &Path, domain: u32, extra: &[&str]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_segtool-ros2"));
        cmd.args(["node", "--model"])
            .arg(model)
            .args([
                "--engine",
                "tract",
                "--threads",
                "1",
                "--diagnostics-period",
                "0.5",
            ])
            .args(extra)
            .args([
                "--ros-args",
                "-r",
                "__ns:=/seg",
                "-r",
                "image:=/cam/image_raw",
            ])
            .env("ROS_DOMAIN_ID", domain.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Self(cmd.spawn().expect("segtool-ros2 runs"))
    }

    /// SIGINT, then the exit status and stderr; the node must be gone within a second.
    fn interrupt(mut self) -> (bool, String, Duration) {
        unsafe { libc::kill(self.0.id() as i32, libc::SIGINT) };
        let t0 = Instant::now();
        let out = std::mem::replace(&mut self.0, Command::new("true").spawn().unwrap())
            .wait_with_output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
            t0.elapsed(),
        )
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn camera(out: &Path, domain: u32, extra: &[&str]) -> Value {
    let python = std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/ros2_camera.py");
    let run = Command::new(python)
        .arg(script)
        .args(["--out"])
        .arg(out)
        .args(["--domain", &domain.to_string(), "--reliable"])
        .args(extra)
        .output()
        .expect("python runs (SEGTOOL_PYTHON)");
    assert!(
        run.status.success(),
        "camera failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

/// The mask the viewer saved at `mask` (uint8 `.npy`) equals `seg`'s on the frame at
/// `frame`, size and class ids; returns its `(h, w)`.
fn assert_published_mask(
    seg: &mut Segmenter,
    frame: &Path,
    mask: &Path,
    what: &str,
) -> (usize, usize) {
    let frame = image::open(frame).unwrap().to_rgb8();
    let want = seg.segment(&frame).unwrap().mask;
    let (h, w, got) = npy_u8(mask);
    assert_eq!((h, w), want.dim(), "mask size of {what}");
    assert_eq!(got, want.to_le_bytes(), "mask of {what}");
    (h, w)
}

/// `.npy` of uint8 `[h, w]`.
fn npy_u8(path: &Path) -> (usize, usize, Vec<u8>) {
    let a = npy_file::read(path);
    assert!(a.header.contains("'|u1'"), "{}", a.header);
    (a.shape[0], a.shape[1], a.data)
}

/// A 300-class node: mono16 class masks, each the runtime's `Segmenter` on its frame (16-bit
/// ids, above 255 on the camera's frames too).
#[test]
fn a_300_class_model_publishes_mono16() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("grid300.onnx");
    std::fs::write(&model, segtool_testkit::many_classes_model_bytes(300)).unwrap();
    let d = domain(9);
    let node = NodeProcess::start(&model, d, &["--reliable"]);
    let out = tmp.path().join("wide");
    let summary = camera(&out, d, &["--frames", "4", "--rate", "10"]);
    assert_eq!(summary["matched"], true, "discovery: {summary}");
    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .threads(1)
        .open()
        .unwrap();
    let received = summary["received"].as_array().unwrap();
    assert!(!received.is_empty(), "{summary}");
    let mut above_255 = false;
    for r in received {
        assert_eq!(r["encoding"], "mono16", "{r}");
        let (sec, nanosec) = (r["sec"].as_i64().unwrap(), r["nanosec"].as_i64().unwrap());
        let frame = image::open(out.join(format!("frames/{}.png", sec - 1000)))
            .unwrap()
            .to_rgb8();
        let want = seg.segment(&frame).unwrap().mask;
        assert_eq!(want.bits(), 16);
        let a = npy_file::read(&out.join(format!("masks/{sec}_{nanosec}.npy")));
        assert!(a.header.contains("'<u2'"), "{}", a.header);
        assert_eq!((a.shape[0], a.shape[1]), want.dim());
        assert_eq!(a.data, want.to_le_bytes(), "mask of {sec}_{nanosec}");
        above_255 |= want.iter().any(|c| c > 255);
    }
    assert!(above_255, "the camera's frames show classes above 255");
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
}

/// Every received mask against the Segmenter on its frame; returns how many.
fn check_masks(dir: &Path, summary: &Value, model: &Path, ext: &str) -> usize {
    let mut seg = Segmenter::builder(model)
        .engine(EngineKind::Tract)
        .threads(1)
        .open()
        .unwrap();
    let received = summary["received"].as_array().unwrap();
    for r in received {
        let (sec, nanosec) = (r["sec"].as_i64().unwrap(), r["nanosec"].as_i64().unwrap());
        let i = sec - 1000;
        assert_eq!(nanosec, i, "stamp carried through: {r}");
        assert_eq!(r["frame_id"], "camera", "{r}");
        assert_eq!(r["encoding"], "mono8", "{r}");
        assert_published_mask(
            &mut seg,
            &dir.join(format!("frames/{i}.{ext}")),
            &dir.join(format!("masks/{sec}_{nanosec}.npy")),
            &format!("frame {i}"),
        );
    }
    received.len()
}

/// Every answered frame's colour mask arrived (someone subscribes: the node draws it),
/// with its stamp, and is the palette's colour of each class in its class mask.
fn check_colors(dir: &Path, summary: &Value) {
    let palette = tiny_spec(3).palette;
    let colors = summary["colors"].as_array().unwrap();
    assert_eq!(
        colors.len(),
        summary["received"].as_array().unwrap().len(),
        "one colour mask per class mask: {summary}"
    );
    for c in colors {
        assert_eq!(c["encoding"], "rgb8", "{c}");
        let stamp = format!("{}_{}", c["sec"], c["nanosec"]);
        let (h, w, classes) = npy_u8(&dir.join(format!("masks/{stamp}.npy")));
        let (ch, cw, rgb) = npy_u8(&dir.join(format!("colors/{stamp}.npy")));
        assert_eq!((ch, cw), (h, w * 3), "colour mask size of {stamp}");
        let want: Vec<u8> = classes.iter().flat_map(|&k| palette[k as usize]).collect();
        assert_eq!(rgb, want, "colour mask of {stamp}");
    }
}

fn count(summary: &Value, key: &str) -> u64 {
    summary["diagnostics"][key]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("diagnostics lack {key}: {summary}"))
}

#[test]
fn raw_frames_and_bad_messages_over_cyclone_dds() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(0);
    let node = NodeProcess::start(&model, d, &["--reliable"]);
    let out = tmp.path().join("raw");
    let summary = camera(
        &out,
        d,
        &[
            "--frames",
            "12",
            "--bad",
            "--rate",
            "30",
            "--colors",
            "/seg/color_mask",
        ],
    );
    assert_eq!(summary["matched"], true, "discovery: {summary}");
    let sent = summary["sent"].as_u64().unwrap();
    let answered = check_masks(&out, &summary, &model, "png");
    assert!(answered > 0, "{summary}");
    check_colors(&out, &summary);
    assert!(summary["diagnostics_messages"].as_u64().unwrap() >= 1);
    assert_eq!(
        count(&summary, "answered") + count(&summary, "dropped"),
        sent,
        "{summary}"
    );
    assert_eq!(count(&summary, "answered") as usize, answered, "{summary}");
    // Reliable QoS end to end: no gap in the camera's sequence numbers.
    assert_eq!(count(&summary, "lost"), 0, "{summary}");
    for cause in [
        "unknown encoding",
        "step shorter than a row",
        "data shorter than step x height",
        "big-endian flag",
    ] {
        let n: u64 = summary["diagnostics"][format!("bad: {cause}")]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap();
        assert!(n >= 1, "{cause} not counted: {summary}");
    }
    assert_eq!(
        count(&summary, "bad_messages"),
        summary["bad_sent"].as_u64().unwrap()
    );
    // The options the flags resolved to, as the engine received them.
    let options: SegmenterOptions = summary["diagnostics"]["options"]
        .as_str()
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_else(|| panic!("options in the diagnostics: {summary}"));
    let want = SegmenterOptions {
        engine: EngineKind::Tract,
        threads: Some(1),
        ..SegmenterOptions::default()
    };
    assert_eq!(options, want, "{summary}");
    let (ok, stderr, took) = node.interrupt();
    assert!(ok, "exit status after SIGINT: {stderr}");
    assert!(took < Duration::from_secs(1), "SIGINT took {took:?}");
    assert!(
        stderr.contains("bad message on /cam/image_raw (unknown encoding)"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("(unknown encoding)").count(),
        1,
        "logged once: {stderr}"
    );
}

#[test]
fn compressed_frames_and_other_domains() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(1);
    let node = NodeProcess::start(&model, d, &["--reliable", "--transport", "compressed"]);
    // A camera on another domain reaches nothing (and sees no node).
    let other = camera(
        &tmp.path().join("other"),
        d + 20,
        &[
            "--frames",
            "3",
            "--compressed",
            "--listen-s",
            "2",
            "--discovery-s",
            "2",
        ],
    );
    assert_eq!(other["matched"], false, "{other}");
    assert_eq!(other["received"].as_array().unwrap().len(), 0, "{other}");
    let out = tmp.path().join("compressed");
    let summary = camera(&out, d, &["--frames", "6", "--compressed", "--bad"]);
    assert_eq!(summary["matched"], true, "{summary}");
    let answered = check_masks(&out, &summary, &model, "jpg");
    assert!(answered > 0, "{summary}");
    assert_eq!(
        count(&summary, "answered") + count(&summary, "dropped"),
        summary["sent"].as_u64().unwrap()
    );
    assert_eq!(
        summary["diagnostics"]["bad: corrupt compressed image"], "1",
        "{summary}"
    );
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
}

/// The process's state letter from /proc (`T`: stopped).
fn proc_state(pid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After the parenthesised command name: " S ...".
    stat.rsplit(')')
        .next()
        .unwrap()
        .trim_start()
        .chars()
        .next()
        .unwrap()
}

fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .count()
}

#[test]
fn a_stopped_and_continued_node_still_answers() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(31);
    let node = NodeProcess::start(&model, d, &["--reliable"]);
    let pid = node.0.id();
    // Up, with its DDS threads parked in their polls: at least 4 threads, and no new
    // one for a second (the node starts its spinner and publisher after DDS).
    let (t0, mut threads, mut steady) = (Instant::now(), 0, Instant::now());
    while !(threads >= 4 && steady.elapsed() >= Duration::from_secs(1)) {
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "the node did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
        let now = thread_count(pid);
        if now != threads {
            (threads, steady) = (now, Instant::now());
        }
    }
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let t0 = Instant::now();
    while proc_state(pid) != 'T' {
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "SIGSTOP did not stop the node"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    std::thread::sleep(Duration::from_millis(300));
    // RustDDS 0.15.1 as released ended its event loop and discovery threads here.
    assert_eq!(thread_count(pid), threads, "threads lost across the stop");
    let out = tmp.path().join("after-stop");
    let summary = camera(&out, d, &["--frames", "6"]);
    assert_eq!(
        summary["matched"], true,
        "no discovery after the stop: {summary}"
    );
    let answered = check_masks(&out, &summary, &model, "png");
    assert!(answered > 0, "{summary}");
    assert_eq!(
        count(&summary, "answered") + count(&summary, "dropped"),
        summary["sent"].as_u64().unwrap(),
        "{summary}"
    );
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
}

/// A parameter file, as a launch file's `parameters=[config.yaml]` hands it to a node:
/// the model, the engine and the topics come from it (none on the command line), and the
/// masks arrive on its topics. A key the node does not declare, or a value of the wrong
/// type, stops the node with an error naming the file, the key and the expected type.
#[test]
fn a_parameter_file_sets_the_model_engine_and_topics() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(3);
    let params = tmp.path().join("config.yaml");
    std::fs::write(
        &params,
        format!(
            "/**:\n  ros__parameters:\n    threads: 1\n    reliable: true\n\
             /seg/segmenter:\n  ros__parameters:\n    model: {}\n    engine: tract\n    \
             input_topic: /cam2/image\n    class_mask_topic: /seg2/masks\n",
            model.display()
        ),
    )
    .unwrap();
    let spawn = |params: &Path| {
        Command::new(env!("CARGO_BIN_EXE_segtool-ros2"))
            .args([
                "node",
                "--ros-args",
                "-r",
                "__ns:=/seg",
                "-r",
                "__node:=segmenter",
            ])
            .arg("--params-file")
            .arg(params)
            .env("ROS_DOMAIN_ID", d.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("segtool-ros2 runs")
    };
    let node = NodeProcess(spawn(&params));
    let out = tmp.path().join("params");
    let summary = camera(
        &out,
        d,
        &[
            "--frames",
            "6",
            "--topic",
            "/cam2/image",
            "--masks",
            "/seg2/masks",
        ],
    );
    assert_eq!(summary["matched"], true, "discovery: {summary}");
    assert!(check_masks(&out, &summary, &model, "png") > 0, "{summary}");
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("/cam2/image") && stderr.contains("tract"),
        "{stderr}"
    );

    for (text, wanted) in [
        (
            "/**:\n  ros__parameters:\n    modle: m.onnx\n",
            "modle: not a parameter",
        ),
        (
            "segmenter:\n  ros__parameters:\n    threads: two\n",
            "threads: expected integer",
        ),
    ] {
        std::fs::write(&params, text).unwrap();
        let run = spawn(&params).wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{stderr}");
        assert!(
            stderr.contains("config.yaml") && stderr.contains(wanted),
            "{stderr}"
        );
    }
}

/// ROS 2's six parameter services and `/parameter_events`, called by a Cyclone DDS client
/// with ROS 2's type names on `rq/` and `rr/` topics (tests/reference/ros2_params.py):
/// every declared parameter is listed with its type and value, a set of the model is
/// refused with the reason, alpha and the diagnostics period change (get answers the new
/// value), the change is published on `/parameter_events`, and the next overlays are
/// blended with the new alpha.
/// Every overlay received is the runtime's blend of its frame and class mask at `alpha`.
fn check_overlays(dir: &Path, summary: &Value, alpha: f32) {
    let palette = tiny_spec(3).palette;
    let overlays = summary["colors"].as_array().unwrap();
    assert!(!overlays.is_empty(), "no overlay: {summary}");
    for o in overlays {
        let stamp = format!("{}_{}", o["sec"], o["nanosec"]);
        let i = o["sec"].as_i64().unwrap() - 1000;
        let frame = image::open(dir.join(format!("frames/{i}.png")))
            .unwrap()
            .to_rgb8();
        let (h, w, classes) = npy_u8(&dir.join(format!("masks/{stamp}.npy")));
        let mask = ndarray::Array2::from_shape_vec((h, w), classes).unwrap();
        let want = segtool_runtime::overlay(&frame, mask.view(), &palette, alpha);
        let (_, _, got) = npy_u8(&dir.join(format!("colors/{stamp}.npy")));
        assert_eq!(got, want.into_raw(), "overlay of {stamp} at alpha {alpha}");
    }
}

#[test]
fn the_parameter_services_answer_a_cyclone_dds_client() {
    use segtool_ros2::params::{Kind, DECLARED};
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(5);
    let node = NodeProcess::start(&model, d, &["--reliable"]);
    let python = std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/ros2_params.py");
    let run = Command::new(python)
        .arg(script)
        .args(["--domain", &d.to_string(), "--node", "/seg/segtool"])
        .output()
        .expect("python runs (SEGTOOL_PYTHON)");
    assert!(
        run.status.success(),
        "client: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let dir = tmp.path().join("overlays");
    let summary = camera(&dir, d, &["--frames", "4", "--colors", "/seg/overlay"]);
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
    check_overlays(&dir, &summary, 0.25);
    let out: Value = serde_json::from_slice(&run.stdout).unwrap();
    let names: Vec<&str> = out["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let types = out["types"].as_array().unwrap();
    for d in &DECLARED {
        let i = names
            .iter()
            .position(|n| *n == d.name)
            .unwrap_or_else(|| panic!("{} not listed: {out}", d.name));
        // rcl_interfaces/msg/ParameterType: 1 bool, 2 integer, 3 double, 4 string, 9 string[].
        let want = match d.kind {
            Kind::Bool => 1,
            Kind::Integer => 2,
            Kind::Double => 3,
            Kind::String => 4,
            Kind::StringArray => 9,
        };
        assert_eq!(types[i], want, "{}: {out}", d.name);
        // describe_parameters: the declared description and read-only flag.
        let described = &out["descriptions"][d.name];
        assert_eq!(described[0], d.description, "{}: {out}", d.name);
        assert_eq!(described[1], d.read_only, "{}: {out}", d.name);
    }
    let model_at = names.iter().position(|n| *n == "model").unwrap();
    assert_eq!(out["values"][model_at], model.to_str().unwrap());
    assert_eq!(out["set_model"][0], false);
    assert!(
        out["set_model"][1].as_str().unwrap().contains("read-only"),
        "{out}"
    );
    assert_eq!(out["set_alpha"][0], true, "{out}");
    assert_eq!(out["set_period_atomically"][0], true, "{out}");
    assert_eq!(out["alpha_after"], 0.25);
    let events = out["events"].as_array().unwrap();
    assert!(
        events.iter().any(|e| e[0] == "alpha" && e[1] == 0.25),
        "{out}"
    );
}

/// The pictures are drawn only for subscribers (DDS matched subscriptions): with none to
/// the colour mask and the overlay, the diagnostics count neither drawn; a colour-mask
/// subscriber that joins later receives colour masks, and the overlay, still without
/// one, is never drawn.
#[test]
fn pictures_are_drawn_only_while_someone_subscribes() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(7);
    let node = NodeProcess::start(&model, d, &["--reliable"]);
    let first = camera(
        &tmp.path().join("first"),
        d,
        &["--frames", "6", "--listen-s", "8"],
    );
    assert_eq!(first["matched"], true, "discovery: {first}");
    assert!(count(&first, "answered") > 0, "{first}");
    assert_eq!(count(&first, "color_masks_drawn"), 0, "{first}");
    assert_eq!(count(&first, "overlays_drawn"), 0, "{first}");
    let out = tmp.path().join("second");
    let second = camera(
        &out,
        d,
        &[
            "--frames",
            "6",
            "--colors",
            "/seg/color_mask",
            "--listen-s",
            "8",
        ],
    );
    assert!(!second["colors"].as_array().unwrap().is_empty(), "{second}");
    check_colors(&out, &second);
    assert_eq!(count(&second, "overlays_drawn"), 0, "{second}");
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
}

/// `tests/reference/ros2_cameras.py`: several Cyclone DDS cameras and their mask viewers.
fn cameras(out: &Path, domain: u32, specs: &[String]) -> Value {
    let python = std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/ros2_cameras.py");
    let mut cmd = Command::new(python);
    cmd.arg(script).arg("--out").arg(out).args([
        "--domain",
        &domain.to_string(),
        "--reliable",
        "--rate",
        "20",
    ]);
    for spec in specs {
        cmd.args(["--camera", spec]);
    }
    let run = cmd.output().expect("python runs (SEGTOOL_PYTHON)");
    assert!(
        run.status.success(),
        "cameras failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    serde_json::from_slice(&run.stdout).unwrap()
}

/// Two cameras, one model (`image_topics`): each camera's masks arrive on its own
/// namespace (`/cam_front/segtool/class_mask`, `/cam_rear/segtool/class_mask`) with its
/// own headers, each the runtime's `Segmenter` on that camera's frame; each camera has its
/// own `/diagnostics` status with exact counts (every frame sent is submitted, and
/// answered, dropped or failed; answered = masks received) and its latency. The rear
/// camera stops after 4 frames while the front one goes on, and changes its frame size
/// half way: the front camera is answered to its last frame, at both sizes.
#[test]
fn two_cameras_one_model_each_in_its_namespace() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    let d = domain(11);
    let node = NodeProcess::start(
        &model,
        d,
        &[
            "--reliable",
            "--ros-args",
            "-p",
            "image_topics:=[/cam_front/image_raw, /cam_rear/image_raw]",
        ],
    );
    let out = tmp.path().join("two");
    let (front_frames, rear_frames) = (12, 4);
    let summary = cameras(
        &out,
        d,
        &[
            format!(
                "/cam_front/image_raw,/cam_front/segtool/class_mask,{front_frames},96x64,64x80"
            ),
            format!("/cam_rear/image_raw,/cam_rear/segtool/class_mask,{rear_frames},96x64"),
        ],
    );
    if std::env::var_os("SEGTOOL_SHOW_SUMMARY").is_some() {
        eprintln!("SUMMARY {summary}");
    }
    assert_eq!(summary["matched"], true, "discovery: {summary}");
    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .threads(1)
        .open()
        .unwrap();
    let mut answered_total = 0;
    for (k, frames) in [(0, front_frames), (1, rear_frames)] {
        let camera = &summary["cameras"][k];
        let dir = out.join(k.to_string());
        let sent = camera["sent"].as_u64().unwrap();
        assert_eq!(sent, frames, "{summary}");
        let received = camera["received"].as_array().unwrap();
        let mut indices = Vec::new();
        let mut sizes = std::collections::BTreeSet::new();
        for r in received {
            let (sec, nanosec) = (r["sec"].as_i64().unwrap(), r["nanosec"].as_i64().unwrap());
            let i = sec - 1000;
            // Camera k's own frames on camera k's namespace.
            assert_eq!(nanosec, 1000 * k as i64 + i, "camera {k}: {r}");
            assert_eq!(r["frame_id"], format!("camera{k}"), "{r}");
            assert_eq!(r["encoding"], "mono8", "{r}");
            let (h, w) = assert_published_mask(
                &mut seg,
                &dir.join(format!("frames/{i}.png")),
                &dir.join(format!("masks/{sec}_{nanosec}.npy")),
                &format!("camera {k} frame {i}"),
            );
            indices.push(i as u64);
            sizes.insert((h, w));
        }
        // Newest frame wins: the last frame of each camera is never replaced.
        assert!(indices.contains(&(frames - 1)), "camera {k}: {summary}");
        let diag = &camera["diagnostics"];
        let n = |key: &str| -> u64 {
            diag[key]
                .as_str()
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("camera {k}'s diagnostics lack {key}: {summary}"))
        };
        assert_eq!(
            diag["name"],
            format!("/seg/segtool: camera {}", camera["topic"].as_str().unwrap())
        );
        assert_eq!(diag["topic"], camera["topic"], "{summary}");
        assert_eq!(
            (n("received"), n("sent"), n("submitted")),
            (sent, sent, sent),
            "{summary}"
        );
        assert_eq!(
            n("answered") + n("dropped") + n("failed"),
            sent,
            "{summary}"
        );
        assert_eq!(n("dropped"), n("replaced") + n("expired") + n("rejected"));
        assert_eq!(
            (n("failed"), n("pending"), n("lost")),
            (0, 0, 0),
            "{summary}"
        );
        assert_eq!(n("answered") as usize, received.len(), "{summary}");
        assert_eq!(n("latency_samples"), n("answered"), "{summary}");
        let p = |key: &str| diag[key].as_str().unwrap().parse::<f64>().unwrap();
        assert!(p("latency_p50_ms") > 0.0 && p("latency_p50_ms") <= p("latency_p99_ms"));
        answered_total += n("answered");
        if k == 0 {
            // The front camera went on after the rear one stopped, at its new size too.
            assert!(
                indices.iter().any(|&i| i >= rear_frames),
                "front after rear stopped: {summary}"
            );
            assert_eq!(
                sizes,
                [(64, 96), (80, 64)].into_iter().collect(),
                "both sizes: {summary}"
            );
        }
    }
    assert_eq!(summary["node"]["cameras"], "2", "{summary}");
    assert_eq!(
        summary["node"]["answered"].as_str().unwrap(),
        answered_total.to_string(),
        "{summary}"
    );
    let (ok, stderr, _) = node.interrupt();
    assert!(ok, "{stderr}");
    assert!(
        stderr.contains("2 cameras, one model")
            && stderr.contains("/cam_front/image_raw -> /cam_front/segtool/class_mask")
            && stderr.contains("/cam_rear/image_raw -> /cam_rear/segtool/class_mask"),
        "{stderr}"
    );
}

/// Bad camera lists stop the node at start, before it opens the model or joins the bus,
/// with an error naming the entries.
#[test]
fn bad_image_topics_are_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let model = model(tmp.path());
    for (ros, wanted) in [
        (
            vec![
                "-p",
                "image_topics:=[/front/image, /rear/image, /front/image]",
            ],
            "image_topics: /front/image is given twice, entries 0 and 2",
        ),
        (
            vec!["-p", "image_topics:=[/cam/left, /cam/right]"],
            "/cam/left and /cam/right would both publish /cam/segtool/class_mask",
        ),
        (
            vec![
                "-p",
                "image_topics:=[/front/image, /rear/image]",
                "-p",
                "input_topic:=/front/image",
            ],
            "input_topic and image_topics are both given",
        ),
        (
            vec![
                "-p",
                "image_topics:=[/front/image, /rear/image]",
                "-p",
                "class_mask_topic:=/masks",
            ],
            "class_mask_topic \"/masks\"",
        ),
        (
            vec!["-p", "image_topics:=3"],
            "image_topics: expected string array",
        ),
    ] {
        let run = Command::new(env!("CARGO_BIN_EXE_segtool-ros2"))
            .args(["node", "--model"])
            .arg(&model)
            .args(["--engine", "tract", "--ros-args"])
            .args(&ros)
            .env("ROS_DOMAIN_ID", domain(13).to_string())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success(), "{ros:?}: {stderr}");
        assert!(stderr.contains(wanted), "{ros:?}: {stderr}");
    }
}
