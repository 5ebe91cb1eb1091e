//! Card resolution on files the way other tools write them: no segtool metadata, their own
//! input and output names. The graphs are tiny but real ONNX (a 1x1 Conv, or a Conv then
//! ArgMax for a class-map output).

use std::path::{Path, PathBuf};

use super::*;
use segtool_testkit::{foreign_model_bytes, tiny_model_bytes, tiny_spec};

/// [`foreign_model_bytes`] written to `dir/name`.
fn foreign(dir: &Path, name: &str, in_ch: i64, classes: i64, argmax: bool) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, foreign_model_bytes(in_ch, classes, argmax)).unwrap();
    path
}

fn message(e: RuntimeError) -> String {
    e.to_string()
}

#[test]
fn a_foreign_file_without_a_card_names_what_is_missing_and_how_to_give_it() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "plain.onnx", 3, 5, false);
    let e = message(resolve(&model, &CardRequest::new()).unwrap_err());
    assert!(e.contains("plain.onnx"), "{e}");
    for what in [
        "input.mean",
        "input.std",
        "segtool.toml",
        "--card",
        "--mean",
        "segtool export",
    ] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
    // Both gaps at once: the normalisation, and (a class map says no count) the classes.
    let classmap = foreign(dir.path(), "argmax.onnx", 3, 4, true);
    let e = message(resolve(&classmap, &CardRequest::new()).unwrap_err());
    for what in ["input.mean", "num_classes"] {
        assert!(e.contains(what), "{what} not in: {e}");
    }
}

#[test]
fn the_graph_fills_names_types_and_class_count_and_flags_fill_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "plain.onnx", 3, 5, false);
    let mut fields = CardFields::default();
    fields.input.mean = Some(vec![0.485, 0.456, 0.406]);
    fields.input.std = Some(vec![0.229, 0.224, 0.225]);
    let r = resolve(&model, &CardRequest::new().fields(fields)).unwrap();
    let c = &r.card;
    assert_eq!(
        (c.input.name.as_str(), c.output.name.as_str()),
        ("input", "out")
    );
    assert_eq!(
        (c.input.layout, c.input.dtype),
        (Layout::Nchw, Dtype::Float32)
    );
    assert_eq!(c.output.kind, OutputKind::Logits);
    assert_eq!(
        c.classes,
        ["class_0", "class_1", "class_2", "class_3", "class_4"]
    );
    assert_eq!(c.palette.len(), 5);
    assert!((c.input.scale - 1.0 / 255.0).abs() < 1e-9);
    assert_eq!(r.source_of("input.mean"), Some(&CardSource::Caller));
    assert_eq!(r.source_of("input.name"), Some(&CardSource::Graph));
    assert_eq!(r.source_of("classes"), Some(&CardSource::Graph));
    assert!(matches!(
        r.source_of("input.scale"),
        Some(CardSource::Default(_))
    ));
    assert_eq!(r.sources.len(), FIELDS.len());
    assert!(!r.segtool_export);
}

#[test]
fn the_sidecar_wins_over_flags_and_a_card_file_replaces_the_sidecar() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "m.onnx", 3, 2, false);
    std::fs::write(
        sidecar_path(&model),
        "classes = [\"road\", \"car\"]\n[input]\nmean = [123.675, 116.28, 103.53]\n\
         std = [58.395, 57.12, 57.375]\nchannels = \"bgr\"\nsize_divisor = 32\n",
    )
    .unwrap();
    let mut fields = CardFields::default();
    fields.input.mean = Some(vec![0.0; 3]);
    fields.input.std = Some(vec![1.0; 3]);
    fields.output.align_corners = Some(true);
    let r = resolve(&model, &CardRequest::new().fields(fields.clone())).unwrap();
    assert_eq!(r.card.input.mean, [123.675, 116.28, 103.53]);
    assert_eq!(r.card.input.scale, 1.0, "means above 1 are on 0-255 pixels");
    assert_eq!(r.card.input.channels, ChannelOrder::Bgr);
    assert_eq!(r.card.input.size_divisor, Some(32));
    assert_eq!(r.card.classes, ["road", "car"]);
    assert!(
        r.card.output.align_corners,
        "what the sidecar leaves open, flags fill"
    );
    assert_eq!(
        r.source_of("input.mean"),
        Some(&CardSource::Sidecar(sidecar_path(&model)))
    );
    assert_eq!(
        r.source_of("output.align_corners"),
        Some(&CardSource::Caller)
    );

    let other = dir.path().join("other.toml");
    std::fs::write(&other, "num_classes = 2\n").unwrap();
    let r = resolve(&model, &CardRequest::new().card_file(&other).fields(fields)).unwrap();
    assert_eq!(
        r.card.input.mean, [0.0; 3],
        "the sidecar is not read when a card file is given"
    );
    assert_eq!(r.source_of("classes"), Some(&CardSource::CardFile(other)));
}

