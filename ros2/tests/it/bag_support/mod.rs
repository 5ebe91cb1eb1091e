//! What tests/it/bag.rs shares: the fixture tests/reference/ros2_bags.py writes (once per
//! test binary), running `segtool-ros2 bag`, reading its output back through the same
//! script, the runtime's own masks to compare with, and bags written here.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use image::RgbImage;
use segtool_ros2::msgs::{self, Bytes, CompressedImage, Header, RosMessage, Time};
use segtool_runtime::{EngineKind, Segmenter};
use segtool_testkit::{tiny_model_bytes, tiny_spec};
use serde_json::Value;

pub const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/reference/ros2_bags.py"
);

pub const BIN: &str = env!("CARGO_BIN_EXE_segtool-ros2");

pub const FRAMES: usize = 12;

/// What ros2_bags.py wrote, once per test binary.
pub struct Fixture {
    pub dir: PathBuf,
    pub model: PathBuf,
    /// The decoded frames (RGB), as the Image topics carry them.
    pub frames: Vec<RgbImage>,
    /// The JPEG bytes of the compressed topic.
    pub jpegs: Vec<Vec<u8>>,
    pub written: Value,
}

impl Fixture {
    pub fn bag(&self) -> PathBuf {
        self.dir.join("bag")
    }

    pub fn bag_file(&self) -> PathBuf {
        self.dir.join("bag/bag.mcap")
    }

    pub fn times(&self, key: &str) -> Vec<u64> {
        self.written[key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect()
    }
}

pub fn python() -> Option<String> {
    match std::env::var("SEGTOOL_PYTHON") {
        Ok(p) => Some(p),
        Err(_) => {
            segtool_testkit::missing_reference(
                "the project venv's python (SEGTOOL_PYTHON), with rosbags and mcap-ros2-support",
                "source \"$(bash scripts/setup.sh)\"",
            );
            None
        }
    }
}

pub fn show(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

pub fn fixture() -> Option<&'static Fixture> {
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

/// `segtool-ros2 bag --engine tract --model M -i INPUT -t TOPIC -o OUT EXTRA`.
pub fn bag_command(fx: &Fixture, input: &Path, topic: &str, out: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new(BIN);
    c.args(["bag", "--engine", "tract", "--model"])
        .arg(&fx.model);
    c.arg("-i")
        .arg(input)
        .args(["-t", topic])
        .arg("-o")
        .arg(out);
    c.args(extra);
    c
}

pub fn run_bag(fx: &Fixture, input: &Path, topic: &str, out: &Path, extra: &[&str]) -> Output {
    bag_command(fx, input, topic, out, extra).output().unwrap()
}

/// ros2_bags.py's `read` of `mcap` (with the raw dump of `input` when given).
pub fn read_back(out_mcap: &Path, input: Option<&Path>) -> (Value, PathBuf) {
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

pub fn segmenter(fx: &Fixture) -> Segmenter {
    Segmenter::builder(&fx.model)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
}

/// The three masks the runtime itself makes of `frame`: class ids, colours, overlay.
pub fn expected(seg: &mut Segmenter, frame: &RgbImage) -> [Vec<u8>; 3] {
    let mask = seg.segment(frame).unwrap().mask;
    let palette = seg.spec().palette.clone();
    [
        mask.to_le_bytes(),
        segtool_runtime::colorize(&mask, &palette).into_raw(),
        segtool_runtime::overlay(frame, &mask, &palette, segtool_runtime::DEFAULT_ALPHA).into_raw(),
    ]
}

/// The mask topics under `ns` hold the runtime's masks of `frames`, at `stamps`/`logs`.
pub fn check_masks(
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

pub fn no_output_in(dir: &Path) -> Vec<String> {
    dir.read_dir()
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("out.mcap"))
        .collect()
}

/// A long bag on `topic`: `n` frames, `frame(i)`'s bytes, 30 per second.
pub fn long_bag<M: RosMessage>(
    path: &Path,
    topic: &str,
    n: usize,
    frame: impl Fn(usize, Header) -> M,
) {
    bag_of(mcap::WriteOptions::new(), path, topic, 0..n, frame)
}

/// A bag on `topic` of the frames `indices`, `frame(i)`'s bytes, 30 per second.
pub fn bag_of<M: RosMessage>(
    options: mcap::WriteOptions,
    path: &Path,
    topic: &str,
    indices: std::ops::Range<usize>,
    frame: impl Fn(usize, Header) -> M,
) {
    let file = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut w = options.profile("ros2").create(file).unwrap();
    let schema = w
        .add_schema(M::NAME, "ros2msg", M::schema().as_bytes())
        .unwrap();
    let channel = w
        .add_channel(schema, topic, "cdr", &BTreeMap::new())
        .unwrap();
    for i in indices {
        let t = 1_700_000_000_000_000_000 + i as u64 * 33_333_333;
        let header = Header {
            stamp: Time::from_nanos(t),
            frame_id: "camera".into(),
        };
        let record = mcap::records::MessageHeader {
            channel_id: channel,
            sequence: i as u32,
            log_time: t,
            publish_time: t,
        };
        w.write_to_known_channel(&record, &msgs::encode(&frame(i, header)))
            .unwrap();
    }
    w.finish().unwrap();
}

/// `n` CompressedImage frames: the fixture's JPEGs in turn.
pub fn long_jpeg_bag(fx: &Fixture, path: &Path, n: usize) {
    long_bag(path, "/cam/image_raw/compressed", n, |i, header| {
        CompressedImage {
            header,
            format: "jpeg".into(),
            data: Bytes(fx.jpegs[i % fx.jpegs.len()].clone()),
        }
    });
}

/// The class masks' log times and bytes in `out`, read with the `mcap` crate.
pub fn class_masks(out: &Path, topic: &str) -> Vec<(u64, Vec<u8>)> {
    let bytes = std::fs::read(out).unwrap();
    mcap::MessageStream::new(&bytes)
        .unwrap()
        .map(|m| m.unwrap())
        .filter(|m| m.channel.topic == topic)
        .map(|m| {
            let img: msgs::Image = msgs::decode(&m.data).unwrap();
            (m.log_time, img.data.0)
        })
        .collect()
}
