//! The C accessor of include/gstsegtool.h: a C program reads every buffer's class map
//! from a `segtoolseg` pipeline through GStreamer's custom-meta API; what it prints
//! equals what the Rust accessor reads from the same pipeline.

use crate::common;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gst::prelude::*;
use gstsegtool::meta::ClassMap;

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = Command::new("pkg-config")
        .args(args)
        .arg("gstreamer-1.0")
        .output()
        .expect("pkg-config");
    assert!(
        out.status.success(),
        "pkg-config gstreamer-1.0: {}",
        common::show(&out)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn c_reader_sees_the_rust_readers_class_maps() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let pipeline = format!(
        "videotestsrc num-buffers=3 pattern=smpte ! video/x-raw,format=RGB,width=32,height=16 ! \
         segtoolseg model={} engine=tract output=color ! fakesink name=sink",
        model.display()
    );

    // Rust: the same pipeline in this process.
    common::init();
    let p = gst::parse::launch(&pipeline)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let maps = Arc::new(Mutex::new(Vec::new()));
    let m = maps.clone();
    p.by_name("sink")
        .unwrap()
        .static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, info| {
            if let Some(buf) = info.buffer() {
                m.lock()
                    .unwrap()
                    .push(ClassMap::from_buffer(buf).expect("meta"));
            }
            gst::PadProbeReturn::Ok
        });
    p.set_state(gst::State::Playing).unwrap();
    let msg = p.bus().unwrap().timed_pop_filtered(
        gst::ClockTime::from_seconds(60),
        &[gst::MessageType::Eos, gst::MessageType::Error],
    );
    assert!(
        matches!(msg.as_ref().map(|m| m.type_()), Some(gst::MessageType::Eos)),
        "{msg:?}"
    );
    p.set_state(gst::State::Null).unwrap();
    let expected: Vec<String> = maps
        .lock()
        .unwrap()
        .iter()
        .map(|m| {
            let counts: Vec<String> = m.pixel_counts.iter().map(u64::to_string).collect();
            format!(
                "frame {} {}x{} classes {} counts {} sum_ok 1 zeros_ok 1 first {}",
                m.frame,
                m.width,
                m.height,
                m.classes,
                counts.join(" "),
                m.at(0, 0).unwrap()
            )
        })
        .collect();
    assert_eq!(expected.len(), 3);

    // C: compiled against the header and GStreamer only.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("read_meta-{}", std::process::id()));
    let out = Command::new(std::env::var_os("CC").unwrap_or_else(|| "cc".into()))
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .args(pkg_config(&["--cflags"]))
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join("tests/c/read_meta.c"))
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--libs"]))
        .output()
        .expect("running the C compiler `cc`");
    assert!(
        out.status.success(),
        "compiling read_meta.c: {}",
        common::show(&out)
    );
    let mut cmd = Command::new(&exe);
    cmd.arg(&pipeline);
    let out = common::run_with_limit(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", common::show(&out));
    let got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(got, expected);
    let _ = std::fs::remove_file(exe);
}
