//! `segtoolseg` in a gst-check `Harness`: N frames in, N buffers out, each output mode
//! and input format, ONNX Runtime and tract; masks, colour masks and overlays equal to
//! what the runtime's own `Segmenter` makes of the same frames; every buffer's class-map
//! meta read back through the documented accessor.

use crate::common;

use gst::prelude::*;
use gst_check::Harness;
use gst_video::VideoFormat;
use image::RgbImage;
use ndarray::Array2;
use segtool_runtime::expert::SegmenterExt;
use segtool_runtime::{colorize, overlay, EngineKind, Segmenter};

use gstsegtool::meta::{ClassMap, Logits};

/// The `u8` ids of a model of at most 256 classes.
fn ids8(mask: segtool_runtime::ClassMap) -> Array2<u8> {
    mask.as_u8()
        .expect("at most 256 classes: u8 ids")
        .to_owned()
}

const W: u32 = 24;
const H: u32 = 16;
const N: u32 = 4;

/// The frame's bytes in `format` (tight rows: `W` keeps every stride aligned); the
/// fourth byte of 4-byte formats is `x * 7 + y` so alpha handling shows.
fn encode(img: &RgbImage, format: VideoFormat) -> Vec<u8> {
    let mut out = Vec::new();
    for (x, y, p) in img.enumerate_pixels() {
        let [r, g, b] = p.0;
        let a = (x * 7 + y) as u8;
        match format {
            VideoFormat::Rgb => out.extend([r, g, b]),
            VideoFormat::Bgr => out.extend([b, g, r]),
            VideoFormat::Rgbx | VideoFormat::Rgba => out.extend([r, g, b, a]),
            VideoFormat::Bgrx => out.extend([b, g, r, a]),
            _ => unreachable!(),
        }
    }
    out
}

fn reference(
    model: &std::path::Path,
    engine: EngineKind,
    frames: &[RgbImage],
) -> (Vec<Array2<u8>>, segtool_model_spec::ModelSpec) {
    let mut seg = Segmenter::builder(model)
        .engine(engine)
        .threads(1)
        .open()
        .unwrap();
    let masks = frames
        .iter()
        .map(|f| ids8(seg.segment(f).unwrap().mask))
        .collect();
    (masks, seg.spec().clone())
}

/// Pushes `N` frames through `segtoolseg <props>`; returns the output buffers.
fn run(props: &str, format: VideoFormat, frames: &[RgbImage]) -> Vec<gst::Buffer> {
    common::init();
    let mut h = Harness::new_parse(&format!("segtoolseg {props}"));
    h.set_src_caps_str(&format!(
        "video/x-raw,format={},width={W},height={H},framerate=30/1",
        format.to_str()
    ));
    for (i, f) in frames.iter().enumerate() {
        let mut buf = gst::Buffer::from_mut_slice(encode(f, format));
        buf.get_mut()
            .unwrap()
            .set_pts(gst::ClockTime::from_mseconds(33 * i as u64));
        assert_eq!(h.push(buf), Ok(gst::FlowSuccess::Ok), "push {i} ({props})");
    }
    let out: Vec<gst::Buffer> = (0..frames.len())
        .map(|i| {
            h.pull()
                .unwrap_or_else(|e| panic!("pull {i} ({props}): {e}"))
        })
        .collect();
    assert!(h.try_pull().is_none(), "more buffers than frames ({props})");
    let caps = h.sinkpad().unwrap().current_caps().unwrap();
    let info = gst_video::VideoInfo::from_caps(&caps).unwrap();
    assert_eq!((info.width(), info.height()), (W, H), "{caps}");
    out
}

fn check_meta(buf: &gst::Buffer, mask: &Array2<u8>, classes: u32, frame: u64) {
    let map = ClassMap::from_buffer(buf).expect("class-map meta on every buffer");
    assert_eq!(
        (map.width, map.height, map.classes, map.frame),
        (W, H, classes, frame)
    );
    assert_eq!(map.ids, segtool_runtime::ClassMap::from(mask.clone()));
    let mut counts = vec![0u64; classes as usize];
    for &id in mask {
        counts[id as usize] += 1;
    }
    assert_eq!(map.pixel_counts, counts);
    assert_eq!(map.pixel_counts.iter().sum::<u64>(), (W * H) as u64);
}

