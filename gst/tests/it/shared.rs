//! Several `segtoolseg` elements sharing one model through `model-instance-id`: the
//! same masks as elements of their own (bit for bit), one model opened and released
//! with its last element, elements that disagree on the model refused naming the first
//! difference, a stream that ends while another goes on, exact counts per element, a
//! frame size that changes mid-stream, and elements of different sizes at once.

use crate::common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use gst::prelude::*;
use gst_check::Harness;
use image::RgbImage;
use segtool_runtime::{EngineKind, Segmenter};

use gstsegtool::meta::ClassMap;

const LIMIT: Duration = Duration::from_secs(120);
const W: u32 = 40;
const H: u32 = 24;

/// Each element's `(frame, class ids)` in push order, and its stats at EOS.
struct Run {
    masks: Vec<Vec<(u64, segtool_runtime::ClassMap)>>,
    stats: Vec<gst::Structure>,
}

/// A source of `n` frames of videotestsrc's `pattern` into `segtoolseg name=seg{i}
/// props` into `fakesink name=sink{i}`.
fn branch(i: usize, n: u32, pattern: &str, props: &str) -> String {
    sized_branch(i, n, pattern, props, (W, H))
}

/// [`branch`] with frames of `(width, height)`.
fn sized_branch(i: usize, n: u32, pattern: &str, props: &str, (w, h): (u32, u32)) -> String {
    format!(
        "videotestsrc num-buffers={n} pattern={pattern} \
         ! video/x-raw,format=RGB,width={w},height={h},framerate=30/1 \
         ! segtoolseg name=seg{i} output=mask {props} ! fakesink name=sink{i} sync=false "
    )
}

