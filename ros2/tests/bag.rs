//! `segtool-ros2 bag` end to end, against the ROS 2 world's own Python libraries:
//! tests/reference/ros2_bags.py writes a rosbag2 folder of real frames (bikes.mp4) with
//! `rosbags`, the binary segments it with a tiny model (tract), and the same script reads
//! the result back with both `rosbags` and `mcap-ros2-support` (which must agree). The
//! masks must equal the runtime's own `Segmenter` on the same frames, byte for byte; the
//! stamps and times those of the input; `--copy-input` topics the input's bytes. Then the
//! refusals (sqlite3 bags with the conversion command, missing topics listed, ...) and
//! the runs that must leave nothing behind (a corrupt chunk mid-bag, Ctrl-C).
//!
//! Needs the venv python (`SEGTOOL_PYTHON`, scripts/setup.sh) with rosbags and
//! mcap-ros2-support; skipped with a message when `SEGTOOL_PYTHON` is not set.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use image::RgbImage;
use ndarray::Array2;
use segtool_ros2::msgs::{self, Bytes, CompressedImage, Header, RosMessage, Time};
use segtool_runtime::testing::{tiny_model_bytes, tiny_spec};
use segtool_runtime::{EngineKind, Segmenter};
use serde_json::Value;

const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/reference/ros2_bags.py"
);
const BIN: &str = env!("CARGO_BIN_EXE_segtool-ros2");
const FRAMES: usize = 12;

/// What ros2_bags.py wrote, once per test binary.
struct Fixture {
    dir: PathBuf,
    model: PathBuf,
    /// The decoded frames (RGB), as the Image topics carry them.
    frames: Vec<RgbImage>,
    /// The JPEG bytes of the compressed topic.
    jpegs: Vec<Vec<u8>>,
    written: Value,
}

impl Fixture {
    fn bag(&self) -> PathBuf {
        self.dir.join("bag")
    }

    fn bag_file(&self) -> PathBuf {
        self.dir.join("bag/bag.mcap")
    }

    fn times(&self, key: &str) -> Vec<u64> {
        self.written[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    }
}

fn python() -> Option<String> {
    match std::env::var("SEGTOOL_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            eprintln!("SEGTOOL_PYTHON not set (scripts/setup.sh): skipping");
            None
        }
    }
}

fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn fixture() -> Option<&'static Fixture> {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    let py = python()?;
    Some(FIXTURE.get_or_init(|| {
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ros2_bag_fixture");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new(&py)
            .args([SCRIPT, "write"])
            .arg(&dir)
            .args(["--frames", &FRAMES.to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "ros2_bags.py write (needs rosbags==0.11.9 in the venv): {}",
            show(&out)
        );
        let model = dir.join("tiny.onnx");
        // Class = the dominant normalised channel: masks follow the picture.
        let identity = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
        std::fs::write(
            &model,
            tiny_model_bytes(&tiny_spec(3), &identity, &[0.0; 3]),
        )
        .unwrap();
        let frame = |i: usize, ext: &str| dir.join(format!("frames/{i:04}.{ext}"));
        let frames = (0..FRAMES)
            .map(|i| image::open(frame(i, "png")).unwrap().to_rgb8())
            .collect();
        let jpegs = (0..FRAMES)
            .map(|i| std::fs::read(frame(i, "jpg")).unwrap())
            .collect();
        let written =
            serde_json::from_str(&std::fs::read_to_string(dir.join("written.json")).unwrap())
                .unwrap();
        Fixture {
            dir,
            model,
            frames,
            jpegs,
            written,
        }
    }))
}

/// `segtool-ros2 bag --engine tract --model M ARGS`.
fn bag_command(fx: &Fixture, args: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["bag", "--engine", "tract", "--model"])
        .arg(&fx.model)
        .args(args);
    c
}

fn run_bag(fx: &Fixture, args: &[&str]) -> Output {
    bag_command(fx, args).output().unwrap()
}

