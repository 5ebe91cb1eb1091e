//! The searches' model (three convs, two of them needed in float for a tight target),
//! images, and the label and agreement measures independent of the search.

use super::*;

pub(super) fn lcg(seed: u64) -> impl FnMut() -> f32 {
    let mut s = seed;
    move || {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((s >> 11) as f64 / (1u64 << 53) as f64) as f32
    }
}

pub(super) fn init(name: &str, dims: &[i64], v: &[f32]) -> TensorProto {
    TensorProto {
        dims: dims.to_vec(),
        data_type: DataType::Float as i32,
        name: name.into(),
        raw_data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        ..Default::default()
    }
}

pub(super) fn node(op: &str, inputs: &[&str], out: &str) -> NodeProto {
    NodeProto {
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![out.into()],
        name: out.into(),
        op_type: op.into(),
        ..Default::default()
    }
}

/// image -> conv_a (3->4) -> relu -> x[1,1,1,1000] -> conv_b (4->4, ignores ch 3) -> relu
/// -> x[1,1,1,30] -> conv_c (4->3 classes, ignores ch 3) = logits.
pub(super) fn chain_model() -> ModelProto {
    // conv_a: channels 0..2 pass the image through (+3, so the Relu keeps them), channel
    // 3 is a constant 4 (x1000 after the Mul). conv_b: the same on channels 0..2 with a
    // little mixing, ignores channel 3 and sets it to 4 again (x30). conv_c: class k is
    // channel k.
    let eye = |o: usize, i: usize, mix: f32| -> Vec<f32> {
        (0..o * i)
            .map(|k| {
                let (r, c) = (k / i, k % i);
                if c == 3 || r == 3 {
                    0.0
                } else if r == c {
                    1.0
                } else {
                    mix
                }
            })
            .collect()
    };
    let (wa, wb, wc) = (eye(4, 3, 0.0), eye(4, 4, 0.1), eye(3, 4, 0.0));
    let graph = GraphProto {
        node: vec![
            node("Conv", &["image", "conv_a.weight", "conv_a.bias"], "conv_a"),
            node("Relu", &["conv_a"], "relu_a"),
            node("Mul", &["relu_a", "outlier_1000"], "scaled_a"),
            node(
                "Conv",
                &["scaled_a", "conv_b.weight", "conv_b.bias"],
                "conv_b",
            ),
            node("Relu", &["conv_b"], "relu_b"),
            node("Mul", &["relu_b", "outlier_30"], "scaled_b"),
            node(
                "Conv",
                &["scaled_b", "conv_c.weight", "conv_c.bias"],
                "logits",
            ),
        ],
        name: "chain".into(),
        initializer: vec![
            init("conv_a.weight", &[4, 3, 1, 1], &wa),
            init("conv_a.bias", &[4], &[3.0, 3.0, 3.0, 4.0]),
            init("outlier_1000", &[1, 4, 1, 1], &[1.0, 1.0, 1.0, 1000.0]),
            init("conv_b.weight", &[4, 4, 1, 1], &wb),
            init("conv_b.bias", &[4], &[0.0, 0.0, 0.0, 4.0]),
            init("outlier_30", &[1, 4, 1, 1], &[1.0, 1.0, 1.0, 30.0]),
            init("conv_c.weight", &[3, 4, 1, 1], &wc),
            init("conv_c.bias", &[3], &[0.0, 0.0, 0.0]),
        ],
        input: vec![tensor_value_info(
            "image",
            DataType::Float,
            &[
                Dim::Named("batch"),
                Dim::Fixed(3),
                Dim::Named("h"),
                Dim::Named("w"),
            ],
        )],
        output: vec![tensor_value_info(
            "logits",
            DataType::Float,
            &[
                Dim::Named("batch"),
                Dim::Fixed(3),
                Dim::Named("h"),
                Dim::Named("w"),
            ],
        )],
        ..Default::default()
    };
    ModelProto {
        ir_version: 8,
        opset_import: vec![OperatorSetIdProto {
            domain: String::new(),
            version: 17,
        }],
        graph: Some(graph),
        metadata_props: vec![StringStringEntryProto {
            key: segtool_model_spec::SPEC_METADATA_KEY.into(),
            value: segtool_testkit::tiny_spec(3).to_json(),
        }],
        ..Default::default()
    }
}

pub(super) fn write_images(dir: &Path, n: usize) -> Vec<PathBuf> {
    let mut next = lcg(42);
    (0..n)
        .map(|i| {
            // Smooth fields plus noise, so that the classes change across the image.
            let (a, b, c) = (next() * 6.0, next() * 6.0, next() * 6.0);
            let img = image::RgbImage::from_fn(16, 12, |x, y| {
                let (x, y) = (x as f32 / 16.0, y as f32 / 12.0);
                let mut f =
                    |p: f32, s: f32| (((p * s).sin() * 0.5 + 0.5) * 230.0 + next() * 25.0) as u8;
                image::Rgb([f(x + y, a), f(x - y, b), f(x * y + x, c)])
            });
            let p = dir.join(format!("img{i:02}.png"));
            img.save(&p).unwrap();
            p
        })
        .collect()
}

pub(super) fn opts() -> CalibrationOptions {
    CalibrationOptions {
        method: Method::MinMax,
        samples: 100,
        per_channel: true,
        batch_size: 1,
        threads: Some(1),
        ..Default::default()
    }
}

pub(super) fn argmax(model: &[u8], images: &[PathBuf]) -> Vec<Vec<u8>> {
    let mut ort = OrtModel::new(model, Some(1)).unwrap();
    labels_of(images, |x| {
        ort.run(x, &[]).unwrap().into_values().next().unwrap()
    })
}

/// [`argmax`] in OpenVINO, through the runtime's engine (the workspace's parity tests
/// check it against OpenVINO's own Python API).
pub(super) fn argmax_openvino(
    model: &[u8],
    images: &[PathBuf],
    options: &OpenVinoOptions,
) -> Vec<Vec<u8>> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.onnx");
    std::fs::write(&path, model).unwrap();
    let mut engine = OpenVinoEngine::open(&path, options).unwrap();
    labels_of(images, |x| run_logits(&mut engine, x).unwrap().into_dyn())
}

/// Each image normalised by the tiny spec, scored by `scores`, argmax per pixel (ties to
/// the lower class).
pub(super) fn labels_of(
    images: &[PathBuf],
    mut scores: impl FnMut(ndarray::ArrayView4<f32>) -> ndarray::ArrayD<f32>,
) -> Vec<Vec<u8>> {
    let spec = segtool_testkit::tiny_spec(3);
    images
        .iter()
        .map(|p| {
            let x = segtool_runtime::expert::normalise(&image::open(p).unwrap().to_rgb8(), &spec);
            let l = scores(x.view());
            let s = l.shape().to_vec();
            let v = l.as_slice().unwrap();
            let hw = s[2] * s[3];
            (0..hw)
                .map(|p| {
                    (0..s[1])
                        .max_by(|&a, &b| v[a * hw + p].total_cmp(&v[b * hw + p]).then(b.cmp(&a)))
                        .unwrap() as u8
                })
                .collect()
        })
        .collect()
}

pub(super) fn agreement(a: &[Vec<u8>], b: &[Vec<u8>]) -> f64 {
    let (mut same, mut n) = (0usize, 0usize);
    for (x, y) in a.iter().zip(b) {
        same += x.iter().zip(y).filter(|(p, q)| p == q).count();
        n += x.len();
    }
    same as f64 / n as f64
}
