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
//! mcap-ros2-support; without `SEGTOOL_PYTHON`, a missing reference (a failure under
//! `make test`, else a counted skip: `segtool_testkit::missing_reference`).

#[path = "bag_support/mod.rs"]
mod bag_support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use image::RgbImage;
use segtool_ros2::frames;
use segtool_ros2::msgs::{self, Bytes, Header};

use bag_support::*;

#[test]
fn every_frame_is_segmented_as_the_runtime_does_and_the_input_is_copied_byte_for_byte() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("masks.mcap");
    let bag = fx.bag();
    let o = run_bag(fx, &bag, "/cam/image_raw", &out, &["--copy-input"]);
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
        &file,
        "/cam/image_raw/compressed",
        &out,
        &["--compression", "lz4"],
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
    let o = run_bag(fx, &bag, "/cam_bgr/image_raw", &out, &["--prefix", "/seg"]);
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

#[test]
fn refusals_name_the_file_and_what_to_do() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let refusals = Refusals {
        fx,
        dir: tmp.path(),
        out: tmp.path().join("out.mcap"),
    };
    refusals.files_that_are_no_mcap_bag();
    refusals.topics_and_outputs();
    refusals.bad_frames_only();
}

/// Runs that must fail, naming what is wrong, and write nothing into `dir`.
struct Refusals<'a> {
    fx: &'a Fixture,
    dir: &'a Path,
    out: std::path::PathBuf,
}

impl Refusals<'_> {
    fn refuse(&self, input: &Path, topic: &str, needles: &[&str]) {
        let o = run_bag(self.fx, input, topic, &self.out, &[]);
        assert!(!o.status.success(), "{}", show(&o));
        let stderr = String::from_utf8_lossy(&o.stderr);
        for needle in needles {
            assert!(stderr.contains(needle), "{needle:?} missing:\n{stderr}");
        }
        let written = no_output_in(self.dir);
        assert!(written.is_empty(), "{written:?}");
    }

    /// A ROS 2 sqlite3 bag (with how to convert it), a missing file, a text file, and a
    /// record whose length is 2^40 bytes.
    fn files_that_are_no_mcap_bag(&self) {
        let db3 = self.fx.dir.join("bag_db3");
        let convert = [
            "ros2 bag convert -i",
            "storage_id: mcap",
            "rosbags-convert --src",
            "--dst-storage mcap",
        ];
        let db3_shown = db3.display().to_string();
        self.refuse(
            &db3,
            "/chatter",
            &[&[db3_shown.as_str(), "sqlite3"][..], &convert].concat(),
        );
        self.refuse(&db3.join("bag_db3.db3"), "/chatter", &convert);
        let missing = self.dir.join("nothing.mcap");
        self.refuse(
            &missing,
            "/x",
            &[&format!("{}: no such file", missing.display())],
        );
        let text = self.dir.join("notes.mcap");
        std::fs::write(&text, "not a bag at all\n").unwrap();
        self.refuse(
            &text,
            "/x",
            &[&format!("{}: not an MCAP file", text.display())],
        );
        // A record declaring 2^40 bytes in a 100-byte file: refused, not allocated (the fuzz
        // regression input, less its selector byte).
        let regression = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fuzz/regressions/mcap_bag/record_len_2e40.mcap");
        let huge = self.dir.join("huge_record.mcap");
        std::fs::write(&huge, &std::fs::read(regression).unwrap()[1..]).unwrap();
        self.refuse(
            &huge,
            "/x",
            &[
                &format!("{}: truncated or corrupt MCAP", huge.display()),
                "length exceeds limit: `1099511627776`",
            ],
        );
    }

    /// A topic not in the bag (the bag's topics listed), one of another type, an output
    /// over the input, and the bag checked before the model loads.
    fn topics_and_outputs(&self) {
        self.refuse(
            &self.fx.bag(),
            "/camera/image",
            &[
                "topic /camera/image is not in",
                "/cam/image_raw  sensor_msgs/msg/Image  (12 messages)",
                "/cam/image_raw/compressed  sensor_msgs/msg/CompressedImage  (12 messages)",
                "/chatter  std_msgs/msg/String  (12 messages)",
            ],
        );
        self.refuse(
            &self.fx.bag(),
            "/chatter",
            &[
                "topic /chatter",
                "carries std_msgs/msg/String, not sensor_msgs/msg/Image",
            ],
        );
        let o = run_bag(
            self.fx,
            &self.fx.bag_file(),
            "/cam/image_raw",
            &self.fx.bag_file(),
            &[],
        );
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(stderr.contains("would overwrite the input"), "{}", show(&o));

        // The bag is checked before the model loads: its mistake is the one reported.
        let o = Command::new(BIN)
            .args(["bag", "--model", "/no/such/model.onnx", "-i"])
            .arg(self.fx.bag())
            .args(["-t", "/camera/image", "-o"])
            .arg(&self.out)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && stderr.contains("topic /camera/image is not in"),
            "{stderr}"
        );
    }

    /// A topic of bad frames only: an error with the causes, not an empty bag.
    fn bad_frames_only(&self) {
        let bayer = self.dir.join("bayer.mcap");
        bag_of(
            mcap::WriteOptions::new(),
            &bayer,
            "/cam/image_raw",
            0..3,
            |_, header| msgs::Image {
                header,
                height: 2,
                width: 2,
                encoding: "bayer_rggb8".into(),
                step: 2,
                data: Bytes(vec![0; 4]),
                ..Default::default()
            },
        );
        self.refuse(
            &bayer,
            "/cam/image_raw",
            &[
                "no frame of /cam/image_raw could be segmented",
                "3 x unknown encoding; first: frame 0",
            ],
        );
    }
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
    let o = run_bag(fx, &bad, "/cam/image_raw", &out, &["--copy-input"]);
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