/// ros2_bags.py's `read` of `mcap` (with the raw dump of `input` when given).
fn read_back(out_mcap: &Path, input: Option<&Path>) -> (Value, PathBuf) {
    let dump = out_mcap.with_extension("dump");
    let mut c = Command::new(python().unwrap());
    c.args([SCRIPT, "read"]).arg(out_mcap).arg(&dump);
    if let Some(input) = input {
        c.arg("--input").arg(input);
    }
    let out = c.output().unwrap();
    assert!(out.status.success(), "ros2_bags.py read: {}", show(&out));
    let json = std::fs::read_to_string(dump.join("read.json")).unwrap();
    (serde_json::from_str(&json).unwrap(), dump)
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

/// The image data of `topic` as read back, split per message.
fn images(read: &Value, dump: &Path, topic: &str) -> Vec<(u32, u32, String, Vec<u8>)> {
    let t = &read["topics"][topic];
    let data = std::fs::read(dump.join(t["data_file"].as_str().unwrap())).unwrap();
    let mut offset = 0;
    t["sizes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let (h, w, step) = (
                s[0].as_u64().unwrap(),
                s[1].as_u64().unwrap(),
                s[2].as_u64().unwrap(),
            );
            let bytes = data[offset..offset + (h * step) as usize].to_vec();
            offset += (h * step) as usize;
            (
                w as u32,
                h as u32,
                s[3].as_str().unwrap().to_string(),
                bytes,
            )
        })
        .collect()
}

fn segmenter(fx: &Fixture) -> Segmenter {
    Segmenter::builder(&fx.model)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
}

/// The three masks the runtime itself makes of `frame`: class ids, colours, overlay.
fn expected(seg: &mut Segmenter, frame: &RgbImage) -> [Vec<u8>; 3] {
    let mask: Array2<u8> = seg.segment(frame).unwrap().mask;
    let palette = seg.spec().palette.clone();
    [
        mask.iter().copied().collect(),
        segtool_runtime::colorize(mask.view(), &palette).into_raw(),
        segtool_runtime::overlay(frame, mask.view(), &palette, segtool_runtime::DEFAULT_ALPHA)
            .into_raw(),
    ]
}

/// The mask topics under `ns` hold the runtime's masks of `frames`, at `stamps`/`logs`.
fn check_masks(
    read: &Value,
    dump: &Path,
    ns: &str,
    frames: &[&RgbImage],
    stamps: &[u64],
    logs: &[u64],
    seg: &mut Segmenter,
) {
    let want: Vec<[Vec<u8>; 3]> = frames.iter().map(|f| expected(seg, f)).collect();
    for (k, (name, encoding)) in [
        ("class_mask", "mono8"),
        ("color_mask", "rgb8"),
        ("overlay", "rgb8"),
    ]
    .into_iter()
    .enumerate()
    {
        let topic = format!("{ns}/{name}");
        let t = &read["topics"][&topic];
        assert_eq!(t["type"], "sensor_msgs/msg/Image", "{topic}: {t}");
        assert_eq!(t["schema_encoding"], "ros2msg", "{topic}");
        assert_eq!(t["message_encoding"], "cdr", "{topic}");
        assert_eq!(t["count"].as_u64(), Some(frames.len() as u64), "{topic}");
        assert_eq!(
            u64s(&t["stamps_ns"]),
            stamps,
            "{topic}: header stamps are the frames'"
        );
        assert_eq!(
            u64s(&t["log_times_ns"]),
            logs,
            "{topic}: log times are the frames'"
        );
        assert_eq!(
            u64s(&t["publish_times_ns"]),
            logs,
            "{topic}: publish times are the frames'"
        );
        for (i, (w, h, enc, data)) in images(read, dump, &topic).into_iter().enumerate() {
            assert_eq!(
                (w, h, enc.as_str()),
                (frames[i].width(), frames[i].height(), encoding),
                "{topic} #{i}"
            );
            assert!(data == want[i][k], "{topic} #{i}: not the runtime's {name}");
        }
    }
}

