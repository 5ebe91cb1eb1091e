//! The C API called from Rust, in-process: error reporting per thread, results equal to
//! `Segmenter`'s, concurrent use of one segmenter, every option reaching the engine.
//! tract, but for the options (ONNX Runtime is loaded once per process, from
//! `ORT_DYLIB_PATH`; tests/it/c_api.rs covers its other paths in a child process).

use std::ffi::{CStr, CString};
use std::ptr;

use image::{Rgb, RgbImage};
use segtool::*;
use segtool_runtime::openvino::{PerformanceHint, Precision};
use segtool_runtime::{EngineKind, Segmenter, SegmenterOptions};
use segtool_testkit::{tiny_model_bytes, tiny_spec};

struct Fixture {
    _dir: tempfile::TempDir,
    path: CString,
    seg: *mut segtool_segmenter,
}

// The handle is documented as usable from any thread.
unsafe impl Send for Fixture {}
unsafe impl Sync for Fixture {}

impl Drop for Fixture {
    fn drop(&mut self) {
        unsafe { segtool_close(self.seg) };
    }
}

fn open_tract() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.onnx");
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    Fixture {
        _dir: dir,
        path,
        seg,
    }
}

fn last_error() -> String {
    unsafe { CStr::from_ptr(segtool_last_error()) }
        .to_str()
        .unwrap()
        .to_owned()
}

fn image() -> RgbImage {
    RgbImage::from_fn(6, 4, |x, y| {
        Rgb([(x * 40) as u8, (y * 60) as u8, ((x + y) * 25) as u8])
    })
}