/// Runs the pipeline of `branches` to EOS in this process.
fn run(branches: &[String]) -> Run {
    common::init();
    let description = branches.concat();
    let pipeline = gst::parse::launch(&description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let masks: Vec<_> = (0..branches.len())
        .map(|i| {
            let got = Arc::new(Mutex::new(Vec::new()));
            let g = got.clone();
            let sink = pipeline.by_name(&format!("sink{i}")).unwrap();
            sink.static_pad("sink").unwrap().add_probe(
                gst::PadProbeType::BUFFER,
                move |_, info| {
                    if let Some(buf) = info.buffer() {
                        let map = ClassMap::from_buffer(buf).expect("class-map meta");
                        g.lock().unwrap().push((map.frame, map.ids));
                    }
                    gst::PadProbeReturn::Ok
                },
            );
            got
        })
        .collect();
    pipeline.set_state(gst::State::Playing).unwrap();
    let bus = pipeline.bus().unwrap();
    let msg = bus
        .timed_pop_filtered(
            gst::ClockTime::from_seconds(LIMIT.as_secs()),
            &[gst::MessageType::Eos, gst::MessageType::Error],
        )
        .expect("EOS or an error within the limit");
    if let gst::MessageView::Error(e) = msg.view() {
        panic!("{description}: {} ({:?})", e.error(), e.debug());
    }
    let stats = (0..branches.len())
        .map(|i| {
            pipeline
                .by_name(&format!("seg{i}"))
                .unwrap()
                .property::<gst::Structure>("stats")
        })
        .collect();
    pipeline.set_state(gst::State::Null).unwrap();
    Run {
        masks: masks
            .into_iter()
            .map(|m| std::mem::take(&mut *m.lock().unwrap()))
            .collect(),
        stats,
    }
}

fn count(stats: &gst::Structure, key: &str) -> u64 {
    stats
        .get::<u64>(key)
        .unwrap_or_else(|e| panic!("{key}: {e} in {stats}"))
}

fn shared_masks_equal_separate_elements(engine: EngineKind, id: &str) {
    const N: u32 = 8;
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let base = format!(
        "model={} engine={} threads=1",
        model.display(),
        engine.as_str()
    );
    let patterns = ["smpte", "ball"];
    let separate = run(&[
        branch(0, N, patterns[0], &base),
        branch(1, N, patterns[1], &base),
    ]);
    // max-batch 2 and a long wait: every run takes one frame of each element.
    let shared_props = format!("{base} model-instance-id={id} max-batch=2 max-wait-ms=1000");
    let shared = run(&[
        branch(0, N, patterns[0], &shared_props),
        branch(1, N, patterns[1], &shared_props),
    ]);
    for i in 0..2 {
        assert_eq!(separate.masks[i].len(), N as usize, "{}", separate.stats[i]);
        let frames: Vec<u64> = shared.masks[i].iter().map(|(f, _)| *f).collect();
        assert_eq!(
            frames,
            (0..N as u64).collect::<Vec<_>>(),
            "every frame, in order"
        );
        assert!(
            shared.masks[i] == separate.masks[i],
            "element {i}: the shared model's masks differ from a model of its own"
        );
        let stats = &shared.stats[i];
        assert_eq!(stats.get::<String>("model-instance-id").unwrap(), id);
        assert_eq!(stats.get::<String>("source").unwrap(), format!("seg{i}"));
        assert_eq!(stats.get::<u32>("shared-elements").unwrap(), 2, "{stats}");
        assert_eq!(count(stats, "model-opens"), 1, "opened once: {stats}");
        assert_eq!(
            stats.get::<u32>("largest-batch").unwrap(),
            2,
            "frames of both elements in one run: {stats}"
        );
        // Separate elements have no shared fields.
        assert!(!separate.stats[i].has_field("model-instance-id"));
    }
    assert_eq!(
        shared.stats[0].get::<String>("model-opened-by").unwrap(),
        shared.stats[1].get::<String>("model-opened-by").unwrap(),
        "one element opened the model, the other joined it"
    );
    // Both elements ran N frames and a warm-up each, two a run at best.
    let runs = count(&shared.stats[0], "engine-runs");
    assert!(
        (N as u64 + 1..=2 * N as u64 + 2).contains(&runs),
        "{runs} runs for {} frames: {}",
        2 * N + 2,
        shared.stats[0]
    );

    // The last element to stop released the model: the id opens a new one.
    let again = run(&[branch(0, 2, patterns[0], &shared_props)]);
    assert_eq!(
        count(&again.stats[0], "model-opens"),
        2,
        "{}",
        again.stats[0]
    );
    assert_eq!(again.stats[0].get::<u32>("shared-elements").unwrap(), 1);
}

#[test]
fn tract_shared_model_masks_equal_separate_elements() {
    shared_masks_equal_separate_elements(EngineKind::Tract, "shared-tract");
}

#[test]
fn ort_shared_model_masks_equal_separate_elements() {
    shared_masks_equal_separate_elements(EngineKind::Ort, "shared-ort");
}

/// The pipeline's error when it starts, or None when it starts.
fn start_error(description: &str) -> Option<String> {
    common::init();
    let pipeline = gst::parse::launch(description)
        .unwrap()
        .downcast::<gst::Pipeline>()
        .unwrap();
    let result = pipeline.set_state(gst::State::Paused);
    let bus = pipeline.bus().unwrap();
    let error = bus
        .timed_pop_filtered(
            gst::ClockTime::from_mseconds(200),
            &[gst::MessageType::Error],
        )
        .map(|msg| match msg.view() {
            gst::MessageView::Error(e) => e.error().to_string(),
            _ => unreachable!(),
        });
    pipeline.set_state(gst::State::Null).unwrap();
    assert_eq!(
        result.is_err(),
        error.is_some(),
        "a failed start posts its error: {error:?}"
    );
    error
}

/// Elements that share an id but not the model's options are refused at start, the
/// error naming the first property that differs and both values (whichever element
/// opened the model first).
#[test]
fn elements_disagreeing_on_the_shared_model_are_refused_naming_the_difference() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let m = model.display();
    let cases = [
        (
            "threads",
            "engine=tract threads=1",
            "engine=tract threads=2",
            "1",
            "2",
        ),
        (
            "engine",
            "engine=tract threads=1",
            "engine=ort threads=2",
            "tract",
            "ort",
        ),
        (
            "max-batch",
            "engine=tract",
            "engine=tract max-batch=3",
            "4",
            "3",
        ),
    ];
    for (k, (name, a, b, va, vb)) in cases.into_iter().enumerate() {
        let id = format!("cams{k}");
        let error = start_error(&format!(
            "{}{}",
            branch(
                0,
                3,
                "smpte",
                &format!("model={m} model-instance-id={id} {a}")
            ),
            branch(
                1,
                3,
                "ball",
                &format!("model={m} model-instance-id={id} {b}")
            ),
        ))
        .unwrap_or_else(|| panic!("{name}: elements that disagree started"));
        let seg0_first = format!(
            "model-instance-id {id}: element seg1 has {name}={vb} but seg0 opened the shared model with {name}={va}"
        );
        let seg1_first = format!(
            "model-instance-id {id}: element seg0 has {name}={va} but seg1 opened the shared model with {name}={vb}"
        );
        assert!(
            error.contains(&seg0_first) || error.contains(&seg1_first),
            "{name}: {error}"
        );
    }
    // The same id and the same options (other element properties may differ) start.
    assert_eq!(
        start_error(&format!(
            "{}{}",
            branch(
                0,
                3,
                "smpte",
                &format!("model={m} model-instance-id=agree engine=tract")
            ),
            branch(
                1,
                3,
                "ball",
                &format!("model={m} model-instance-id=agree engine=tract live=true alpha=0.2")
            ),
        )),
        None
    );
}

