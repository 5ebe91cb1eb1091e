//! Models from elsewhere in the folders and files their tools write, served by segtool
//! and checked against those tools themselves:
//! - an mmdeploy SDK folder for mmsegmentation's DANet, written by mmdeploy 1.3.1's own
//!   converter, against `mmdeploy_runtime.Segmentor` (tests/reference/mmdeploy_ref.py);
//! - a Hugging Face SegFormer folder (`model.onnx`, `config.json`,
//!   `preprocessor_config.json`) against `SegformerImageProcessor` and its
//!   `post_process_semantic_segmentation` (tests/reference/segformer_ref.py), also from
//!   its Triton repository and as raw frames through the batch server and `--live`;
//! - PP-OCRv4's text detector as the PyPI package rapidocr-onnxruntime ships it, with a
//!   card, against rapidocr's own preprocessing and threshold on a real photo
//!   (tests/reference/rapidocr_ref.py), then calibrated to INT8 through its card.
//!
//! Masks must equal the reference's except at near-ties (top-two logit gap, or distance of
//! the probability to the threshold, below 1e-3; float32 noise: the references run
//! onnxruntime-Python, and normalise with their own float order), and on at most 0.1% of
//! the pixels even there. Each folder runs on ONNX Runtime and on tract.

use crate::common;

use std::path::{Path, PathBuf};

use common::{npy, p, segtool};

/// `segtool infer` of `model` on `dir/images` on `engine`, against `dir/ref`.
fn serve_and_compare(dir: &Path, model: &Path, engine: &str, extra: &[&str], what: &str) {
    let out = dir.join(format!("out-{}-{engine}", what.replace(' ', "_")));
    common::serve_and_compare(
        &dir.join("images"),
        &dir.join("ref"),
        &out,
        model,
        engine,
        extra,
        what,
    );
}

#[test]
fn mmdeploy_sdk_folder_matches_mmdeploy_runtime_segmentor() {
    let (dir, report) = common::reference("mmdeploy_ref.py", "foreign_mmdeploy");
    let sdk = dir.join("danet_sdk");
    // The card comes from the folder: keep-ratio resize, BGR -> RGB, 0-255 mean and std,
    // the class map the graph's ArgMax gives and ResizeMask's class count.
    let shown = segtool(&["card", p(&sdk), "--show"]);
    let table = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    for line in [
        "input.keep_ratio",
        "output.kind            class_map",
        "mmdeploy SDK folder",
    ] {
        assert!(table.contains(line), "{line} not in:\n{table}");
    }
    let resized = &report["images"]["a"]["resized"];
    assert_eq!(resized, &serde_json::json!([96, 130]), "{report}");
    for engine in ["ort", "tract"] {
        serve_and_compare(&dir, &sdk, engine, &[], "mmdeploy DANet");
    }
}

#[test]
fn hugging_face_segformer_folder_matches_its_image_processor_and_post_processing() {
    let (dir, report) = common::reference("segformer_ref.py", "foreign_segformer");
    assert_eq!(report["backend"], "torchvision", "{report}");
    let folder = dir.join("segformer");
    for engine in ["ort", "tract"] {
        serve_and_compare(&dir, &folder, engine, &[], "SegFormer");
    }
    // A Triton repository of the folder: its model carries the card, so that the served
    // file alone says how to feed it (here: segtool itself reads it back).
    let triton = dir.join("triton");
    common::ok(segtool(&["card", p(&folder), "--triton", p(&triton)]));
    let config = std::fs::read_to_string(triton.join("segformer/config.pbtxt")).unwrap();
    assert!(
        config.contains("name: \"pixel_values\"") && config.contains("name: \"logits\""),
        "{config}"
    );
    let served = triton.join("segformer/1/model.onnx");
    serve_and_compare(
        &dir,
        &served,
        "ort",
        &[],
        "SegFormer from its Triton repository",
    );

    // Raw frames through the batch server (two sessions) and the newest-frame stream: the
    // card drives them too, with the reference's masks.
    let img = image::open(dir.join("images/up.png")).unwrap().to_rgb8();
    let (w, h) = img.dimensions();
    let (_, want) = npy(&dir.join("ref/up.npy"));
    let (_, margin) = npy(&dir.join("ref/up.margin.npy"));
    let frames: Vec<u8> = (0..3).flat_map(|_| img.as_raw().clone()).collect();
    let size = format!("{w}x{h}");
    for mode in [&["--cpu-sessions", "2"][..], &["--live"][..]] {
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_segtool"))
            .args(["infer", "--model", p(&folder), "--raw", &size, "--out", "-"])
            .args(mode)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &frames).unwrap();
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{mode:?}: {stderr}");
        // --live prefixes each class map with its frame index (8 bytes).
        let record = (w * h) as usize + if mode[0] == "--live" { 8 } else { 0 };
        assert!(
            !out.stdout.is_empty() && out.stdout.len() % record == 0,
            "{mode:?}"
        );
        for map in out.stdout.chunks(record) {
            let mask = &map[record - (w * h) as usize..];
            common::assert_masks_match(mask, &want, &margin, &format!("{mode:?}"));
        }
    }
}