#[test]
fn cards_that_contradict_the_graph_are_refused_naming_both_sides() {
    let dir = tempfile::tempdir().unwrap();
    let grey = foreign(dir.path(), "grey.onnx", 1, 2, false);
    let logits = foreign(dir.path(), "logits21.onnx", 3, 21, false);
    let classmap = foreign(dir.path(), "argmax.onnx", 3, 4, true);
    let card = |text: &str| {
        let f = dir.path().join("card.toml");
        std::fs::write(&f, text).unwrap();
        CardRequest::new().card_file(f)
    };
    let norm = "[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n";
    let e = message(resolve(&grey, &card(norm)).unwrap_err());
    assert!(
        e.contains("3 mean/std values") && e.contains("1 channel"),
        "{e}"
    );
    let names: Vec<String> = (0..19).map(|i| format!("\"c{i}\"")).collect();
    let e = message(
        resolve(
            &logits,
            &card(&format!("classes = [{}]\n{norm}", names.join(","))),
        )
        .unwrap_err(),
    );
    assert!(e.contains("19 classes") && e.contains("21 channels"), "{e}");
    let e = message(
        resolve(
            &classmap,
            &card(&format!(
                "num_classes = 4\n{norm}[output]\nkind = \"logits\"\n"
            )),
        )
        .unwrap_err(),
    );
    assert!(
        e.contains("logits") && e.contains("int64") && e.contains("class_map"),
        "{e}"
    );
    let e =
        message(resolve(&logits, &card(&format!("{norm}[output]\nname = \"aux\"\n"))).unwrap_err());
    assert!(e.contains("\"aux\"") && e.contains("\"out\""), "{e}");
    let e = message(resolve(&logits, &card("[input]\nmaen = [0.5]\n")).unwrap_err());
    assert!(e.contains("maen"), "an unknown field is named: {e}");
    // A class map needs no normalisation guess for its classes, but it does need a count.
    let e = message(resolve(&classmap, &card(norm)).unwrap_err());
    assert!(e.contains("the classes (classes or num_classes"), "{e}");
    assert!(
        !e.contains("normalisation"),
        "only what is missing is named: {e}"
    );
    let ok = resolve(&classmap, &card(&format!("num_classes = 4\n{norm}"))).unwrap();
    assert_eq!(ok.card.output.kind, OutputKind::ClassMap);
    assert_eq!(ok.source_of("output.kind"), Some(&CardSource::Graph));
}

