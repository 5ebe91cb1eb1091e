//! Deployment options: `--argmax`, `--preprocess`, `--fp16`, static shapes, metadata.
//! The ONNX Runtime checks need the venv python (`SEGTOOL_PYTHON`, from scripts/setup.sh)
//! and, for the runtime's own pre/post-processing, the ORT library (`ORT_DYLIB_PATH`);
//! they skip with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use segtool_model_spec::{BackboneSpec, ModelSpec};

use crate::proto::{tensor_shape_proto::dimension::Value as D, type_proto, DataType, ModelProto};
use crate::testutil::{export_decoded_with, random_entries, serialize, spec_with};
use crate::{
    export_onnx, sha256_hex, AttentionForm, ExportOptions, ExportTarget, CHECKPOINT_SHA256_KEY,
    INPUT_LAYOUT_KEY, OUTPUT_KIND_KEY, OUTPUT_STRIDE_KEY, TRT_PROFILE_KEY,
};

pub(crate) fn tiny(classes: usize) -> ModelSpec {
    spec_with(BackboneSpec::tiny(), classes)
}

fn python() -> Option<Command> {
    match std::env::var("SEGTOOL_PYTHON") {
        Ok(py) => Some(Command::new(py)),
        Err(_) => {
            crate::testutil::skip::missing_reference(
                "the project venv's python (SEGTOOL_PYTHON), with onnxruntime",
                "source \"$(bash scripts/setup.sh)\"",
            );
            None
        }
    }
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/reference")
        .join(name)
}

pub(crate) fn tempdir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("segtool-export-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A "trained-like" random checkpoint: He-initialised convs (std sqrt(2 / fan_in)),
/// BNs near identity (scale 0.7..1.0, small shifts, unit variance), nonzero attention
/// gammas, so activations stay O(1) through the network and the logits separate the
/// classes over the image (testutil's uniform weights give near-constant logits).
fn trained_like_entries(spec: &ModelSpec, seed: u64) -> crate::testutil::Entries {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut uniform = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut out = random_entries(spec, seed);
    for (key, dt, shape, data) in out.iter_mut() {
        if *dt != safetensors::Dtype::F32 {
            continue;
        }
        let n: usize = shape.iter().product();
        let fan_in: usize = shape.iter().skip(1).product::<usize>().max(1);
        let mut u = || uniform() * 2.0 - 1.0; // uniform(-1, 1): std 1/sqrt(3)
        let vals: Vec<f32> = (0..n)
            .map(|_| {
                (if key.ends_with("running_var") {
                    1.0
                } else if key.ends_with("running_mean") {
                    0.0
                } else if key.ends_with("sa.gamma") {
                    0.6
                } else if key.ends_with("sc.gamma") {
                    -0.5
                } else if key.ends_with(".bias") {
                    0.1 * u()
                } else if shape.len() == 1 {
                    0.85 + 0.15 * u()
                } else {
                    (6.0 / fan_in as f64).sqrt() * u()
                }) as f32
            })
            .collect();
        *data = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    }
    out
}

pub(crate) fn write_checkpoint(dir: &Path, spec: &ModelSpec, seed: u64) -> PathBuf {
    let p = dir.join("m.safetensors");
    std::fs::write(&p, serialize(&trained_like_entries(spec, seed), Some(spec))).unwrap();
    p
}

fn io_types(m: &ModelProto) -> [(String, i32, Vec<String>); 2] {
    let g = m.graph.as_ref().unwrap();
    let f = |v: &crate::proto::ValueInfoProto| {
        let Some(type_proto::Value::TensorType(t)) = v.r#type.as_ref().unwrap().value.clone()
        else {
            unreachable!()
        };
        let dims = t
            .shape
            .unwrap()
            .dim
            .into_iter()
            .map(|d| match d.value.unwrap() {
                D::DimValue(v) => v.to_string(),
                D::DimParam(s) => s,
            })
            .collect();
        (v.name.clone(), t.elem_type, dims)
    };
    [f(&g.input[0]), f(&g.output[0])]
}

fn run_checker(paths: &[PathBuf]) {
    let Some(mut py) = python() else { return };
    let out = py
        .arg(script("check_onnx.py"))
        .args(paths)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success(),
        "onnx checker / strict shape inference failed"
    );
    assert_eq!(stdout.matches("\"checker\": \"ok\"").count(), paths.len());
}