#[test]
fn ctrl_c_stops_without_an_output_and_a_killed_runs_leftovers_go_next_time() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let long = tmp.path().join("long.mcap");
    long_jpeg_bag(fx, &long, 3000);
    let out = tmp.path().join("out.mcap");
    let mut child = bag_command(fx, &long, "/cam/image_raw/compressed", &out, &[])
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
    let o = run_bag(fx, &fx.bag_file(), "/cam/image_raw", &out, &[]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(no_output_in(tmp.path()), ["out.mcap"]);
}

/// Frames per second of `segtool-ros2 bag` (each chunk compression) against the same
/// frames through the `Segmenter` alone (tract, the tiny model), at the fixture's size and
/// at 1280x544: `cargo test -p segtool-ros2 --test it -- bag:: --ignored --nocapture`.
#[test]
#[ignore = "a measurement, not a check"]
fn throughput_against_the_segmenter_alone() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    for (w, h, n) in [(320, 136, 600), (1280, 544, 300)] {
        let frames: Vec<RgbImage> = fx
            .frames
            .iter()
            .map(|f| image::imageops::resize(f, w, h, image::imageops::FilterType::Triangle))
            .collect();
        let bag = tmp.path().join(format!("long_{w}.mcap"));
        long_bag(&bag, "/cam/image_raw", n, |i, header| {
            frames::rgb_message(&header, &frames[i % frames.len()])
        });
        let mut seg = segmenter(fx);
        let started = Instant::now();
        for i in 0..n {
            seg.segment(&frames[i % frames.len()]).unwrap();
        }
        let alone = n as f64 / started.elapsed().as_secs_f64();
        eprintln!("{w}x{h}, {n} frames: Segmenter alone {alone:.1} frames/s");
        for compression in ["zstd", "lz4", "none"] {
            let out = tmp.path().join("out.mcap");
            let started = Instant::now();
            let o = run_bag(
                fx,
                &bag,
                "/cam/image_raw",
                &out,
                &["--compression", compression],
            );
            let wall = started.elapsed().as_secs_f64();
            assert!(o.status.success(), "{}", show(&o));
            let stderr = String::from_utf8_lossy(&o.stderr);
            let line = stderr
                .lines()
                .find(|l| l.contains("frames segmented"))
                .unwrap_or("");
            let summary = line.split_once(" in ").map_or(line, |(_, s)| s);
            eprintln!(
                "  bag --compression {compression}: {:.1} frames/s with process start and model \
                 load; {summary}; {} MB",
                n as f64 / wall,
                std::fs::metadata(&out).unwrap().len() / 1_000_000
            );
        }
    }
}