/// One element's stream ends (EOS after 3 frames) while the other's goes on: the other
/// still gets every frame answered, and each element's counts are its own and exact.
#[test]
fn an_ended_stream_leaves_the_others_answered_with_exact_counts() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let props = format!(
        "model={} engine=tract threads=1 model-instance-id=ends max-batch=2 max-wait-ms=20",
        model.display()
    );
    let out = run(&[branch(0, 3, "smpte", &props), branch(1, 24, "ball", &props)]);
    for (i, n) in [(0, 3u64), (1, 24)] {
        let stats = &out.stats[i];
        assert_eq!(out.masks[i].len() as u64, n, "{stats}");
        assert_eq!(count(stats, "frames-in"), n, "{stats}");
        assert_eq!(count(stats, "answered"), n, "{stats}");
        for key in ["dropped", "flushed", "failed"] {
            assert_eq!(count(stats, key), 0, "{key}: {stats}");
        }
    }
}

/// Live elements on one model: each element's answered + dropped is its frames in, and
/// its answered frames are the ones its sink got.
#[test]
fn live_elements_on_one_model_count_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let props = format!(
        "model={} engine=tract threads=1 model-instance-id=live live=true",
        model.display()
    );
    let n = [30u64, 17];
    let out = run(&[
        branch(0, n[0] as u32, "smpte", &props),
        branch(1, n[1] as u32, "ball", &props),
    ]);
    for (i, &n) in n.iter().enumerate() {
        let stats = &out.stats[i];
        assert_eq!(count(stats, "frames-in"), n, "{stats}");
        assert_eq!(
            count(stats, "answered"),
            out.masks[i].len() as u64,
            "{stats}"
        );
        assert_eq!(
            count(stats, "answered") + count(stats, "dropped"),
            n,
            "{stats}"
        );
        // The newest frame is always answered.
        assert_eq!(out.masks[i].last().map(|(f, _)| *f), Some(n - 1));
        assert_eq!(stats.get::<u32>("shared-elements").unwrap(), 2, "{stats}");
    }
}