/// Runs the C API on `img` with rows padded to `stride` bytes.
fn segment(seg: *mut segtool_segmenter, img: &RgbImage, stride: u32) -> Vec<u8> {
    let (w, h) = img.dimensions();
    let row = w as usize * 3;
    let stride_len = if stride == 0 { row } else { stride as usize };
    let mut buf = vec![0x5Au8; stride_len * h as usize];
    for y in 0..h as usize {
        buf[y * stride_len..y * stride_len + row]
            .copy_from_slice(&img.as_raw()[y * row..(y + 1) * row]);
    }
    let mut res = ptr::null_mut();
    let st = unsafe { segtool_segment(seg, buf.as_ptr(), w, h, stride, &mut res) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    unsafe {
        assert_eq!(
            (segtool_result_width(res), segtool_result_height(res)),
            (w, h)
        );
        let map =
            std::slice::from_raw_parts(segtool_result_class_map(res), (w * h) as usize).to_vec();
        segtool_result_free(res);
        map
    }
}

#[test]
fn results_equal_segmenter_for_packed_and_padded_rows() {
    let f = open_tract();
    let img = image();
    let path = f.path.to_str().unwrap();
    let expected: Vec<u8> = Segmenter::builder(path)
        .engine(EngineKind::Tract)
        .open()
        .unwrap()
        .segment(&img)
        .unwrap()
        .mask
        .to_le_bytes();
    assert_eq!(segment(f.seg, &img, 0), expected);
    assert_eq!(segment(f.seg, &img, 6 * 3), expected);
    assert_eq!(segment(f.seg, &img, 6 * 3 + 7), expected);
    assert!(
        expected.iter().any(|&c| c != expected[0]),
        "a non-trivial map"
    );
}

#[test]
fn model_information() {
    let f = open_tract();
    unsafe {
        assert_eq!(segtool_num_classes(f.seg), 3);
        assert_eq!(
            CStr::from_ptr(segtool_class_name(f.seg, 2)).to_str(),
            Ok("c2")
        );
        let mut rgb = [9u8; 3];
        assert_eq!(
            segtool_palette(f.seg, 2, rgb.as_mut_ptr()),
            segtool_status::SEGTOOL_OK
        );
        assert_eq!(rgb, tiny_spec(3).palette[2]);
        assert_eq!(CStr::from_ptr(segtool_provider(f.seg)).to_str(), Ok("cpu"));
        assert_eq!(
            CStr::from_ptr(segtool_engine_name(f.seg)).to_str(),
            Ok("tract")
        );
        assert!(segtool_fallback_reason(f.seg).is_null());
        assert_eq!(
            CStr::from_ptr(segtool_version()).to_str(),
            Ok(env!("CARGO_PKG_VERSION"))
        );
    }
}

#[test]
fn last_error_is_per_thread_and_cleared_by_the_next_call() {
    let missing = CString::new("/nowhere/absent.onnx").unwrap();
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(missing.as_ptr(), ptr::null(), &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_MODEL_NOT_FOUND);
    assert!(seg.is_null());
    assert!(
        last_error().contains("/nowhere/absent.onnx"),
        "{}",
        last_error()
    );
    // Another thread has its own (empty) message.
    let other = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(other, "");
    // Still there on this thread, until the next call.
    assert!(last_error().contains("absent.onnx"));
    assert_eq!(unsafe { segtool_num_classes(ptr::null()) }, 0);
    assert!(
        last_error().contains("segmenter must not be NULL"),
        "{}",
        last_error()
    );
    unsafe { segtool_close(ptr::null_mut()) };
    assert_eq!(last_error(), "");
}

#[test]
fn bad_option_strings_are_errors() {
    let f = open_tract();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    let bad_utf8 = [0xffu8, 0xfe, 0];
    opts.providers = bad_utf8.as_ptr().cast();
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(f.path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("UTF-8"), "{}", last_error());
    // Non-strict: tract ignores a GPU request but says so through the provider.
    let cuda = CString::new(" cuda:0 , cpu ").unwrap();
    opts.providers = cuda.as_ptr();
    let st = unsafe { segtool_open(f.path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    assert_eq!(
        unsafe { CStr::from_ptr(segtool_provider(seg)) }.to_str(),
        Ok("cpu")
    );
    unsafe { segtool_close(seg) };
    opts.strict = true;
    let st = unsafe { segtool_open(f.path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_PROVIDER_UNAVAILABLE);
    assert!(last_error().contains("cuda:0"), "{}", last_error());
}

#[test]
fn one_segmenter_shared_by_threads() {
    let f = open_tract();
    let img = image();
    let expected = segment(f.seg, &img, 0);
    let f = &f;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..4)
            .map(|i| {
                let img = img.clone();
                s.spawn(move || {
                    for _ in 0..3 {
                        assert_eq!(segment(f.seg, &img, 18 + i), segment(f.seg, &img, 0));
                        assert_eq!(unsafe { segtool_num_classes(f.seg) }, 3);
                    }
                    segment(f.seg, &img, 0)
                })
            })
            .collect();
        for w in workers {
            assert_eq!(w.join().unwrap(), expected);
        }
    });
}

/// A Hugging Face folder written by transformers' own `save_pretrained`
/// (tests/reference/hf_processors_ref.py): Mask2Former's mask-classification head, opened
/// by folder through `segtool_open`, with class maps equal to `Segmenter`'s on the same
/// folder. Needs the project venv's python (`SEGTOOL_PYTHON`): a missing reference
/// without it (`hugging_face_folder` reports it: a failure under `make test`, else a
/// counted skip).
#[test]
fn a_hugging_face_mask_classification_folder_opens_by_folder() {
    let dir = tempfile::tempdir().unwrap();
    let Some(folder) = segtool_testkit::hugging_face_folder("mask2former", dir.path()) else {
        return;
    };
    let path = CString::new(folder.to_str().unwrap()).unwrap();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    opts.threads = 1;
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    assert_eq!(unsafe { segtool_num_classes(seg) }, 6);
    let mut rust = Segmenter::builder(&folder)
        .engine(segtool_runtime::EngineKind::Tract)
        .threads(1)
        .open()
        .unwrap();
    for name in ["wide", "small"] {
        let img = image::open(dir.path().join(format!("images/{name}.png")))
            .unwrap()
            .to_rgb8();
        let expected: Vec<u8> = rust.segment(&img).unwrap().mask.to_le_bytes();
        assert_eq!(segment(seg, &img, 0), expected, "{name}");
    }
    unsafe { segtool_close(seg) };
}

/// What `segtool_options_json` reports of `seg`.
fn reported(seg: *const segtool_segmenter) -> SegmenterOptions {
    let json = unsafe { CStr::from_ptr(segtool_options_json(seg)) };
    serde_json::from_str(json.to_str().unwrap()).unwrap()
}

/// Opens `path` with `opts`; `None` (a missing reference) when the engine's library
/// cannot be loaded.
fn open_with(path: &CString, opts: &segtool_options) -> Option<*mut segtool_segmenter> {
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(path.as_ptr(), opts, &mut seg) };
    if st == segtool_status::SEGTOOL_ERR_BACKEND_UNAVAILABLE {
        segtool_testkit::missing_reference(
            last_error(),
            "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH, the openvino wheel)",
        );
        return None;
    }
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    Some(seg)
}