#[test]
fn deployment_graphs_have_the_asked_interface_and_pass_the_checker() {
    let spec = tiny(5);
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let deploy = ExportOptions::default()
        .with_argmax(true)
        .with_preprocess(true);
    let (m, _) = export_decoded_with(&spec, &deploy);
    let [i, o] = io_types(&m);
    assert_eq!(
        i,
        (
            "image".into(),
            DataType::Uint8 as i32,
            s(&["batch", "height", "width", "3"])
        )
    );
    assert_eq!(
        o,
        (
            "mask".into(),
            DataType::Uint8 as i32,
            s(&["batch", "height", "width"])
        )
    );
    let g = m.graph.as_ref().unwrap();
    let ops: Vec<&str> = g.node.iter().take(4).map(|n| n.op_type.as_str()).collect();
    assert_eq!(ops, ["Cast", "Transpose", "Mul", "Add"]);
    let tail: Vec<&str> = g
        .node
        .iter()
        .rev()
        .take(3)
        .map(|n| n.op_type.as_str())
        .collect();
    assert_eq!(tail, ["Cast", "ArgMax", "Resize"]);

    let stat = ExportOptions::for_target(ExportTarget::Ort)
        .with_input_size(Some((64, 96)))
        .with_batch(Some(2));
    let (m, _) = export_decoded_with(&spec, &stat);
    let [i, o] = io_types(&m);
    assert_eq!(i.2, s(&["2", "3", "64", "96"]));
    assert_eq!(o.2, s(&["2", "5", "64", "96"]));
    assert!(!m.metadata_props.iter().any(|p| p.key == TRT_PROFILE_KEY));

    let fp16 = ExportOptions::for_target(ExportTarget::Tract).with_fp16(true);
    let (m, _) = export_decoded_with(&spec, &fp16);
    let [i, o] = io_types(&m);
    assert_eq!((i.1, o.1), (DataType::Float as i32, DataType::Float as i32));
    let g = m.graph.as_ref().unwrap();
    assert!(g
        .initializer
        .iter()
        .filter(|t| t.name.ends_with(".weight") || t.name.ends_with("gamma"))
        .all(|t| t.data_type == DataType::Float16 as i32));
    // Attention runs on fp32 operands and hands fp16 back.
    for n in g.node.iter().filter(|n| n.op_type == "Attention") {
        for x in &n.input {
            let mut src = g.node.iter().find(|p| &p.output[0] == x).unwrap();
            if src.op_type == "Neg" {
                // CAM's query: Neg of the fp32 (cast) features.
                src = g.node.iter().find(|p| p.output[0] == src.input[0]).unwrap();
            }
            assert_eq!(src.op_type, "Cast", "{x}");
            assert_eq!(src.attribute[0].i, Some(DataType::Float as i64));
        }
    }

    // Every deployment variant through the pip onnx checker + strict shape inference.
    let dir = tempdir("deploy-check");
    let st_bytes = serialize(&random_entries(&spec, 3), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&st_bytes).unwrap();
    let mut paths = Vec::new();
    let variants = [
        ("deploy", deploy.clone()),
        ("static", stat),
        ("fp16-tract", fp16),
        (
            "fp16-ort-deploy",
            ExportOptions::for_target(ExportTarget::Ort)
                .with_fp16(true)
                .with_argmax(true)
                .with_preprocess(true),
        ),
        ("fp16-legacy", ExportOptions::default().with_fp16(true)),
        (
            "static-deploy",
            deploy.with_input_size(Some((33, 47))).with_batch(Some(1)),
        ),
    ];
    for (name, o) in &variants {
        let (b, _) = crate::export_onnx_bytes(&st, &spec, o).unwrap();
        let p = dir.join(format!("{name}.onnx"));
        std::fs::write(&p, b).unwrap();
        paths.push(p);
    }
    run_checker(&paths);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn metadata_records_layout_output_stride_hash_and_trt_profile() {
    let spec = tiny(3);
    let dir = tempdir("meta");
    let ckpt = write_checkpoint(&dir, &spec, 9);
    let out = dir.join("m.onnx");
    let opts = ExportOptions::default()
        .with_preprocess(true)
        .with_argmax(true);
    export_onnx(&ckpt, &out, &opts).unwrap();
    let meta: std::collections::HashMap<String, String> =
        segtool_runtime::expert::read_metadata(&out)
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(meta[INPUT_LAYOUT_KEY], "NHWC uint8 RGB");
    assert_eq!(meta[OUTPUT_KIND_KEY], "mask");
    assert_eq!(meta[OUTPUT_STRIDE_KEY], "8");
    assert_eq!(
        meta[CHECKPOINT_SHA256_KEY],
        sha256_hex(&std::fs::read(&ckpt).unwrap())
    );
    assert_eq!(meta[CHECKPOINT_SHA256_KEY].len(), 64);
    let trt: serde_json::Value = serde_json::from_str(&meta[TRT_PROFILE_KEY]).unwrap();
    assert_eq!(trt["min"], serde_json::json!([1, 128, 128, 3]));
    assert_eq!(trt["opt"], serde_json::json!([1, 512, 1024, 3]));
    assert_eq!(trt["max"], serde_json::json!([8, 1024, 2048, 3]));
    assert!(trt["trtexec"]
        .as_str()
        .unwrap()
        .starts_with("--minShapes=image:1x128x128x3"));
    let export: serde_json::Value =
        serde_json::from_str(&meta[crate::EXPORT_METADATA_KEY]).unwrap();
    assert_eq!(
        (export["argmax"].as_bool(), export["fp16"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(segtool_runtime::expert::load_spec(&out).unwrap(), spec);

    export_onnx(&ckpt, &out, &ExportOptions::default()).unwrap();
    let meta: std::collections::HashMap<String, String> =
        segtool_runtime::expert::read_metadata(&out)
            .unwrap()
            .into_iter()
            .collect();
    assert_eq!(meta[INPUT_LAYOUT_KEY], "NCHW float32 normalised");
    assert_eq!(meta[OUTPUT_KIND_KEY], "logits");
    let trt: serde_json::Value = serde_json::from_str(&meta[TRT_PROFILE_KEY]).unwrap();
    assert_eq!(trt["max"], serde_json::json!([8, 3, 1024, 2048]));
    let _ = std::fs::remove_dir_all(&dir);
}

pub(crate) fn images(w: u32, h: u32, seed: u32) -> Vec<image::RgbImage> {
    (0..2u32)
        .map(|k| {
            image::RgbImage::from_fn(w, h, |x, y| {
                image::Rgb([
                    (x * 3 + (k + seed) * 50) as u8,
                    (y * 5 + seed) as u8,
                    ((x * y + seed) % 251) as u8,
                ])
            })
        })
        .collect()
}

/// `--argmax --preprocess` masks (uint8 NHWC in, uint8 mask out, run by python
/// onnxruntime) equal the runtime's own normalisation + argmax on the standard graph
/// (segtool_runtime::Segmenter over ORT), for every target's attention forms.
#[test]
fn argmax_preprocess_masks_equal_the_runtime_pipeline() {
    let Some(_) = python() else { return };
    let spec = tiny(5);
    let dir = tempdir("masks");
    let ckpt = write_checkpoint(&dir, &spec, 11);
    for target in [ExportTarget::Legacy, ExportTarget::Ort, ExportTarget::Tract] {
        let std_path = dir.join(format!("{target}-std.onnx"));
        let dep_path = dir.join(format!("{target}-deploy.onnx"));
        let base = ExportOptions::for_target(target);
        export_onnx(&ckpt, &std_path, &base).unwrap();
        export_onnx(
            &ckpt,
            &dep_path,
            &base.clone().with_argmax(true).with_preprocess(true),
        )
        .unwrap();
        let backend = segtool_runtime::EngineKind::Ort;
        let mut seg = match segtool_runtime::Segmenter::builder(&std_path)
            .engine(backend)
            .open()
        {
            Err(segtool_runtime::RuntimeError::OrtLibraryNotFound { tried }) => {
                return crate::testutil::skip::missing_reference(
                    format_args!("the ONNX Runtime library (tried {tried:?})"),
                    "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
                );
            }
            other => other.unwrap(),
        };
        for (w, h, seed) in [(90u32, 70u32, 0u32), (61, 83, 7)] {
            let imgs = images(w, h, seed);
            let expected: Vec<u8> = seg
                .segment_batch(&imgs)
                .unwrap()
                .into_iter()
                .flat_map(|s| s.mask.to_le_bytes())
                .collect();
            let raw = dir.join("imgs.u8");
            std::fs::write(
                &raw,
                imgs.iter()
                    .flat_map(|i| i.as_raw().iter().copied())
                    .collect::<Vec<u8>>(),
            )
            .unwrap();
            let out = dir.join("mask.u8");
            let res = python()
                .unwrap()
                .arg(script("check_deploy.py"))
                .args(["masks", dep_path.to_str().unwrap(), raw.to_str().unwrap()])
                .args([imgs.len().to_string(), h.to_string(), w.to_string()])
                .arg(&out)
                .output()
                .unwrap();
            let stdout = String::from_utf8_lossy(&res.stdout);
            assert!(
                res.status.success(),
                "{stdout}{}",
                String::from_utf8_lossy(&res.stderr)
            );
            assert!(stdout.contains("\"dtype\": \"uint8\""), "{stdout}");
            let got = std::fs::read(&out).unwrap();
            assert_eq!(got.len(), expected.len());
            let differ = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
            let classes: std::collections::BTreeSet<u8> = expected.iter().copied().collect();
            eprintln!(
                "{target} {w}x{h}: {differ} of {} mask pixels differ; classes present {classes:?}",
                got.len()
            );
            assert_eq!(differ, 0, "{target} {w}x{h}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `--fp16` against the fp32 export of the same checkpoint, per attention form, in ORT
/// CPU: argmax agreement >= 99.5% at two sizes through one dynamic model.
#[test]
fn fp16_argmax_agrees_with_fp32() {
    let Some(_) = python() else { return };
    let spec = tiny(5);
    let dir = tempdir("fp16");
    let ckpt = write_checkpoint(&dir, &spec, 13);
    let mut failures = Vec::new();
    for (name, base) in [
        ("legacy", ExportOptions::default()),
        ("ort", ExportOptions::for_target(ExportTarget::Ort)),
        (
            "ort-cuda",
            ExportOptions::for_target_on(ExportTarget::Ort, crate::ExportProvider::Cuda),
        ),
        ("tract", ExportOptions::for_target(ExportTarget::Tract)),
        (
            "ort-all-mha",
            ExportOptions::for_target(ExportTarget::Ort)
                .with_attention(AttentionForm::MsMultiHeadAttention),
        ),
    ] {
        let r = dir.join(format!("{name}.onnx"));
        let h = dir.join(format!("{name}-fp16.onnx"));
        export_onnx(&ckpt, &r, &base).unwrap();
        export_onnx(&ckpt, &h, &base.clone().with_fp16(true)).unwrap();
        let res = python()
            .unwrap()
            .arg(script("check_deploy.py"))
            .args(["fp16", r.to_str().unwrap(), h.to_str().unwrap()])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&res.stdout);
        eprintln!("{name}: {stdout}{}", String::from_utf8_lossy(&res.stderr));
        assert!(res.status.success(), "{name}: fp16 run failed");
        for line in stdout.lines() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(v["out_dtype"], "float32");
            if v["agreement"].as_f64().unwrap() < 0.995 {
                failures.push(format!("{name}: {line}"));
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{failures:#?}");
}