fn all_modes(engine: EngineKind) {
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i, W, H)).collect();
    let (masks, spec) = reference(&model, engine, &frames);
    assert!(
        masks[0].iter().any(|&c| c != masks[0][[0, 0]]),
        "the test frames should show several classes"
    );
    let base = format!(
        "model={} engine={} threads=1",
        model.display(),
        engine.as_str()
    );

    // mask: GRAY8 class ids.
    let out = run(&format!("{base} output=mask"), VideoFormat::Rgb, &frames);
    for (i, (buf, mask)) in out.iter().zip(&masks).enumerate() {
        let map = buf.map_readable().unwrap();
        assert_eq!(
            map.as_slice(),
            mask.as_slice().unwrap(),
            "mask of frame {i}"
        );
        check_meta(buf, mask, 4, i as u64);
        assert_eq!(
            buf.pts(),
            Some(gst::ClockTime::from_mseconds(33 * i as u64))
        );
    }

    // color and overlay, in every input format.
    let alpha = 0.6f32;
    for format in [
        VideoFormat::Rgb,
        VideoFormat::Bgr,
        VideoFormat::Rgbx,
        VideoFormat::Bgrx,
        VideoFormat::Rgba,
    ] {
        for mode in ["color", "overlay"] {
            let out = run(
                &format!("{base} output={mode} alpha={alpha}"),
                format,
                &frames,
            );
            for (i, (buf, mask)) in out.iter().zip(&masks).enumerate() {
                let want_rgb = match mode {
                    "color" => colorize(mask.view(), &spec.palette),
                    _ => overlay(&frames[i], mask.view(), &spec.palette, alpha),
                };
                let mut want = encode(&want_rgb, format);
                if mode == "color"
                    && matches!(
                        format,
                        VideoFormat::Rgbx | VideoFormat::Bgrx | VideoFormat::Rgba
                    )
                {
                    // The fourth byte is the input's (alpha kept).
                    let input = encode(&frames[i], format);
                    for (w, s) in want.chunks_exact_mut(4).zip(input.chunks_exact(4)) {
                        w[3] = s[3];
                    }
                }
                let map = buf.map_readable().unwrap();
                assert!(
                    map.as_slice() == &want[..],
                    "{mode} of frame {i} in {}",
                    format.to_str()
                );
                check_meta(buf, mask, 4, i as u64);
            }
        }
    }
}

#[test]
fn tract_masks_equal_the_segmenter_in_every_mode() {
    all_modes(EngineKind::Tract);
}

#[test]
fn ort_masks_equal_the_segmenter_in_every_mode() {
    all_modes(EngineKind::Ort);
}