#[test]
fn every_frame_is_segmented_as_the_runtime_does_and_the_input_is_copied_byte_for_byte() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("masks.mcap");
    let bag = fx.bag();
    let o = run_bag(
        fx,
        &[
            "--input",
            bag.to_str().unwrap(),
            "--topic",
            "/cam/image_raw",
            "--out",
            out.to_str().unwrap(),
            "--copy-input",
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{FRAMES} of {FRAMES} frames segmented")),
        "{stderr}"
    );
    assert!(!stderr.contains("bad frame"), "{stderr}");

    let (read, dump) = read_back(&out, Some(&bag));
    assert_eq!(read["profile"], "ros2");
    let frames: Vec<&RgbImage> = fx.frames.iter().collect();
    let mut seg = segmenter(fx);
    check_masks(
        &read,
        &dump,
        "/cam",
        &frames,
        &fx.times("stamps_ns"),
        &fx.times("log_times_ns"),
        &mut seg,
    );

    // Every input topic, as it was: schema, encoding, sequences, times, bytes.
    let input = read["input"]["topics"].as_object().unwrap();
    assert_eq!(input.len(), 4, "{input:?}");
    for (topic, want) in input {
        let got = &read["topics"][topic];
        for key in [
            "schema_name",
            "schema_encoding",
            "schema_sha256",
            "message_encoding",
            "sequences",
            "log_times_ns",
            "publish_times_ns",
            "sha256",
        ] {
            assert_eq!(
                got[key], want[key],
                "{topic}: {key} differs from the input's"
            );
        }
    }
    let outputs: Vec<&String> = read["topics"].as_object().unwrap().keys().collect();
    assert_eq!(outputs.len(), 4 + 3, "{outputs:?}");
    assert!(tmp.path().read_dir().unwrap().all(|e| !e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .contains(".tmp-")));
}

#[test]
fn compressed_frames_go_beside_the_base_topic_and_bad_frames_are_counted_not_fatal() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let mut seg = segmenter(fx);
    let stamps = fx.times("stamps_ns");
    let logs = fx.times("log_times_ns");

    // image_transport's /cam/image_raw/compressed: masks under /cam; the .mcap file alone.
    let out = tmp.path().join("jpeg.mcap");
    let file = fx.bag_file();
    let o = run_bag(
        fx,
        &[
            "-i",
            file.to_str().unwrap(),
            "-t",
            "/cam/image_raw/compressed",
            "-o",
            out.to_str().unwrap(),
            "--compression",
            "lz4",
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    let (read, dump) = read_back(&out, None);
    assert_eq!(
        read["topics"].as_object().unwrap().len(),
        3,
        "masks only: {}",
        read["topics"]
    );
    let decoded: Vec<RgbImage> = fx
        .jpegs
        .iter()
        .map(|j| image::load_from_memory(j).unwrap().to_rgb8())
        .collect();
    check_masks(
        &read,
        &dump,
        "/cam",
        &decoded.iter().collect::<Vec<_>>(),
        &stamps,
        &logs,
        &mut seg,
    );

    // bgr8 rows padded to a 16-byte step, frames 5 (yuv422) and 8 (cut short) bad.
    let out = tmp.path().join("bgr.mcap");
    let bag = fx.bag();
    let o = run_bag(
        fx,
        &[
            "-i",
            bag.to_str().unwrap(),
            "-t",
            "/cam_bgr/image_raw",
            "-o",
            out.to_str().unwrap(),
            "--prefix",
            "/seg",
        ],
    );
    assert!(
        o.status.success(),
        "bad frames are reported, not fatal: {}",
        show(&o)
    );
    let stderr = String::from_utf8_lossy(&o.stderr);
    for needle in [
        "10 of 12 frames segmented",
        "2 bad frames",
        "1 x unknown encoding; first: frame 5",
        "\"yuv422\"",
        "1 x data shorter than step x height; first: frame 8",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing:\n{stderr}");
    }
    let good: Vec<usize> = (0..FRAMES).filter(|i| ![5, 8].contains(i)).collect();
    let (read, dump) = read_back(&out, None);
    check_masks(
        &read,
        &dump,
        "/seg",
        &good.iter().map(|&i| &fx.frames[i]).collect::<Vec<_>>(),
        &good.iter().map(|&i| stamps[i]).collect::<Vec<_>>(),
        &good.iter().map(|&i| logs[i]).collect::<Vec<_>>(),
        &mut seg,
    );
}

fn no_output_in(dir: &Path) -> Vec<String> {
    dir.read_dir()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("out.mcap"))
        .collect()
}