/// New caps mid-stream (another frame size): the frames before are answered at their
/// size, the frames after at the new one, each mask the runtime's own.
#[test]
fn a_frame_size_change_mid_stream_is_served_at_the_new_size() {
    common::init();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .threads(1)
        .open()
        .unwrap();
    for live in [false, true] {
        let mut h = Harness::new_parse(&format!(
            "segtoolseg name=seg model={} engine=tract threads=1 output=mask \
             model-instance-id=resize-{live} live={live}",
            model.display()
        ));
        let sizes = [(W, H), (W / 2 + 4, H + 8)];
        let mut pushed = Vec::new();
        for (k, (w, h_)) in sizes.into_iter().enumerate() {
            h.set_src_caps_str(&format!(
                "video/x-raw,format=RGB,width={w},height={h_},framerate=30/1"
            ));
            for i in 0..3 {
                let f: RgbImage = common::frame(k as u32 * 10 + i, w, h_);
                let mut buf = gst::Buffer::from_mut_slice(f.as_raw().clone());
                buf.get_mut()
                    .unwrap()
                    .set_pts(gst::ClockTime::from_mseconds(33 * pushed.len() as u64));
                assert_eq!(h.push(buf), Ok(gst::FlowSuccess::Ok));
                pushed.push(f);
            }
        }
        assert!(h.push_event(gst::event::Eos::new()));
        let mut got = Vec::new();
        while let Some(buf) = h.try_pull() {
            got.push(ClassMap::from_buffer(&buf).unwrap());
        }
        if !live {
            assert_eq!(got.len(), pushed.len(), "live={live}");
        }
        assert!(
            got.iter().any(|m| (m.width, m.height) == sizes[1]),
            "live={live}"
        );
        for map in &got {
            let frame = &pushed[map.frame as usize];
            assert_eq!((map.width, map.height), frame.dimensions(), "live={live}");
            assert_eq!(
                map.ids,
                seg.segment(frame).unwrap().mask,
                "live={live} frame {}",
                map.frame
            );
        }
    }
}

/// The book's multi-camera `gst-launch-1.0` line, test sources for the cameras: four
/// live elements named after their cameras on one model run to EOS.
#[test]
fn elements_of_different_sizes_share_one_model_at_once() {
    // Frames of different sizes never share an engine run (a batch is one tensor), so
    // each element's frames run alone or with their own size; the masks are still the
    // ones a model of its own gives, at the element's size.
    const N: u32 = 6;
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let base = format!("model={} engine=tract threads=1", model.display());
    let sizes = [(W, H), (56, 32)];
    let separate = run(&[
        sized_branch(0, N, "smpte", &base, sizes[0]),
        sized_branch(1, N, "ball", &base, sizes[1]),
    ]);
    let shared_props = format!("{base} model-instance-id=sizes max-batch=2 max-wait-ms=50");
    let shared = run(&[
        sized_branch(0, N, "smpte", &shared_props, sizes[0]),
        sized_branch(1, N, "ball", &shared_props, sizes[1]),
    ]);
    for (i, (w, h)) in sizes.into_iter().enumerate() {
        let frames: Vec<u64> = shared.masks[i].iter().map(|(f, _)| *f).collect();
        assert_eq!(
            frames,
            (0..N as u64).collect::<Vec<_>>(),
            "every frame, in order"
        );
        for (_, ids) in &shared.masks[i] {
            assert_eq!(
                ids.dim(),
                (h as usize, w as usize),
                "element {i}'s own size"
            );
        }
        assert!(
            shared.masks[i] == separate.masks[i],
            "element {i}: the shared model's masks differ from a model of its own"
        );
        let stats = &shared.stats[i];
        assert_eq!(stats.get::<u32>("shared-elements").unwrap(), 2, "{stats}");
        assert_eq!(count(stats, "model-opens"), 1, "opened once: {stats}");
        assert_eq!(count(stats, "answered"), N as u64, "{stats}");
    }
}

#[test]
fn gst_launch_runs_four_cameras_on_one_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let description: String = ["front", "left", "right", "rear"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            format!(
                "videotestsrc num-buffers=10 pattern={i} ! video/x-raw,width={W},height={H} \
                 ! videoconvert ! segtoolseg name={name} model={} model-instance-id=cams \
                 max-batch=4 live=true engine=tract ! videoconvert ! fakesink sync=false ",
                model.display()
            )
        })
        .collect();
    let out = common::gst_launch(&description, LIMIT);
    assert!(out.status.success(), "{}", common::show(&out));
}