/// More than 256 classes: GRAY16 class ids (little-endian) and a 16-bit meta, the ids
/// above 255 as the model's colour grid puts them; 256 classes still fit GRAY8.
#[test]
fn many_classes_give_gray16() {
    let dir = tempfile::tempdir().unwrap();
    let classes = 300;
    let model = dir.path().join("grid300.onnx");
    std::fs::write(&model, segtool_testkit::many_classes_model_bytes(classes)).unwrap();
    // Frame i shows classes (i * 97 + x + y * W) % 300 (ids 0..299 over the two frames).
    let want: Vec<Array2<u16>> = (0..2)
        .map(|i| {
            Array2::from_shape_fn((H as usize, W as usize), |(y, x)| {
                ((i * 97 + x + y * W as usize) % classes) as u16
            })
        })
        .collect();
    assert!(want.iter().flatten().any(|&c| c > 255), "ids above 255");
    let frames: Vec<RgbImage> = want
        .iter()
        .map(|ids| {
            RgbImage::from_fn(W, H, |x, y| {
                let c = ids[[y as usize, x as usize]] as usize;
                image::Rgb(segtool_testkit::many_classes_pixel(c, classes))
            })
        })
        .collect();
    let out = run(
        &format!("model={} engine=tract output=mask", model.display()),
        VideoFormat::Bgrx,
        &frames,
    );
    for (i, (buf, want)) in out.iter().zip(&want).enumerate() {
        let map = buf.map_readable().unwrap();
        let ids: Vec<u16> = map
            .as_slice()
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        assert_eq!(ids, want.iter().copied().collect::<Vec<_>>(), "frame {i}");
        let meta = ClassMap::from_buffer(buf).expect("class-map meta");
        assert_eq!(meta.ids, segtool_runtime::ClassMap::U16(want.clone()));
        assert_eq!(meta.classes, classes as u32);
        assert_eq!(
            meta.at(W - 1, H - 1),
            Some(want[[H as usize - 1, W as usize - 1]])
        );
        assert_eq!(meta.pixel_counts.iter().sum::<u64>(), (W * H) as u64);
    }
    // 256 classes: ids up to 255, one byte each.
    let model = common::tiny_model(dir.path(), 256);
    let frames: Vec<RgbImage> = (0..2).map(|i| common::frame(i + 7, W, H)).collect();
    let (masks, _) = reference(&model, EngineKind::Tract, &frames);
    let out = run(
        &format!("model={} engine=tract output=mask", model.display()),
        VideoFormat::Bgrx,
        &frames,
    );
    for (i, (buf, mask)) in out.iter().zip(&masks).enumerate() {
        let map = buf.map_readable().unwrap();
        assert_eq!(map.as_slice(), mask.as_slice().unwrap(), "frame {i}");
        check_meta(buf, mask, 256, i as u64);
    }
}

/// Live mode in a harness: frames pushed back to back; every frame is answered or
/// dropped, EOS drains, and the counts add up.
#[test]
fn live_counts_add_up_and_eos_drains() {
    common::init();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let frames: Vec<RgbImage> = (0..12).map(|i| common::frame(i, W, H)).collect();
    let (masks, _) = reference(&model, EngineKind::Tract, &frames);
    let mut h = Harness::new_parse(&format!(
        "segtoolseg name=seg model={} engine=tract output=mask live=true",
        model.display()
    ));
    h.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
    ));
    for f in &frames {
        assert_eq!(
            h.push(gst::Buffer::from_mut_slice(encode(f, VideoFormat::Rgb))),
            Ok(gst::FlowSuccess::Ok)
        );
    }
    assert!(h.push_event(gst::event::Eos::new()));
    let mut answered = Vec::new();
    while let Some(buf) = h.try_pull() {
        answered.push(buf);
    }
    // `new_parse` wraps the element in a bin.
    let bin = h.element().unwrap().downcast::<gst::Bin>().unwrap();
    let element = bin.by_name("seg").unwrap();
    let stats = element.property::<gst::Structure>("stats");
    let get = |k: &str| stats.get::<u64>(k).unwrap();
    assert_eq!(get("frames-in"), frames.len() as u64, "{stats}");
    assert_eq!(get("answered"), answered.len() as u64, "{stats}");
    assert_eq!(
        get("answered") + get("dropped"),
        frames.len() as u64,
        "{stats}"
    );
    assert!(!answered.is_empty());
    let mut last = None;
    for buf in &answered {
        let map = ClassMap::from_buffer(buf).unwrap();
        assert!(
            last < Some(map.frame),
            "answered frames come in frame order"
        );
        last = Some(map.frame);
        assert_eq!(
            map.ids.as_u8().unwrap().as_slice().unwrap(),
            masks[map.frame as usize].as_slice().unwrap(),
            "frame {}",
            map.frame
        );
    }
    // The newest frame is always answered (nothing newer replaces it).
    assert_eq!(last, Some(frames.len() as u64 - 1));
}