#[test]
fn refusals_name_the_file_and_what_to_do() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("out.mcap");
    let out = out.to_str().unwrap();
    let refuse = |input: &Path, topic: &str, needles: &[&str]| {
        let o = run_bag(fx, &["-i", input.to_str().unwrap(), "-t", topic, "-o", out]);
        assert!(!o.status.success(), "{}", show(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} missing:\n{stderr}");
        }
        assert!(
            no_output_in(tmp.path()).is_empty(),
            "{:?}",
            no_output_in(tmp.path())
        );
    };
    let db3 = fx.dir.join("bag_db3");
    let db3_shown = db3.display().to_string();
    let convert = [
        "ros2 bag convert -i",
        "storage_id: mcap",
        "rosbags-convert --src",
        "--dst-storage mcap",
    ];
    refuse(
        &db3,
        "/chatter",
        &[&[db3_shown.as_str(), "sqlite3"][..], &convert].concat(),
    );
    refuse(&db3.join("bag_db3.db3"), "/chatter", &convert);
    let missing = tmp.path().join("nothing.mcap");
    refuse(
        &missing,
        "/x",
        &[&format!("{}: no such file", missing.display())],
    );
    let text = tmp.path().join("notes.mcap");
    std::fs::write(&text, "not a bag at all\n").unwrap();
    refuse(
        &text,
        "/x",
        &[&format!("{}: not an MCAP file", text.display())],
    );
    refuse(
        &fx.bag(),
        "/camera/image",
        &[
            "topic /camera/image is not in",
            "/cam/image_raw  sensor_msgs/msg/Image  (12 messages)",
            "/cam/image_raw/compressed  sensor_msgs/msg/CompressedImage  (12 messages)",
            "/chatter  std_msgs/msg/String  (12 messages)",
        ],
    );
    refuse(
        &fx.bag(),
        "/chatter",
        &[
            "topic /chatter",
            "carries std_msgs/msg/String, not sensor_msgs/msg/Image",
        ],
    );
    let o = run_bag(
        fx,
        &[
            "-i",
            fx.bag_file().to_str().unwrap(),
            "-t",
            "/cam/image_raw",
            "-o",
            fx.bag_file().to_str().unwrap(),
        ],
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("would overwrite the input"),
        "{}",
        show(&o)
    );
}

/// A copy of the bag whose last chunk names an unknown compression: the summary is
/// intact, so the run starts and fails when it reaches that chunk.
fn bag_with_a_bad_last_chunk(fx: &Fixture, to: &Path) {
    let mut bytes = std::fs::read(fx.bag_file()).unwrap();
    let summary = mcap::Summary::read(&bytes).unwrap().unwrap();
    assert!(
        summary.chunk_indexes.len() >= 3,
        "several chunks: {}",
        summary.chunk_indexes.len()
    );
    let last = summary.chunk_indexes.last().unwrap();
    assert_eq!(last.compression, "zstd");
    // opcode, record length, start and end times, uncompressed size and crc, then the
    // compression name's length and bytes.
    let name = last.chunk_start_offset as usize + 1 + 8 + 8 + 8 + 8 + 4 + 4;
    assert_eq!(&bytes[name..name + 4], b"zstd");
    bytes[name..name + 4].copy_from_slice(b"zzzz");
    std::fs::write(to, bytes).unwrap();
}