#[test]
fn split_bags_are_read_in_their_order_and_unindexed_files_are_scanned() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let split = tmp.path().join("split");
    std::fs::create_dir(&split).unwrap();
    let frame = |i: usize, header: Header| frames::rgb_message(&header, &fx.frames[i % FRAMES]);
    // Three files named so that name order is not number order; the last without a
    // summary section (as a recorder killed before closing it, then `mcap recover`ed, or
    // a writer told not to index).
    let parts = [
        ("s_2.mcap", 0..5),
        ("s_10.mcap", 5..9),
        ("s_11.mcap", 9..FRAMES),
    ];
    for (k, (name, range)) in parts.iter().enumerate() {
        let options = mcap::WriteOptions::new();
        let options = match k {
            2 => options
                .emit_summary_records(false)
                .emit_statistics(false)
                .emit_summary_offsets(false),
            _ => options,
        };
        bag_of(
            options,
            &split.join(name),
            "/cam/image_raw",
            range.clone(),
            frame,
        );
    }
    std::fs::write(
        split.join("metadata.yaml"),
        "rosbag2_bagfile_information:\n  version: 5\n  storage_identifier: mcap\n  \
         relative_file_paths:\n  - s_2.mcap\n  - s_10.mcap\n  - s_11.mcap\n  \
         compression_mode: ''\n",
    )
    .unwrap();
    let mut seg = segmenter(fx);
    let want: Vec<(u64, Vec<u8>)> = (0..FRAMES)
        .map(|i| {
            let t = 1_700_000_000_000_000_000 + i as u64 * 33_333_333;
            (t, expected(&mut seg, &fx.frames[i])[0].clone())
        })
        .collect();
    let out = tmp.path().join("out.mcap");
    let o = run_bag(fx, &split, "/cam/image_raw", &out, &[]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        class_masks(&out, "/cam/class_mask") == want,
        "the files in metadata.yaml's order"
    );

    // Without metadata.yaml: the .mcap files, numbers compared as numbers (2, 10, 11).
    std::fs::remove_file(split.join("metadata.yaml")).unwrap();
    let o = run_bag(fx, &split, "/cam/image_raw", &out, &[]);
    assert!(o.status.success(), "{}", show(&o));
    assert!(
        class_masks(&out, "/cam/class_mask") == want,
        "the files in number order"
    );

    // The unindexed file alone: its topics come from a scan.
    let o = run_bag(fx, &split.join("s_11.mcap"), "/nope", &out, &[]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!(
            "/cam/image_raw  sensor_msgs/msg/Image  ({} messages)",
            FRAMES - 9
        )),
        "{stderr}"
    );
}

/// A Hugging Face folder as the bag's model, by folder alone: Mask2Former's
/// mask-classification head, written by transformers' own `save_pretrained`
/// (tests/reference/hf_processors_ref.py). Masks equal to the runtime's `Segmenter` on the
/// same folder (which tests/it/foreign_folders.rs holds to transformers' own pipeline).
#[test]
fn a_hugging_face_folder_segments_the_bag() {
    let Some(fx) = fixture() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let folder = segtool_testkit::hugging_face_folder("mask2former", tmp.path())
        .expect("SEGTOOL_PYTHON: the fixture needs it too");
    let out = tmp.path().join("masks.mcap");
    let o = Command::new(BIN)
        .args(["bag", "--engine", "ort", "--threads", "1", "--model"])
        .arg(&folder)
        .arg("-i")
        .arg(fx.bag())
        .args(["-t", "/cam/image_raw"])
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", show(&o));
    let (read, dump) = read_back(&out, None);
    let frames: Vec<&RgbImage> = fx.frames.iter().collect();
    let mut seg = segtool_runtime::Segmenter::builder(&folder)
        .engine(segtool_runtime::EngineKind::Ort)
        .threads(1)
        .open()
        .unwrap();
    check_masks(
        &read,
        &dump,
        "/cam",
        &frames,
        &fx.times("stamps_ns"),
        &fx.times("log_times_ns"),
        &mut seg,
    );
}