/// Each of the runtime's options (`SegmenterOptions::NAMES`), set through its
/// `segtool_options` field off its default, is what `segtool_options_json` reports: what
/// the engine was opened with. 0 threads and streams report `null` (the engine's own).
#[test]
fn every_option_arrives_and_is_reported() {
    let f = open_tract();
    let defaults = SegmenterOptions {
        engine: EngineKind::Tract,
        ..SegmenterOptions::default()
    };
    assert_eq!(reported(f.seg), defaults);
    let json = unsafe { CStr::from_ptr(segtool_options_json(f.seg)) };
    let keys: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(json.to_str().unwrap()).unwrap();
    assert_eq!(keys.len(), SegmenterOptions::NAMES.len(), "{keys:?}");
    assert!(
        keys["threads"].is_null() && keys["streams"].is_null(),
        "{keys:?}"
    );
    assert!(unsafe { segtool_options_json(ptr::null()) }.is_null());

    // card, strict and logits with tract (a model from elsewhere needs its card).
    let dir = tempfile::tempdir().unwrap();
    let (foreign, card) = segtool_testkit::foreign_model_with_card(dir.path()).unwrap();
    let card_c = CString::new(card.to_str().unwrap()).unwrap();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    opts.card = card_c.as_ptr();
    opts.strict = true;
    opts.logits = true;
    opts.threads = 0;
    let foreign_c = CString::new(foreign.to_str().unwrap()).unwrap();
    let seg = open_with(&foreign_c, &opts).unwrap();
    let want = SegmenterOptions {
        engine: EngineKind::Tract,
        card: Some(card.clone()),
        strict: true,
        logits: true,
        ..SegmenterOptions::default()
    };
    assert_eq!(reported(seg), want);
    // logits: every result carries them, as the runtime computes them.
    let img = image();
    let mut rust = Segmenter::builder(&foreign)
        .options(&want)
        .unwrap()
        .open()
        .unwrap();
    let expected = rust.segment(&img).unwrap().logits.unwrap();
    let mut res = ptr::null_mut();
    let st = unsafe { segtool_segment(seg, img.as_raw().as_ptr(), 6, 4, 0, &mut res) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    let (mut c, mut h, mut w) = (0, 0, 0);
    let logits = unsafe { segtool_result_logits(res, &mut c, &mut h, &mut w) };
    assert!(!logits.is_null());
    let (ec, eh, ew) = expected.dim();
    assert_eq!((c, h, w), (ec as u32, eh as u32, ew as u32));
    let got = unsafe { std::slice::from_raw_parts(logits, (c * h * w) as usize) };
    assert_eq!(got, expected.iter().copied().collect::<Vec<f32>>());
    unsafe { segtool_result_free(res) };
    unsafe { segtool_close(seg) };
    // Without the option, none.
    let mut res = ptr::null_mut();
    let st = unsafe { segtool_segment(f.seg, img.as_raw().as_ptr(), 6, 4, 0, &mut res) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    let mut c = 9;
    assert!(
        unsafe { segtool_result_logits(res, &mut c, ptr::null_mut(), ptr::null_mut()) }.is_null()
    );
    assert_eq!(c, 0);
    unsafe { segtool_result_free(res) };

    // OpenVINO's: device, precision, hint, streams, threads.
    let (cpu, bf16, throughput) = (c"CPU", c"bf16", c"throughput");
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_OPENVINO;
    opts.device = cpu.as_ptr();
    opts.precision = bf16.as_ptr();
    opts.hint = throughput.as_ptr();
    opts.streams = 2;
    opts.threads = 1;
    opts.strict = true;
    if let Some(seg) = open_with(&f.path, &opts) {
        let want = SegmenterOptions {
            engine: EngineKind::OpenVino,
            precision: Precision::Bf16,
            hint: PerformanceHint::Throughput,
            streams: Some(2),
            threads: Some(1),
            strict: true,
            ..SegmenterOptions::default()
        };
        assert_eq!(reported(seg), want);
        unsafe { segtool_close(seg) };
    }

    // ONNX Runtime's: providers (CUDA, absent here, falls back: not strict), fixed_size.
    let providers = c"cuda:0,cpu";
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_ORT;
    opts.providers = providers.as_ptr();
    opts.threads = 1;
    opts.fixed_height = 4;
    opts.fixed_width = 6;
    opts.logits = true;
    if let Some(seg) = open_with(&f.path, &opts) {
        let want = SegmenterOptions {
            engine: EngineKind::Ort,
            providers: vec!["cuda:0".into(), "cpu".into()],
            threads: Some(1),
            fixed_size: Some([4, 6]),
            logits: true,
            ..SegmenterOptions::default()
        };
        assert_eq!(reported(seg), want);
        unsafe { segtool_close(seg) };
    }

    // A value that is not one is refused, naming the option.
    let fastest = c"fastest";
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    opts.hint = fastest.as_ptr();
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(f.path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_ERR_INVALID_ARGUMENT);
    assert!(last_error().contains("option hint"), "{}", last_error());
}

/// A 300-class model through the C ABI: `segtool_result_bits` says 16, the 8-bit map is
/// NULL, and `segtool_result_class_map16` holds the ids the model's colour grid puts
/// there (above 255 too); an 8-bit result reads the same ids widened.
#[test]
fn more_than_256_classes_give_a_16_bit_class_map() {
    use segtool_testkit::{many_classes_model_bytes, many_classes_pixel};
    let classes = 300;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("grid300.onnx");
    std::fs::write(&path, many_classes_model_bytes(classes)).unwrap();
    let path = CString::new(path.to_str().unwrap()).unwrap();
    let mut opts = segtool_options_default();
    opts.engine = SEGTOOL_ENGINE_TRACT;
    let mut seg = ptr::null_mut();
    let st = unsafe { segtool_open(path.as_ptr(), &opts, &mut seg) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    assert_eq!(unsafe { segtool_num_classes(seg) }, classes as u32);
    let (w, h) = (23u32, 13u32);
    let want: Vec<u16> = (0..w * h)
        .map(|i| ((i * 7 + 11) % classes as u32) as u16)
        .collect();
    assert!(want.iter().any(|&c| c > 255));
    let img = RgbImage::from_fn(w, h, |x, y| {
        Rgb(many_classes_pixel(
            want[(y * w + x) as usize].into(),
            classes,
        ))
    });
    let mut res = ptr::null_mut();
    let st = unsafe { segtool_segment(seg, img.as_raw().as_ptr(), w, h, 0, &mut res) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    unsafe {
        assert_eq!(segtool_result_bits(res), 16);
        assert!(segtool_result_class_map(res).is_null());
        let ids = std::slice::from_raw_parts(segtool_result_class_map16(res), (w * h) as usize);
        assert_eq!(ids, &want[..]);
        segtool_result_free(res);
        segtool_close(seg);
        assert_eq!(segtool_result_bits(ptr::null()), 0);
        assert!(segtool_result_class_map16(ptr::null()).is_null());
    }
    // 8 bits: the same ids through either accessor.
    let f = open_tract();
    let img = image();
    let (w, h) = img.dimensions();
    let mut res = ptr::null_mut();
    let st = unsafe { segtool_segment(f.seg, img.as_raw().as_ptr(), w, h, 0, &mut res) };
    assert_eq!(st, segtool_status::SEGTOOL_OK, "{}", last_error());
    unsafe {
        assert_eq!(segtool_result_bits(res), 8);
        let n = (w * h) as usize;
        let narrow = std::slice::from_raw_parts(segtool_result_class_map(res), n);
        let wide = std::slice::from_raw_parts(segtool_result_class_map16(res), n);
        assert!(narrow.iter().zip(wide).all(|(&a, &b)| u16::from(a) == b));
        segtool_result_free(res);
    }
}
