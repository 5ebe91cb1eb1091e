//! Calibration end to end on the runtime's tiny test model, and the entropy calibrator
//! against the independent numpy reference (tests/reference/calibration_ref.py).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use prost::Message;
use segtool_calibration::stats::Histogram;
use segtool_calibration::{calibrate, calibrators, trt_cache, CalibrationOptions, Method};
use segtool_onnx::proto::ModelProto;

fn lcg(seed: u64) -> impl FnMut() -> f64 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
}

fn gaussian(n: usize, seed: u64) -> Vec<f32> {
    let mut next = lcg(seed);
    (0..n)
        .map(|_| {
            let (u, v) = (next(), next());
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn reference_bins(h: &Histogram) -> Option<usize> {
    let py = std::env::var("SEGTOOL_PYTHON").unwrap_or_else(|_| "python3".into());
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/calibration_ref.py");
    let mut child = match Command::new(&py)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            segtool_testkit::missing_reference(
                format_args!("python with numpy for the reference comparison ({py}: {e})"),
                "source \"$(bash scripts/setup.sh)\" (SEGTOOL_PYTHON: the project venv's)",
            );
            return None;
        }
    };
    let req = serde_json::json!({"counts": h.counts, "max": h.max});
    child
        .stdin
        .take()
        .unwrap()
        .write_all(req.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "reference failed (numpy missing? run scripts/setup.sh)"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Some(v["bins"].as_u64().unwrap() as usize)
}

#[test]
fn entropy_threshold_matches_numpy_reference_within_one_bin() {
    // A Gaussian with a few far outliers, and a half-Gaussian (post-ReLU) with a long tail.
    let mut a = gaussian(300_000, 1);
    a.extend([15.0, -18.0, 22.0, 30.0]);
    let mut b: Vec<f32> = gaussian(200_000, 2)
        .into_iter()
        .map(|x| x.max(0.0) * 3.0)
        .collect();
    b.extend([40.0; 5]);
    for xs in [a, b] {
        let absmax = xs.iter().fold(0f32, |m, x| m.max(x.abs()));
        let mut h = Histogram::new(2048, absmax);
        h.add(&xs);
        let ours = calibrators::entropy::best_bins(&h.counts, 128).unwrap();
        let t = calibrators::entropy::threshold(&h);
        eprintln!("entropy: {ours} bins, threshold {t} (absmax {absmax})");
        assert!(
            t < absmax / 2.0,
            "outliers should be clipped: {t} vs {absmax}"
        );
        if let Some(r) = reference_bins(&h) {
            eprintln!("numpy reference: {r} bins");
            assert!(ours.abs_diff(r) <= 1, "ours {ours} vs reference {r}");
        }
    }
}

fn write_images(dir: &Path, n: usize) -> Vec<PathBuf> {
    let mut next = lcg(42);
    (0..n)
        .map(|i| {
            let img = image::RgbImage::from_fn(12, 10, |x, y| {
                let r = (next() * 255.0) as u8;
                image::Rgb([r, (x * 20) as u8, (y * 25) as u8])
            });
            let p = dir.join(format!("img{i:02}.png"));
            img.save(&p).unwrap();
            p
        })
        .collect()
}

#[test]
fn qdq_model_runs_in_ort_matches_fp32_and_is_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let spec = segtool_testkit::tiny_spec(3);
    let w = [[0.9, -0.2, 0.1], [0.05, 0.8, -0.3], [-0.4, 0.1, 0.7]];
    let bytes = segtool_testkit::tiny_model_bytes(&spec, &w, &[0.1, 0.0, -0.1]);
    let model = ModelProto::decode(bytes.as_slice()).unwrap();
    let images = write_images(dir.path(), 6);
    let spec = segtool_calibration::model_spec(&model).unwrap();
    let x = segtool_runtime::expert::normalise(&image::open(&images[0]).unwrap().to_rgb8(), &spec);
    let mut fp32 = segtool_calibration::session::OrtModel::new(&bytes, Some(1)).unwrap();
    let want = fp32.run(x.view(), &[]).unwrap();
    let want = want.values().next().unwrap();
    for method in [
        Method::MinMax,
        Method::Percentile,
        Method::Entropy,
        Method::Mse,
    ] {
        for per_channel in [true, false] {
            let opts = CalibrationOptions {
                method,
                samples: 5,
                per_channel,
                batch_size: 2,
                threads: Some(1),
                ..Default::default()
            };
            let a = calibrate(&model, &images, &opts).unwrap();
            let b = calibrate(&model, &images, &opts).unwrap();
            assert_eq!(a.model, b.model, "{method:?}: models differ between runs");
            assert_eq!(a.trt_cache, b.trt_cache);
            assert_eq!(a.samples, 5);
            assert_eq!(a.plan.activations.len(), 1, "{:?}", a.plan);
            let q = ModelProto::decode(a.model.as_slice()).unwrap();
            let ops: Vec<&str> = q
                .graph
                .as_ref()
                .unwrap()
                .node
                .iter()
                .map(|n| n.op_type.as_str())
                .collect();
            // The input's Q/DQ, the weight's and the int32 bias's DQ; the Conv's output
            // (the logits, before Resize) stays float.
            assert_eq!(ops.iter().filter(|o| **o == "QuantizeLinear").count(), 1);
            assert_eq!(ops.iter().filter(|o| **o == "DequantizeLinear").count(), 3);
            let g = q.graph.as_ref().unwrap();
            let bias = g
                .initializer
                .iter()
                .find(|t| t.name == "B_quantized")
                .expect("an int32 bias");
            assert_eq!(bias.data_type, segtool_onnx::proto::DataType::Int32 as i32);
            let meta = q
                .metadata_props
                .iter()
                .find(|e| e.key == "segtool.calibration")
                .unwrap();
            assert!(meta.value.contains(method.name()), "{}", meta.value);
            assert!(q.metadata_props.iter().any(|e| e.key == "segtool.spec"));
            // Read as ONNX Runtime's TensorRT EP does: each range is the written scale * 127.
            let (header, ranges) = trt_cache::parse(&a.trt_cache).unwrap();
            assert_eq!(header, "TRT-8601-EntropyCalibration2");
            assert_eq!(ranges.len(), 1);
            for (t, &th) in &a.thresholds {
                let want = segtool_calibration::qdq::scale_of(th) * 127.0;
                assert_eq!(ranges[t], want, "{t}");
            }
            let mut int8 = segtool_calibration::session::OrtModel::new(&a.model, Some(1)).unwrap();
            let got = int8.run(x.view(), &[]).unwrap();
            let got = got.values().next().unwrap();
            let err = got
                .iter()
                .zip(want.iter())
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            let range = want.iter().fold(0f32, |m, v| m.max(v.abs()));
            eprintln!(
                "{method:?} per_channel={per_channel}: max |int8 - fp32| {err} (range {range})"
            );
            assert!(err < 0.1 * range, "{method:?}: {err} vs {range}");
        }
    }
}

#[test]
fn calibrate_refuses_a_tensor_name_onnx_runtime_would_misread() {
    // The input renamed "image:0": ORT's TensorRT EP would read the table's name "image".
    let dir = tempfile::tempdir().unwrap();
    let spec = segtool_testkit::tiny_spec(3);
    let w = [[0.9, -0.2, 0.1], [0.05, 0.8, -0.3], [-0.4, 0.1, 0.7]];
    let bytes = segtool_testkit::tiny_model_bytes(&spec, &w, &[0.1, 0.0, -0.1]);
    let mut model = ModelProto::decode(bytes.as_slice()).unwrap();
    let g = model.graph.as_mut().unwrap();
    let old = g.input[0].name.clone();
    g.input[0].name = format!("{old}:0");
    for n in g.node.iter_mut() {
        for i in n.input.iter_mut().filter(|i| **i == old) {
            *i = format!("{old}:0");
        }
    }
    let images = write_images(dir.path(), 2);
    let opts = CalibrationOptions {
        method: Method::MinMax,
        samples: 2,
        threads: Some(1),
        ..Default::default()
    };
    let err = calibrate(&model, &images, &opts).unwrap_err();
    assert!(
        matches!(
            err,
            segtool_calibration::CalibrationError::TrtCache(
                trt_cache::TrtCacheError::UnwritableNames(_)
            )
        ),
        "{err}"
    );
    let msg = err.to_string();
    assert!(
        msg.contains(&format!("{old:?}")) && msg.contains("first ':'"),
        "{msg}"
    );
}

/// A model from elsewhere is calibrated through its card: its images prepared as the card
/// says (here BGR, its own mean and std), the report measured on the card's output, and
/// the card written into the INT8 file so that it describes itself. Without a card, the
/// error says how to give one.
#[test]
fn a_model_from_elsewhere_is_calibrated_through_its_card() {
    use segtool_runtime::card::{resolve, CardRequest, CARD_METADATA_KEY};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("foreign.onnx");
    std::fs::write(&path, segtool_testkit::foreign_model_bytes(3, 4, false)).unwrap();
    let card_file = dir.path().join("card.toml");
    std::fs::write(
        &card_file,
        "num_classes = 4\n[input]\nchannels = \"bgr\"\nmean = [0.4, 0.5, 0.6]\nstd = [0.2, 0.25, 0.3]\n",
    )
    .unwrap();
    let card = resolve(&path, &CardRequest::new().card_file(&card_file))
        .unwrap()
        .card;
    let model = ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let images = write_images(dir.path(), 3);
    let base = CalibrationOptions {
        method: Method::MinMax,
        samples: 3,
        threads: Some(1),
        ..Default::default()
    };
    let err = calibrate(&model, &images, &base).unwrap_err().to_string();
    assert!(
        err.contains("card") && err.contains("segtool.spec"),
        "{err}"
    );

    let opts = CalibrationOptions {
        card: Some(card.clone()),
        ..base
    };
    let cal = calibrate(&model, &images, &opts).unwrap();
    // The input's statistics are those of the card's normalisation: the BGR, per-channel
    // range of the images, not RGB in 0-1.
    let feed = segtool_calibration::Feed::card(card.clone()).unwrap();
    let mut absmax = 0f32;
    for p in &images {
        let x = feed.tensor(&image::open(p).unwrap().to_rgb8()).unwrap();
        absmax = x.iter().fold(absmax, |m, v| m.max(v.abs()));
    }
    let input = &model.graph.as_ref().unwrap().input[0].name;
    assert_eq!(cal.stats[input].range.absmax(), absmax);
    let q = ModelProto::decode(cal.model.as_slice()).unwrap();
    let written = q
        .metadata_props
        .iter()
        .find(|p| p.key == CARD_METADATA_KEY)
        .expect("the card travels with the INT8 file");
    assert_eq!(
        segtool_runtime::card::ModelCard::from_json(&written.value).unwrap(),
        card
    );
    // And the INT8 file opens by itself, its card read from its metadata.
    let int8 = dir.path().join("int8.onnx");
    std::fs::write(&int8, &cal.model).unwrap();
    let again = resolve(&int8, &CardRequest::new()).unwrap();
    assert!(!again.segtool_export);
    assert_eq!(again.card, card);
    let report = segtool_calibration::report::compare(
        &model,
        &cal.model,
        &cal.plan.layer_outputs,
        &images,
        &feed,
        "minmax",
        &segtool_calibration::report::CompareOptions {
            samples: 3,
            labels: None,
            latency_runs: 0,
            threads: Some(1),
        },
    )
    .unwrap();
    assert!(report.argmax_agreement > 0.9, "{}", report.to_text());
}