#[test]
fn a_run_that_fails_midway_leaves_the_previous_output_and_no_temporary_file() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("damaged.mcap");
    bag_with_a_bad_last_chunk(fx, &bad);
    let out = tmp.path().join("out.mcap");
    std::fs::write(&out, "the previous run's bag").unwrap();
    let o = run_bag(
        fx,
        &[
            "-i",
            bad.to_str().unwrap(),
            "-t",
            "/cam/image_raw",
            "-o",
            out.to_str().unwrap(),
            "--copy-input",
        ],
    );
    assert!(!o.status.success(), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{}: truncated or corrupt MCAP", bad.display())),
        "{stderr}"
    );
    assert!(
        stderr.contains("zzzz") && stderr.contains("mcap recover"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "the previous run's bag"
    );
    assert_eq!(no_output_in(tmp.path()), ["out.mcap"]);
}

/// A long bag: `n` CompressedImage frames (the fixture's JPEGs in turn), 30 per second.
fn long_jpeg_bag(fx: &Fixture, path: &Path, n: usize) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = mcap::WriteOptions::new()
        .profile("ros2")
        .create(file)
        .unwrap();
    let schema = w
        .add_schema(
            CompressedImage::NAME,
            "ros2msg",
            CompressedImage::schema().as_bytes(),
        )
        .unwrap();
    let channel = w
        .add_channel(schema, "/cam/image_raw/compressed", "cdr", &BTreeMap::new())
        .unwrap();
    for i in 0..n {
        let t = 1_700_000_000_000_000_000 + i as u64 * 33_333_333;
        let msg = CompressedImage {
            header: Header {
                stamp: Time::from_nanos(t),
                frame_id: "camera".into(),
            },
            format: "jpeg".into(),
            data: Bytes(fx.jpegs[i % fx.jpegs.len()].clone()),
        };
        let header = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: i as u32,
            log_time: t,
            publish_time: t,
        };
        w.write_to_known_channel(&header, &msgs::encode(&msg))
            .unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn ctrl_c_stops_without_an_output_and_a_killed_runs_leftovers_go_next_time() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let long = tmp.path().join("long.mcap");
    long_jpeg_bag(fx, &long, 3000);
    let out = tmp.path().join("out.mcap");
    let mut child = bag_command(
        fx,
        &[
            "-i",
            long.to_str().unwrap(),
            "-t",
            "/cam/image_raw/compressed",
            "-o",
            out.to_str().unwrap(),
        ],
    )
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let temp = tmp.path().join(format!(".out.mcap.tmp-{}", child.id()));
    let started = Instant::now();
    while !temp.exists() {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no temporary file {temp:?}"
        );
        assert!(
            child.try_wait().unwrap().is_none(),
            "ended before its temporary file showed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        child.try_wait().unwrap().is_none(),
        "3000 frames took under 0.3 s: make the bag longer"
    );
    // SAFETY: a child of this test, still running.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert!(!o.status.success(), "{}", show(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("stopped after") && stderr.contains("of 3000 frames"),
        "{stderr}"
    );
    assert!(
        no_output_in(tmp.path()).is_empty(),
        "{:?}",
        no_output_in(tmp.path())
    );

    // What a killed run (SIGKILL: no clean-up) leaves goes at the next start: the pid of
    // a finished process is free.
    let dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    let mut dead = dead;
    dead.wait().unwrap();
    let stale = tmp.path().join(format!(".out.mcap.tmp-{dead_pid}"));
    std::fs::write(&stale, "half a bag").unwrap();
    let o = run_bag(
        fx,
        &[
            "-i",
            fx.bag_file().to_str().unwrap(),
            "-t",
            "/cam/image_raw",
            "-o",
            out.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(no_output_in(tmp.path()), ["out.mcap"]);
}