/// `smooth`: masks equal the runtime's `TemporalSmoother` over the Segmenter's logits;
/// `protocol`: masks equal the runtime's accuracy mode on the same frames.
#[test]
fn smoothing_and_accuracy_mode_equal_the_runtime() {
    use segtool_runtime::pipeline::accuracy::{self, AccuracyOptions, Protocol};
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i * 3, W, H)).collect();

    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .with_logits(true);
    let mut smoother = segtool_runtime::TemporalSmoother::new(0.5).unwrap();
    let smoothed: Vec<Array2<u8>> = frames
        .iter()
        .map(|f| {
            let out = seg.segment(f).unwrap();
            ids8(smoother.mask(out.logits.unwrap().view(), H as usize, W as usize))
        })
        .collect();
    let base = format!("model={} engine=tract output=mask", model.display());
    let out = run(&format!("{base} smooth=0.5"), VideoFormat::Rgb, &frames);
    for (i, (buf, mask)) in out.iter().zip(&smoothed).enumerate() {
        assert_eq!(
            buf.map_readable().unwrap().as_slice(),
            mask.as_slice().unwrap(),
            "smoothed frame {i}"
        );
    }

    let spec = seg.spec().clone();
    let mut engine = seg.into_plain_engine();
    let opts = AccuracyOptions::new()
        .protocol(Protocol::Danet)
        .base_size(Some(32));
    let out = run(
        &format!("{base} protocol=danet base-size=32"),
        VideoFormat::Rgb,
        &frames,
    );
    for (i, (buf, f)) in out.iter().zip(&frames).enumerate() {
        let (masks, _) =
            accuracy::segment(engine.as_mut(), &spec, std::slice::from_ref(f), &opts).unwrap();
        assert_eq!(
            buf.map_readable().unwrap().as_slice(),
            masks[0].as_u8().unwrap().as_slice().unwrap(),
            "accuracy-mode frame {i}"
        );
    }
}

/// A flush discards the frames in flight: after it, every frame is still accounted for
/// (answered, dropped or flushed) and the element goes on.
#[test]
fn flush_discards_and_the_counts_still_add_up() {
    common::init();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let mut h = Harness::new_parse(&format!(
        "segtoolseg name=seg model={} engine=tract output=mask live=true",
        model.display()
    ));
    h.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
    ));
    let push = |h: &mut Harness, n: u32| {
        for i in 0..n {
            assert_eq!(
                h.push(gst::Buffer::from_mut_slice(encode(
                    &common::frame(i, W, H),
                    VideoFormat::Rgb
                ))),
                Ok(gst::FlowSuccess::Ok)
            );
        }
    };
    push(&mut h, 6);
    assert!(h.push_event(gst::event::FlushStart::new()));
    assert!(h.push_event(gst::event::FlushStop::new(true)));
    h.set_src_caps_str(&format!(
        "video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
    ));
    push(&mut h, 3);
    assert!(h.push_event(gst::event::Eos::new()));
    let mut pulled = 0u64;
    while h.try_pull().is_some() {
        pulled += 1;
    }
    let bin = h.element().unwrap().downcast::<gst::Bin>().unwrap();
    let stats = bin
        .by_name("seg")
        .unwrap()
        .property::<gst::Structure>("stats");
    let get = |k: &str| stats.get::<u64>(k).unwrap();
    assert_eq!(get("frames-in"), 9, "{stats}");
    assert_eq!(
        get("answered") + get("dropped") + get("flushed"),
        9,
        "{stats}"
    );
    assert!(
        get("answered") >= 1,
        "the last frame after the flush is answered: {stats}"
    );
    // The harness keeps the buffers pushed before the flush; at least the answered ones
    // after it arrived.
    assert!(pulled >= 1);
}