#[test]
fn rapidocr_text_detector_with_a_card_matches_rapidocr_and_calibrates_through_it() {
    let (dir, report) = common::reference("rapidocr_ref.py", "foreign_rapidocr");
    let images = dir.join("images");
    let image = &report["images"]["grace_hopper"];
    assert_eq!(
        image["resized_hw"],
        serde_json::json!([864, 736]),
        "{report}"
    );
    let model = dir.join("ppocr_det.onnx");
    // The card, as a sidecar: PaddleOCR's detector preprocessing and DBNet's threshold.
    std::fs::write(
        model.with_extension("segtool.toml"),
        "classes = [\"background\", \"text\"]\n\
         [input]\nchannels = \"bgr\"\nscale = 0.00392156862745098\n\
         mean = [0.5, 0.5, 0.5]\nstd = [0.5, 0.5, 0.5]\n\
         min_short_side = 736\nsize_divisor = 32\nfit = \"resize\"\n\
         [output]\nkind = \"binary\"\nthreshold = 0.3\n",
    )
    .unwrap();
    for engine in ["ort", "tract"] {
        serve_and_compare(&dir, &model, engine, &[], "PP-OCRv4 det");
    }

    // INT8 of the foreign model: images prepared by its card, the card written into the
    // INT8 file, which then opens by itself and agrees with the float model.
    let int8 = dir.join("int8").join("ppocr_det.int8.onnx");
    std::fs::create_dir_all(int8.parent().unwrap()).unwrap();
    let text = common::ok(segtool(&[
        "calibrate",
        "--model",
        p(&model),
        "--images",
        p(&images),
        "--out",
        p(&int8),
        "--method",
        "minmax",
        "--samples",
        "1",
        "--report-samples",
        "1",
        "--latency-runs",
        "0",
        "--quiet",
    ]));
    assert!(text.contains("wrote"), "{text}");
    // Its weights are Constant nodes (Paddle2ONNX): quantised all the same.
    assert!(text.contains("62 weights per tensor"), "{text}");
    let out = dir.join("out-int8");
    common::ok(segtool(&[
        "infer",
        "--model",
        p(&int8),
        "--input",
        p(&images),
        "--out",
        p(&out),
        "--labels",
        "--no-overlay",
        "--quiet",
    ]));
    let ours = image::open(out.join("grace_hopper_labels.png"))
        .unwrap()
        .to_luma8();
    let (_, want) = npy(&dir.join("ref/grace_hopper.npy"));
    let same = ours
        .as_raw()
        .iter()
        .zip(&want)
        .filter(|(a, b)| f32::from(**a) == **b)
        .count();
    let agreement = same as f64 / want.len() as f64;
    eprintln!("INT8 PP-OCRv4 det: {agreement:.4} of pixels agree with rapidocr's fp32 mask");
    assert!(agreement > 0.95, "INT8 agreement {agreement}");
    // compare, through the card: per-layer differences of the two files.
    let compared = segtool(&[
        "compare",
        p(&model),
        p(&int8),
        "--images",
        p(&images),
        "--samples",
        "1",
        "--min-snr",
        "0",
    ]);
    assert!(
        compared.status.success(),
        "{}",
        String::from_utf8_lossy(&compared.stderr)
    );
}