#[test]
fn a_card_written_into_a_copy_describes_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "plain.onnx", 3, 2, false);
    let mut fields = CardFields::default();
    fields.input.mean = Some(vec![0.5; 3]);
    fields.input.std = Some(vec![0.25; 3]);
    fields.classes = Some(vec!["bg".into(), "fg".into()]);
    let r = resolve(&model, &CardRequest::new().fields(fields)).unwrap();
    let copy = dir.path().join("sub/described.onnx");
    write_card(&model, &copy, &r.card).unwrap();
    let again = resolve(&copy, &CardRequest::new()).unwrap();
    assert_eq!(again.card, r.card);
    for field in [
        "input.layout",
        "input.mean",
        "input.std",
        "output.name",
        "classes",
        "palette",
    ] {
        assert_eq!(
            again.source_of(field),
            Some(&CardSource::Metadata),
            "{field}"
        );
    }
    // Nothing but the metadata changed: the graph reads the same, and writing the card
    // again replaces the entry instead of adding one.
    assert_eq!(read_io(&copy).unwrap(), read_io(&model).unwrap());
    let twice = dir.path().join("twice.onnx");
    write_card(&copy, &twice, &r.card).unwrap();
    let props = read_props(&twice).unwrap();
    assert_eq!(
        props.iter().filter(|(k, _)| k == CARD_METADATA_KEY).count(),
        1
    );
    // A segtool export describes itself through its spec.
    let own = dir.path().join("own.onnx");
    std::fs::write(
        &own,
        tiny_model_bytes(&tiny_spec(2), &[[1.0; 3], [0.0; 3]], &[0.0, 0.0]),
    )
    .unwrap();
    let r = resolve(&own, &CardRequest::new()).unwrap();
    assert!(r.segtool_export);
    assert_eq!(r.card.classes, ["c0", "c1"]);
    assert_eq!(
        (r.card.input.name.as_str(), r.card.output.name.as_str()),
        ("image", "logits")
    );
    // A card that does not fit is not written.
    let mut bad = r.card.clone();
    bad.classes.push("c2".into());
    bad.palette.push([1, 2, 3]);
    bad.input.name = "input".into();
    bad.output.name = "out".into();
    let e = message(write_card(&model, &dir.path().join("bad.onnx"), &bad).unwrap_err());
    assert!(e.contains("3 classes") && e.contains("2 channels"), "{e}");
    assert!(!dir.path().join("bad.onnx").exists());
}

#[test]
fn a_hugging_face_folder_gives_size_scale_normalisation_and_class_names() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "model.onnx", 3, 3, false);
    std::fs::write(
        dir.path().join(huggingface::PREPROCESSOR_CONFIG),
        r#"{"do_normalize": true, "do_reduce_labels": false, "do_rescale": true,
            "do_resize": true, "image_mean": [0.485, 0.456, 0.406],
            "image_processor_type": "SegformerImageProcessor",
            "image_std": [0.229, 0.224, 0.225], "resample": 2,
            "rescale_factor": 0.00392156862745098, "size": {"height": 64, "width": 96}}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join(huggingface::CONFIG),
        r#"{"id2label": {"1": "person", "0": "wall", "2": "sky"}, "model_type": "segformer"}"#,
    )
    .unwrap();
    let r = resolve(&model, &CardRequest::new()).unwrap();
    assert_eq!(r.card.classes, ["wall", "person", "sky"]);
    assert_eq!(r.card.input.size, Some([64, 96]));
    assert_eq!(
        r.card.input.resize_filter,
        crate::card::ResizeFilter::Torchvision
    );
    assert_eq!(r.card.output.restore, crate::card::Restore::Stretch);
    assert!((r.card.input.scale - 1.0 / 255.0).abs() < 1e-9);
    assert!(!r.card.output.align_corners);
    assert_eq!(
        r.source_of("classes"),
        Some(&CardSource::HuggingFace(dir.path().to_path_buf()))
    );
}