/// A model with a fixed input size: the model's card resizes each frame to it (bilinear)
/// and brings the scores back to the frame's size, so the element's masks are the
/// runtime `Segmenter`'s at the frame's size, for ONNX Runtime and tract.
#[test]
fn fixed_size_models_get_resized_frames_and_frame_size_masks() {
    let dir = tempfile::tempdir().unwrap();
    let (mh, mw) = (8u32, 12u32);
    let model = common::fixed_model(dir.path(), 4, mh as i64, mw as i64);
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i + 11, W, H)).collect();
    for engine in [EngineKind::Tract, EngineKind::Ort] {
        let mut seg = Segmenter::builder(&model).engine(engine).open().unwrap();
        let fitted = Some([mh as usize, mw as usize]);
        assert_eq!(seg.card().card.input.size, fitted, "the graph's size");
        let out = run(
            &format!(
                "model={} engine={} output=mask",
                model.display(),
                engine.as_str()
            ),
            VideoFormat::Rgb,
            &frames,
        );
        for (i, (buf, f)) in out.iter().zip(&frames).enumerate() {
            let want = ids8(seg.segment(f).unwrap().mask);
            assert_eq!(want.dim(), (H as usize, W as usize));
            assert_eq!(
                buf.map_readable().unwrap().as_slice(),
                want.as_slice().unwrap(),
                "{engine} frame {i}"
            );
            check_meta(buf, &want, 4, i as u64);
        }
    }
}

/// An ONNX file segtool did not write (no metadata, its own input and output names), with
/// a model card given by the `card` property: masks equal to the runtime's `Segmenter`
/// with the same card, in BGR input too. Without a card the element refuses to start.
#[test]
fn a_foreign_model_is_served_through_the_card_property() {
    use segtool_runtime::card::CardRequest;
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("plain.onnx");
    std::fs::write(&model, segtool_testkit::foreign_model_bytes(3, 3, false)).unwrap();
    let card = dir.path().join("plain.card.toml");
    std::fs::write(
        &card,
        "classes = [\"a\", \"b\", \"c\"]\n[input]\nmean = [0.5, 0.4, 0.3]\nstd = [0.2, 0.25, 0.3]\n",
    )
    .unwrap();
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i, W, H)).collect();
    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .threads(1)
        .card(CardRequest::new().card_file(&card))
        .open()
        .unwrap();
    let masks: Vec<Array2<u8>> = frames
        .iter()
        .map(|f| ids8(seg.segment(f).unwrap().mask))
        .collect();
    assert!(
        masks.iter().any(|m| m.iter().any(|&c| c != m[[0, 0]])),
        "several classes"
    );
    let props = format!(
        "model={} card={} engine=tract threads=1 output=mask",
        model.display(),
        card.display()
    );
    for format in [VideoFormat::Rgb, VideoFormat::Bgr] {
        let out = run(&props, format, &frames);
        for (i, (buf, mask)) in out.iter().zip(&masks).enumerate() {
            let map = buf.map_readable().unwrap();
            assert_eq!(
                map.as_slice(),
                mask.as_slice().unwrap(),
                "frame {i}, {}",
                format.to_str()
            );
            check_meta(buf, mask, 3, i as u64);
        }
    }
    // No card: the element does not start, and its error says what is missing.
    common::init();
    let element = gst::ElementFactory::make("segtoolseg")
        .property("model", model.to_str().unwrap())
        .property_from_str("engine", "tract")
        .build()
        .unwrap();
    let pipeline = gst::Pipeline::new();
    pipeline.add(&element).unwrap();
    assert!(
        pipeline.set_state(gst::State::Paused).is_err(),
        "a foreign model without a card ran"
    );
    let bus = pipeline.bus().unwrap();
    let message = bus
        .pop_filtered(&[gst::MessageType::Error])
        .expect("an error message on the bus");
    let gst::MessageView::Error(e) = message.view() else {
        unreachable!()
    };
    let text = format!("{} {:?}", e.error(), e.debug());
    assert!(
        text.contains("input.mean") && text.contains("plain.onnx"),
        "{text}"
    );
    pipeline.set_state(gst::State::Null).unwrap();
}