/// Every transformers 5 image processor segtool reads, each in a folder written by
/// transformers' own `save_pretrained` with its canonical checkpoint's configuration
/// (tests/reference/hf_processors_ref.py: a small random model per folder, logits O(1-10),
/// four real photos cut from bikes.mp4 at several aspect ratios, some smaller and some
/// larger than the model's size), against the processor + onnxruntime +
/// `post_process_semantic_segmentation` pipeline: equal on every pixel but near-ties
/// (margin below 1e-3), at most 0.1% of each photo. ONNX Runtime for every folder; tract
/// too for the SegFormer (Pillow backend), DPT (aspect kept, multiple of 32), MaskFormer
/// and Mask2Former folders (a new photo size is a new tract plan: the appended head must
/// survive it).
#[test]
fn hugging_face_processors_match_transformers() {
    let (dir, report) = common::reference("hf_processors_ref.py", "foreign_hf_processors");
    let cases = report["cases"].as_object().expect("cases");
    for case in [
        "segformer",
        "upernet",
        "mobilevit",
        "mobilevitv2",
        "dpt",
        "dpt_keep",
        "dpt_pad",
        "beit",
        "beit_crop",
        "data2vec",
        "mobilenetv2",
        "maskformer",
        "mask2former",
        "oneformer",
        "detr",
        "eomt",
        "sapiens2",
        "tipsv2_dpt",
        "segformer_pil",
        "beit_pil",
    ] {
        assert!(cases.contains_key(case), "{case} missing from {report}");
    }
    let (mut differ, mut pixels) = (0, 0);
    for case in cases.keys() {
        let folder = dir.join(case);
        if case.ends_with("_pil") {
            // transformers' Pillow backend (backend="pil" in code; the folder cannot say
            // it): a sidecar card names Pillow's resize.
            std::fs::write(
                folder.join("model.segtool.toml"),
                "[input]\nresize_filter = \"pillow\"\n",
            )
            .unwrap();
        }
        let engines: &[&str] = match case.as_str() {
            "segformer_pil" | "dpt_keep" | "maskformer" | "mask2former" => &["ort", "tract"],
            _ => &["ort"],
        };
        for engine in engines {
            let (d, n) = common::serve_and_compare(
                &dir.join("images"),
                &folder.join("ref"),
                &dir.join(format!("out-{case}-{engine}")),
                &folder,
                engine,
                &[],
                case,
            );
            eprintln!("{case} on {engine}: {d} of {n} pixels differ (near-ties)");
            (differ, pixels) = (differ + d, pixels + n);
        }
    }
    eprintln!("all folders: {differ} of {pixels} pixels differ (near-ties)");
    // INT8 of one processor's folder (BEiT's bicubic resize and centre crop) and of a
    // mask-classification head (Mask2Former's, calibrated with the head appended):
    // calibrated through the folder's card, which the INT8 file then carries, agreeing
    // with transformers' fp32 masks. A random tiny net has many near-ties, which INT8
    // flips (0.65-0.81 for BEiT, 0.94-0.98 for Mask2Former here); six classes put chance
    // near 0.17. The check is that the card travels and serves.
    int8_of_folder(&dir, "mask2former", 0.9);
    let int8 = int8_of_folder(&dir, "beit_crop", 0.6);
    let out = segtool(&["card", p(&int8), "--show"]);
    let shown = String::from_utf8_lossy(&out.stdout).into_owned() + &common::ok(out);
    for line in ["input.center_crop", "[224,224]", "bicubic", "stretch"] {
        assert!(
            shown.contains(line),
            "{line} not in the INT8 file's card:\n{shown}"
        );
    }
    // A key that changes preprocessing and that segtool does not know is refused by name,
    // and so are EoMT's sliding crops (the semantic checkpoints' do_split_image).
    refused_by_name(&dir, "segformer", "do_warp_to_polar");
    refused_by_name(&dir, "eomt", "do_split_image");
}