/// A pixelwise model (1x1 conv) gives the same mask whether the input is padded to a
/// size divisor or not (the padding is cropped away), on tract and on ONNX Runtime with
/// its memory planned for the padded size; with `fit = "resize"` the mask still comes
/// back at the image's size.
#[test]
fn padding_and_fixed_sizes_follow_the_card() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "pixelwise.onnx", 3, 3, false);
    let img = image::RgbImage::from_fn(50, 37, |x, y| {
        image::Rgb([(x * 5) as u8, (y * 7) as u8, ((x + y) * 3) as u8])
    });
    let card = |extra: &str| {
        let f = dir.path().join(format!("card{}.toml", extra.len()));
        std::fs::write(
            &f,
            format!("num_classes = 3\n[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.25, 0.25, 0.25]\n{extra}"),
        )
        .unwrap();
        CardRequest::new().card_file(f)
    };
    let open = |request: CardRequest, kind: crate::EngineKind, fixed: bool| {
        let mut b = crate::Segmenter::builder(&model)
            .engine(kind)
            .threads(1)
            .card(request);
        if fixed {
            b = b.fixed_size(37, 50);
        }
        b.open().unwrap()
    };
    let plain = open(card(""), crate::EngineKind::Tract, false)
        .segment(&img)
        .unwrap()
        .mask;
    assert!(
        plain.iter().any(|c| Some(c) != plain.get((0, 0))),
        "several classes"
    );
    let mut padded = open(card("size_divisor = 8\n"), crate::EngineKind::Tract, false);
    assert_eq!(padded.card().card.input.size_divisor, Some(8));
    assert_eq!(padded.segment(&img).unwrap().mask, plain);
    #[cfg(feature = "ort")]
    {
        let mut ort = open(card("size_divisor = 8\n"), crate::EngineKind::Ort, true);
        assert_eq!(
            ort.segment(&img).unwrap().mask,
            plain,
            "ORT, planned for 40x56"
        );
    }
    let resized = open(
        card("size_divisor = 16\nfit = \"resize\"\n"),
        crate::EngineKind::Tract,
        false,
    )
    .segment(&img)
    .unwrap()
    .mask;
    assert_eq!(resized.dim(), (37, 50));
}

/// An mmdeploy SDK folder: the model named by deploy.json, the card from pipeline.json
/// (keep-ratio box, `to_rgb`, 0-255 normalisation, ResizeMask's classes and argmax); a
/// transform segtool does not understand is refused by name, not skipped.
#[test]
fn an_mmdeploy_folder_gives_its_network_resize_normalisation_and_classes() {
    let dir = tempfile::tempdir().unwrap();
    let sdk = dir.path().join("sdk");
    std::fs::create_dir(&sdk).unwrap();
    foreign(&sdk, "end2end.onnx", 3, 4, true);
    std::fs::write(
        sdk.join("deploy.json"),
        r#"{"version": "1.3.1", "task": "Segmentor", "models": [{"name": "da", "net": "end2end.onnx"}]}"#,
    )
    .unwrap();
    let pipeline = |transform: &str| {
        format!(
            r#"{{"pipeline": {{"tasks": [
              {{"module": "Transform", "transforms": [{{"type": "LoadImageFromFile"}},
                {{"type": "Resize", "keep_ratio": true, "size": [160, 96]}},
                {{"type": "Normalize", "mean": [123.675, 116.28, 103.53],
                  "std": [58.395, 57.12, 57.375], "to_rgb": true}}{transform},
                {{"type": "ImageToTensor", "keys": ["img"]}}]}},
              {{"module": "Net", "input_map": {{"img": "input"}}}},
              {{"module": "mmseg", "component": "ResizeMask",
                "params": {{"num_classes": 4, "with_argmax": true}}}}]}}}}"#
        )
    };
    std::fs::write(sdk.join("pipeline.json"), pipeline("")).unwrap();
    assert_eq!(model_file(&sdk).unwrap(), sdk.join("end2end.onnx"));
    let r = resolve(&sdk, &CardRequest::new()).unwrap();
    let i = &r.card.input;
    assert_eq!(i.keep_ratio, Some([160, 96]));
    assert_eq!((i.channels, i.scale), (ChannelOrder::Rgb, 1.0));
    assert_eq!(i.mean, [123.675, 116.28, 103.53]);
    assert_eq!(r.card.output.kind, OutputKind::ClassMap);
    assert_eq!(r.card.num_classes(), 4);
    assert_eq!(
        r.source_of("input.keep_ratio"),
        Some(&CardSource::Mmdeploy(sdk.clone()))
    );
    // 97x131 into (160, 96): f = min(160/131, 96/97), as mmcv and the SDK compute it.
    let g = pipeline::Geometry::of(&r.card, (97, 131));
    assert_eq!((g.content, g.tensor), ((96, 130), (96, 130)));

    std::fs::write(
        sdk.join("pipeline.json"),
        pipeline(r#", {"type": "RandomFlip", "prob": 0.5}"#),
    )
    .unwrap();
    let e = message(resolve(&sdk, &CardRequest::new()).unwrap_err());
    assert!(
        e.contains("RandomFlip") && e.contains("pipeline.json"),
        "{e}"
    );
    let e = message(model_file(dir.path()).unwrap_err());
    assert!(e.contains("deploy.json") && e.contains("model.onnx"), "{e}");
}