/// A Hugging Face folder written by transformers' own `save_pretrained`
/// (tests/reference/hf_processors_ref.py): Mask2Former's mask-classification head, served
/// by folder alone (`model=FOLDER`, no card), on ONNX Runtime and tract. Masks equal to
/// the runtime's `Segmenter` on the same folder (which tests/it/foreign_folders.rs holds to
/// transformers' own pipeline). Needs the project venv's python (`SEGTOOL_PYTHON`): a
/// missing reference without it (`hugging_face_folder` reports it: a failure under
/// `make test`, else a counted skip).
#[test]
fn a_hugging_face_mask_classification_folder_is_served_by_its_folder() {
    let dir = tempfile::tempdir().unwrap();
    let Some(folder) = segtool_testkit::hugging_face_folder("mask2former", dir.path()) else {
        return;
    };
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i, W, H)).collect();
    for engine in [EngineKind::Ort, EngineKind::Tract] {
        let (masks, spec) = reference(&folder, engine, &frames);
        assert_eq!(spec.classes.len(), 6);
        let name = engine.as_str();
        let props = format!(
            "model={} engine={name} threads=1 output=mask",
            folder.display()
        );
        let out = run(&props, VideoFormat::Rgb, &frames);
        assert_eq!(out.len(), frames.len());
        for (i, (buf, mask)) in out.iter().zip(&masks).enumerate() {
            let map = buf.map_readable().unwrap();
            assert_eq!(map.as_slice(), mask.as_slice().unwrap(), "{name} frame {i}");
            check_meta(buf, mask, 6, i as u64);
        }
    }
}

/// The element's properties that open a model are named as the runtime's options
/// (`SegmenterOptions::NAMES`), dashes for underscores as GStreamer spells them.
#[test]
fn model_properties_are_named_as_the_runtime_options() {
    common::init();
    let element = gst::ElementFactory::make("segtoolseg").build().unwrap();
    let names: Vec<String> = element
        .list_properties()
        .iter()
        .map(|p| p.name().to_string())
        .collect();
    for name in segtool_runtime::SegmenterOptions::NAMES {
        let property = name.replace('_', "-");
        assert!(
            names.contains(&property),
            "no property {property}: {names:?}"
        );
    }
}

/// `logits=true`: each buffer's meta carries the frame's logits, those the runtime
/// computes, in order and in live mode alike; without it, none.
#[test]
fn logits_ride_in_the_meta_when_asked_for() {
    common::init();
    let dir = tempfile::tempdir().unwrap();
    let model = common::tiny_model(dir.path(), 4);
    let frames: Vec<RgbImage> = (0..N).map(|i| common::frame(i, W, H)).collect();
    let mut seg = Segmenter::builder(&model)
        .engine(EngineKind::Tract)
        .threads(1)
        .logits(true)
        .open()
        .unwrap();
    let want: Vec<_> = frames
        .iter()
        .map(|f| seg.segment(f).unwrap().logits.unwrap())
        .collect();
    let base = format!(
        "model={} engine=tract threads=1 output=mask",
        model.display()
    );
    for (props, logits) in [
        ("logits=true", true),
        ("logits=true live=true", true),
        ("", false),
    ] {
        let mut h = Harness::new_parse(&format!("segtoolseg {base} {props}"));
        h.set_src_caps_str(&format!(
            "video/x-raw,format=RGB,width={W},height={H},framerate=30/1"
        ));
        for f in &frames {
            let buf = gst::Buffer::from_mut_slice(encode(f, VideoFormat::Rgb));
            assert_eq!(h.push(buf), Ok(gst::FlowSuccess::Ok));
        }
        assert!(h.push_event(gst::event::Eos::new()));
        let mut answered = 0;
        // Live mode may drop frames: each answered one is checked against its own.
        while let Some(buf) = h.try_pull() {
            answered += 1;
            let frame = ClassMap::from_buffer(&buf).unwrap().frame as usize;
            let got = Logits::from_buffer(&buf);
            if !logits {
                assert!(got.is_none(), "no logits unless asked for");
                continue;
            }
            let got = got.unwrap_or_else(|| panic!("logits of frame {frame} ({props})"));
            let (c, h, w) = want[frame].dim();
            assert_eq!(
                (got.classes, got.height, got.width),
                (c as u32, h as u32, w as u32)
            );
            let values: Vec<f32> = want[frame].iter().copied().collect();
            assert_eq!(got.values, values, "frame {frame} ({props})");
        }
        assert!(answered > 0, "{props}");
    }
}