/// A copy of the folder `dir/case` whose `preprocessor_config.json` sets `key` to true:
/// `segtool card --show` refuses it, naming the key.
fn refused_by_name(dir: &Path, case: &str, key: &str) {
    let copy = dir.join(format!("{case}_{key}"));
    std::fs::create_dir_all(&copy).unwrap();
    for file in ["model.onnx", "config.json"] {
        std::fs::copy(dir.join(case).join(file), copy.join(file)).unwrap();
    }
    let pre = std::fs::read_to_string(dir.join(case).join("preprocessor_config.json")).unwrap();
    let mut pre: serde_json::Value = serde_json::from_str(&pre).unwrap();
    pre[key] = serde_json::json!(true);
    std::fs::write(copy.join("preprocessor_config.json"), pre.to_string()).unwrap();
    let out = segtool(&["card", p(&copy), "--show"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains(key),
        "{case} with {key}: {stderr}"
    );
}

/// Calibrates `dir/case/model.onnx` (4 of the photos), compares the two files, serves the
/// INT8 file on the photos and checks that each mask agrees with transformers' fp32 mask
/// on more than `min` of its pixels. Returns the INT8 file.
fn int8_of_folder(dir: &Path, case: &str, min: f64) -> PathBuf {
    let model = dir.join(case).join("model.onnx");
    let int8 = dir.join(format!("int8/{case}.int8.onnx"));
    std::fs::create_dir_all(int8.parent().unwrap()).unwrap();
    common::ok(segtool(&[
        "calibrate",
        "--model",
        p(&model),
        "--images",
        p(&dir.join("images")),
        "--out",
        p(&int8),
        "--method",
        "minmax",
        "--samples",
        "4",
        "--report-samples",
        "1",
        "--latency-runs",
        "0",
        "--quiet",
    ]));
    // `compare` reads the fp32 folder as calibration did (a mask head through its copy).
    let compared = segtool(&[
        "compare",
        p(&model),
        p(&int8),
        "--images",
        p(&dir.join("images")),
        "--samples",
        "1",
        "--min-cosine",
        "0.5",
    ]);
    let table = String::from_utf8_lossy(&compared.stdout);
    assert!(
        compared.status.success() && table.contains("ONNX Runtime CPU kernels"),
        "{table}{}",
        String::from_utf8_lossy(&compared.stderr)
    );
    let out = dir.join(format!("out-int8-{case}"));
    common::ok(segtool(&[
        "infer",
        "--model",
        p(&int8),
        "--input",
        p(&dir.join("images")),
        "--out",
        p(&out),
        "--labels",
        "--no-overlay",
        "--quiet",
    ]));
    for photo in ["wide", "tall", "small", "square"] {
        let ours = image::open(out.join(format!("{photo}_labels.png")))
            .unwrap()
            .to_luma8();
        let (_, want) = npy(&dir.join(format!("{case}/ref/{photo}.npy")));
        let same = ours
            .as_raw()
            .iter()
            .zip(&want)
            .filter(|(a, b)| f32::from(**a) == **b)
            .count();
        let agreement = same as f64 / want.len() as f64;
        eprintln!(
            "INT8 {case} folder, {photo}: {agreement:.4} of pixels agree with transformers' fp32"
        );
        assert!(
            agreement > min,
            "INT8 {case}: agreement {agreement} on {photo}"
        );
    }
    int8
}

/// Every key that each supported processor's `to_dict()` writes in transformers 5.25
/// (tests/reference/hf_processor_keys.py) is in exactly one of segtool's lists: applied,
/// no effect (with a reason), refused (with the card field that replaces it); every other
/// class transformers maps for segmentation is listed as not read, with why.
#[test]
fn every_transformers_processor_key_has_exactly_one_rule() {
    use segtool_runtime::card::huggingface::keys::{
        rule, KeyRule, Processor, APPLIED, NOT_READ, NO_EFFECT, REFUSED,
    };
    let lists: Vec<&str> = APPLIED
        .iter()
        .copied()
        .chain(NO_EFFECT.iter().map(|(k, _)| *k))
        .chain(REFUSED.iter().map(|(k, _)| *k))
        .collect();
    for key in &lists {
        let n = lists.iter().filter(|k| *k == key).count();
        assert_eq!(n, 1, "{key} is in {n} lists");
    }
    let report = common::reference_json("hf_processor_keys.py", &[]);
    let classes = report["processors"].as_object().expect("processors");
    assert!(classes.len() >= 20, "{classes:?}");
    for (class, info) in classes {
        let Some((processor, _)) = Processor::from_class(class) else {
            let base = class.trim_end_matches("Pil");
            assert!(
                NOT_READ.iter().any(|(c, _)| *c == base),
                "{class} is neither read nor listed as not read"
            );
            continue;
        };
        let keys = info["keys"].as_array().expect("keys");
        for key in keys.iter().map(|k| k.as_str().unwrap()) {
            assert!(lists.contains(&key), "{class}: key {key} is in no list");
            assert!(
                !matches!(rule(processor, key), KeyRule::Refused(_)),
                "{class}: its own key {key} is refused"
            );
        }
    }
}