/// PaddleOCR's detector resize (short side up to 736, sides to the nearest multiple of
/// 32, ties to even as Python rounds) and one resize rule per card.
#[test]
fn a_minimum_short_side_rounds_like_paddleocr_and_resize_rules_are_exclusive() {
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "det.onnx", 3, 2, false);
    let card = |extra: &str| {
        let f = dir.path().join(format!("card{}.toml", extra.len()));
        std::fs::write(
            &f,
            format!(
                "num_classes = 2\n[input]\nmean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n{extra}"
            ),
        )
        .unwrap();
        resolve(&model, &CardRequest::new().card_file(f))
    };
    let c = card("min_short_side = 736\nsize_divisor = 32\nfit = \"resize\"\n").unwrap();
    // 512 wide: ratio 1.4375; 600 * 1.4375 = 862.5 -> 862 -> 26.94 -> 27 * 32 = 864.
    assert_eq!(
        pipeline::Geometry::of(&c.card, (600, 512)).tensor,
        (864, 736)
    );
    // Already large enough: only snapped to multiples (1000/32 = 31.25 -> 992).
    assert_eq!(
        pipeline::Geometry::of(&c.card, (1000, 1200)).tensor,
        (992, 1216)
    );
    // Ties go to even, as Python's round: 80/32 = 2.5 -> 64, 112/32 = 3.5 -> 128.
    let snap = card("size_divisor = 32\nfit = \"resize\"\n").unwrap();
    assert_eq!(
        pipeline::Geometry::of(&snap.card, (80, 112)).tensor,
        (64, 128)
    );
    let e = message(card("min_short_side = 736\nkeep_ratio = [100, 50]\n").unwrap_err());
    assert!(
        e.contains("input.keep_ratio") && e.contains("input.min_short_side"),
        "{e}"
    );
}

/// A key that changes preprocessing and is not understood is refused by name; a key of no
/// effect is listed with its reason; a missing key takes its own class's default.
#[test]
fn hugging_face_keys_are_applied_listed_or_refused() {
    use huggingface::keys::KeyRule;
    let dir = tempfile::tempdir().unwrap();
    let model = foreign(dir.path(), "model.onnx", 3, 3, false);
    let write = |json: &str| {
        std::fs::write(dir.path().join(huggingface::PREPROCESSOR_CONFIG), json).unwrap()
    };
    write(r#"{"image_processor_type": "SegformerImageProcessor", "do_magic_warp": 3}"#);
    let e = message(resolve(&model, &CardRequest::new()).unwrap_err());
    assert!(e.contains("do_magic_warp"), "{e}");
    // MobileViT: no do_normalize key, and its processor never normalises; BGR; bicubic
    // default; shortest edge then centre crop.
    write(
        r#"{"image_processor_type": "MobileViTImageProcessor", "do_reduce_labels": true,
              "size": {"shortest_edge": 40}, "crop_size": {"height": 32, "width": 32}}"#,
    );
    let r = resolve(&model, &CardRequest::new()).unwrap();
    let i = &r.card.input;
    assert_eq!(i.channels, ChannelOrder::Bgr);
    assert_eq!(
        (i.mean.clone(), i.std.clone()),
        (vec![0.0; 3], vec![1.0; 3])
    );
    assert_eq!(i.resample, crate::card::Resample::Bicubic);
    assert_eq!((i.shortest_edge, i.center_crop), (Some(40), Some([32, 32])));
    let report = huggingface::key_report(dir.path()).unwrap().unwrap();
    assert!(report
        .keys
        .iter()
        .any(|(k, r)| k == "do_reduce_labels" && matches!(r, KeyRule::NoEffect(_))));
    // An unknown class is refused by name, a known-but-unread one with its reason.
    write(r#"{"image_processor_type": "VideomtImageProcessor"}"#);
    let e = message(resolve(&model, &CardRequest::new()).unwrap_err());
    assert!(
        e.contains("VideomtImageProcessor") && e.contains("a video model"),
        "{e}"
    );
    write(r#"{"image_processor_type": "EomtImageProcessor", "do_split_image": true}"#);
    let e = message(resolve(&model, &CardRequest::new()).unwrap_err());
    assert!(e.contains("do_split_image"), "{e}");
}

#[test]
fn transformers_geometry_shortest_edge_dpt_crop_and_padding() {
    use crate::card::pipeline::Geometry;
    let card = |f: &dyn Fn(&mut ModelCard)| {
        let mut c = crate::card::from_spec(
            &segtool_testkit::tiny_spec(2),
            segtool_onnx::IoContract::default(),
            "input",
            "output",
        )
        .card;
        f(&mut c);
        c
    };
    // torchvision's F.resize(img, 224) on 300x400 (h x w): 224 x int(224 * 400 / 300).
    let c = card(&|c| c.input.shortest_edge = Some(224));
    assert_eq!(Geometry::of(&c, (300, 400)).resized, (224, 298));
    // get_size_with_aspect_ratio(800, 1333) of 100x1000: the long side caps, size =
    // round(1333 * 100 / 1000) = 133, the long side int(133.3 * 1000 / 100) = 1333.
    let c = card(&|c| {
        c.input.shortest_edge = Some(800);
        c.input.longest_edge = Some(1333);
        c.input.size_divisor = Some(32);
        c.input.fit = Fit::ResizeUp;
    });
    assert_eq!(Geometry::of(&c, (100, 1000)).resized, (160, 1344));
    // DPT: 256x256 keeping the aspect of 272x640 (scale 256/272 changes it least), to
    // multiples of 32: 256 x round(602.35 / 32) * 32 = 608.
    let c = card(&|c| {
        c.input.size = Some([256, 256]);
        c.input.keep_aspect_ratio = true;
        c.input.ensure_multiple_of = Some(32);
    });
    assert_eq!(Geometry::of(&c, (272, 640)).resized, (256, 608));
    // Centre padding to 32: 61 -> 64, top 1.
    let c = card(&|c| {
        c.input.size_divisor = Some(32);
        c.input.fit = Fit::PadCentre;
    });
    let g = Geometry::of(&c, (61, 97));
    assert_eq!((g.tensor, g.offset), ((64, 128), (1, 15)));
    // A centre crop larger than the image pads it with black around.
    let c = card(&|c| {
        c.input.size = Some([4, 4]);
        c.input.center_crop = Some([6, 2]);
        c.output.restore = crate::card::Restore::Stretch;
    });
    assert_eq!(Geometry::of(&c, (9, 9)).content, (6, 2));
    assert!(c.check_self().is_ok());
    let mut undo = c.clone();
    undo.output.restore = crate::card::Restore::Undo;
    assert!(undo.check_self().unwrap_err().contains("center_crop"));
}

/// Frames read in place (BGRA, padded rows) and their RGB copies give the same tensor, bit
/// for bit, under any card that takes them as they are: float32 in RGB or BGR order on
/// 0-255 or 0-1 pixels, uint8 in either order. A segtool export's card normalises
/// exactly as its spec does.
#[test]
fn frames_read_in_place_equal_their_rgb_copies_under_any_card() {
    use crate::frame::Frame;
    use crate::engines::io_contract::EngineTensor;
    use crate::{InputLayout, IoContract, PixelFormat};
    use image::{Rgb, RgbImage};
    let spec = tiny_spec(2);
    let img = RgbImage::from_fn(5, 3, |x, y| {
        Rgb([(x * 50) as u8, (y * 90 + 3) as u8, (x * y * 17 + 1) as u8])
    });
    let stride = 5 * 4 + 3;
    let mut bgra = vec![0xAB; stride * 3];
    for (x, y, p) in img.enumerate_pixels() {
        let at = y as usize * stride + x as usize * 4;
        bgra[at..at + 3].copy_from_slice(&[p.0[2], p.0[1], p.0[0]]);
    }
    let frame = Frame::new(&bgra, 5, 3, stride, PixelFormat::Bgra8).unwrap();
    let export = from_spec(&spec, IoContract::default(), "image", "logits").card;
    let mut mmseg_bgr = export.clone();
    mmseg_bgr.input.channels = ChannelOrder::Bgr;
    mmseg_bgr.input.scale = 1.0;
    mmseg_bgr.input.mean = vec![103.53, 116.28, 123.675];
    mmseg_bgr.input.std = vec![57.375, 57.12, 58.395];
    let uint8_contract = IoContract {
        input: InputLayout::NhwcU8,
        output: segtool_onnx::OutputKind::Logits,
    };
    let uint8 = from_spec(&spec, uint8_contract, "image", "logits").card;
    let mut uint8_bgr = uint8.clone();
    uint8_bgr.input.channels = ChannelOrder::Bgr;
    let images = [img.clone(), img.clone()];
    for card in [&export, &mmseg_bgr, &uint8, &uint8_bgr] {
        assert!(pipeline::reads_frames_in_place(card));
        let geometry = pipeline::Geometry::of(card, (3, 5));
        assert!(geometry.is_identity());
        let copied = pipeline::prepare_at(&images, card, geometry).unwrap();
        let read = pipeline::prepare_frames(&[frame, frame], card).unwrap();
        match (copied, read) {
            (EngineTensor::NchwF32(a), EngineTensor::NchwF32(b)) => assert_eq!(a, b),
            (EngineTensor::NhwcU8(a), EngineTensor::NhwcU8(b)) => assert_eq!(a, b),
            other => panic!("layouts differ: {other:?}"),
        }
    }
    let (EngineTensor::NchwF32(x), _) = pipeline::prepare(&images, &export).unwrap() else {
        panic!("float input")
    };
    assert_eq!(
        x,
        crate::normalise::normalise_batch(&images, &spec).unwrap()
    );
    // BGR order: the tensor's channel 0 is the image's blue.
    let (EngineTensor::NchwF32(b), _) = pipeline::prepare(&images, &mmseg_bgr).unwrap() else {
        panic!("float input")
    };
    let blue = f32::from(img.get_pixel(1, 1).0[2]);
    assert_eq!(b[[0, 0, 1, 1]], (blue - 103.53) / 57.375);
}

/// A fixed-size segtool export's card resizes to the graph's size, said to come from the
/// graph; a dynamic one's takes images as they are.
#[test]
fn a_segtool_exports_card_takes_its_fixed_graph_size_as_its_resize() {
    let dir = tempfile::tempdir().unwrap();
    let spec = tiny_spec(3);
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    let plain = tiny_model_bytes(&spec, &w, &[0.0; 3]);
    let dynamic = dir.path().join("dynamic.onnx");
    std::fs::write(&dynamic, &plain).unwrap();
    let fixed = dir.path().join("fixed.onnx");
    std::fs::write(&fixed, segtool_testkit::with_fixed_size(&plain, 3, 6, 8)).unwrap();
    let r = resolve(&dynamic, &CardRequest::new()).unwrap();
    assert_eq!(r.card.input.size, None);
    assert!(pipeline::Geometry::of(&r.card, (15, 20)).is_identity());
    let r = resolve(&fixed, &CardRequest::new()).unwrap();
    assert!(r.segtool_export);
    assert_eq!(r.card.input.size, Some([6, 8]));
    assert_eq!(r.source_of("input.size"), Some(&CardSource::Graph));
    assert_eq!(r.source_of("input.mean"), Some(&CardSource::SegtoolSpec));
    let (i, g) = (&r.card.input, pipeline::Geometry::of(&r.card, (15, 20)));
    assert_eq!(
        (i.resize_filter, i.resample),
        (ResizeFilter::Opencv, Resample::Bilinear)
    );
    assert_eq!((g.resized, g.tensor), ((6, 8), (6, 8)));
    assert!(pipeline::Geometry::of(&r.card, (6, 8)).is_identity());
}
