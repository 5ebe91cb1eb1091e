//! External data: the side file's layout, determinism, atomic writing, the 2 GiB decision
//! (with a small limit instead of a 2 GiB model), and that the onnx checker, ONNX Runtime
//! (python, and the runtime crate's engine) and tract load it from the model's path and
//! compute exactly what the inline export computes. The python checks need
//! `SEGTOOL_PYTHON` (scripts/setup.sh) and skip with a message otherwise.

use std::path::{Path, PathBuf};
use std::process::Command;

use prost::Message;
use segtool_model_spec::{BackboneSpec, ModelSpec};

use crate::external::ALIGNMENT;
use crate::proto::{DataLocation, ModelProto, TensorProto};
use crate::testutil::{random_entries, serialize, spec_with};
use crate::{
    build, export_onnx, export_onnx_bytes, export_onnx_parts, sha256_hex, Dest, ExportError,
    ExportOptions, ExternalData,
};

/// Threshold of the forced exports: low, so most weights of the tiny model move out while
/// biases and shape constants stay inline.
const THRESHOLD: usize = 256;

fn spec() -> ModelSpec {
    spec_with(BackboneSpec::tiny(), 4)
}

fn always() -> ExportOptions {
    ExportOptions::default()
        .with_external_data(ExternalData::Always)
        .with_external_threshold(THRESHOLD)
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("segtool-export-ext-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn checkpoint(&self) -> PathBuf {
        let spec = spec();
        let p = self.0.join("ckpt.safetensors");
        std::fs::write(&p, serialize(&random_entries(&spec, 21), Some(&spec))).unwrap();
        p
    }

    /// `sub/m.onnx` (the directory created).
    fn model(&self, sub: &str) -> PathBuf {
        let d = self.0.join(sub);
        std::fs::create_dir_all(&d).unwrap();
        d.join("m.onnx")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn ls(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn decode(path: &Path) -> ModelProto {
    ModelProto::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

fn initializers(m: &ModelProto) -> &[TensorProto] {
    &m.graph.as_ref().unwrap().initializer
}

/// (location, offset, length) of an external tensor, checking the keys and their order.
fn info(t: &TensorProto) -> (String, u64, usize) {
    let keys: Vec<&str> = t.external_data.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["location", "offset", "length"], "{}", t.name);
    let v = |i: usize| t.external_data[i].value.clone();
    (v(0), v(1).parse().unwrap(), v(2).parse().unwrap())
}

#[test]
fn always_moves_large_initialisers_to_one_aligned_side_file() {
    let dir = Scratch::new("always");
    let ckpt = dir.checkpoint();
    let (ext, inline) = (dir.model("ext"), dir.model("inline"));
    let report = export_onnx(&ckpt, &ext, &always()).unwrap();
    let inline_report = export_onnx(&ckpt, &inline, &ExportOptions::default()).unwrap();
    assert!(inline_report.external.is_none());
    assert_eq!(ls(&dir.0.join("ext")), ["m.onnx", "m.onnx.data"]);
    assert_eq!(ls(&dir.0.join("inline")), ["m.onnx"]);

    let data = std::fs::read(dir.0.join("ext/m.onnx.data")).unwrap();
    let onnx_len = std::fs::metadata(&ext).unwrap().len();
    assert_eq!(report.bytes, onnx_len);
    let r = report.external.as_ref().expect("external data used");
    assert_eq!(r.location, "m.onnx.data");
    assert_eq!(r.bytes, data.len() as u64);

    let (m_ext, m_inline) = (decode(&ext), decode(&inline));
    let (te, ti) = (initializers(&m_ext), initializers(&m_inline));
    assert_eq!(te.len(), ti.len());
    let (mut moved, mut kept, mut end) = (0usize, 0usize, 0u64);
    let mut rebuilt = m_ext.clone();
    for (k, (e, i)) in te.iter().zip(ti).enumerate() {
        assert_eq!(e.name, i.name);
        if i.raw_data.len() >= THRESHOLD {
            assert!(e.raw_data.is_empty(), "{} still has raw_data", e.name);
            assert_eq!(e.data_location, Some(DataLocation::External as i32));
            let (location, offset, length) = info(e);
            assert_eq!(location, "m.onnx.data");
            assert_eq!(offset % ALIGNMENT, 0, "{} at {offset}", e.name);
            assert!(offset >= end, "{} overlaps the previous tensor", e.name);
            assert!(
                offset - end < ALIGNMENT,
                "{}: gap over one alignment",
                e.name
            );
            assert!(data[end as usize..offset as usize].iter().all(|&b| b == 0));
            assert_eq!(length, i.raw_data.len());
            let slice = &data[offset as usize..offset as usize + length];
            assert_eq!(slice, &i.raw_data[..], "{} payload", e.name);
            end = offset + length as u64;
            moved += 1;
            // Put the payload back: the model must then be the inline one exactly.
            let t = &mut rebuilt.graph.as_mut().unwrap().initializer[k];
            t.raw_data = slice.to_vec();
            t.external_data.clear();
            t.data_location = None;
        } else {
            assert_eq!(e, i, "{} should stay inline", e.name);
            kept += 1;
        }
    }
    assert!(moved > 10 && kept > 0, "moved {moved}, kept {kept}");
    assert_eq!(r.tensors, moved);
    assert_eq!(data.len() as u64, end, "the file ends with the last tensor");
    assert_eq!(rebuilt, m_inline);
    // The report describes the same graph.
    assert_eq!(
        (report.nodes, report.initializers, report.folded_bn),
        (
            inline_report.nodes,
            inline_report.initializers,
            inline_report.folded_bn
        )
    );
}

#[test]
fn external_export_is_deterministic_and_replaces_an_earlier_pair() {
    let dir = Scratch::new("determinism");
    let ckpt = dir.checkpoint();
    let (a, b) = (dir.model("a"), dir.model("b"));
    export_onnx(&ckpt, &a, &always()).unwrap();
    export_onnx(&ckpt, &b, &always()).unwrap();
    let read = |p: &Path| {
        (
            std::fs::read(p).unwrap(),
            std::fs::read(p.with_file_name("m.onnx.data")).unwrap(),
        )
    };
    let first = read(&a);
    assert_eq!(first, read(&b));
    // Re-export over the existing pair: same bytes, no temp files left.
    export_onnx(&ckpt, &a, &always()).unwrap();
    assert_eq!(read(&a), first);
    assert_eq!(ls(&dir.0.join("a")), ["m.onnx", "m.onnx.data"]);
    // A different threshold replaces both files consistently.
    let opts = always().with_external_threshold(4096);
    let report = export_onnx(&ckpt, &a, &opts).unwrap();
    let (onnx, data) = read(&a);
    assert_ne!(data, first.1);
    assert_eq!(data.len() as u64, report.external.unwrap().bytes);
    for t in initializers(&ModelProto::decode(onnx.as_slice()).unwrap()) {
        if t.data_location.is_some() {
            let (_, offset, length) = info(t);
            assert!(length >= 4096 && offset as usize + length <= data.len());
        }
    }
}

#[test]
fn auto_keeps_small_models_inline_and_drops_a_stale_side_file() {
    let dir = Scratch::new("auto");
    let ckpt = dir.checkpoint();
    let out = dir.model("m");
    export_onnx(&ckpt, &out, &always()).unwrap();
    assert!(out.with_file_name("m.onnx.data").exists());
    let opts = ExportOptions::default();
    assert_eq!(opts.external_data, ExternalData::Auto);
    let report = export_onnx(&ckpt, &out, &opts).unwrap();
    assert!(report.external.is_none());
    assert_eq!(ls(&dir.0.join("m")), ["m.onnx"], "stale side file removed");
    let m = decode(&out);
    for t in initializers(&m) {
        assert!(t.data_location.is_none() && t.external_data.is_empty());
        assert!(!t.raw_data.is_empty(), "{}", t.name);
    }
    // Never: inline as well.
    let never = ExportOptions::default().with_external_data(ExternalData::Never);
    export_onnx(&ckpt, &out, &never).unwrap();
    assert_eq!(decode(&out), m);
    // Always with nothing over the threshold: nothing moves, no side file.
    let none = always().with_external_threshold(usize::MAX);
    let report = export_onnx(&ckpt, &out, &none).unwrap();
    assert!(report.external.is_none());
    assert_eq!(ls(&dir.0.join("m")), ["m.onnx"]);
    assert_eq!(decode(&out), m);
}

/// The 2 GiB decision with the limit as a parameter: the same tiny model switches to
/// external data exactly when its inline size reaches the limit.
#[test]
fn auto_switches_to_external_data_at_the_limit() {
    let spec = spec();
    let bytes = serialize(&random_entries(&spec, 21), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let auto = ExportOptions::default().with_external_threshold(THRESHOLD);
    let (inline, _) = export_onnx_bytes(&st, &spec, &auto).unwrap();
    let n = inline.len() as u64;
    let dest = Dest::Named("m.onnx.data");

    let under = build(&st, &spec, &auto, None, dest, n + 1).unwrap();
    assert!(under.data.is_none() && under.report.external.is_none());
    assert_eq!(under.onnx, inline);

    let at = build(&st, &spec, &auto, None, dest, n).unwrap();
    let data = at.data.as_ref().expect("external at the limit");
    assert!((at.onnx.len() as u64) < n / 2, "weights moved out");
    assert_eq!(at.report.bytes, at.onnx.len() as u64);
    assert_eq!(at.report.external.as_ref().unwrap().bytes, data.len());
    let forced = build(&st, &spec, &always(), None, dest, n + 1).unwrap();
    assert_eq!((&forced.onnx, &forced.data), (&at.onnx, &at.data));

    // Never: the inline size is an error that points at the option.
    let never = auto.clone().with_external_data(ExternalData::Never);
    let err = build(&st, &spec, &never, None, dest, n).unwrap_err();
    assert!(
        matches!(err, ExportError::TooLarge { bytes, external: false } if bytes == n),
        "{err}"
    );
    assert!(err.to_string().contains("--external-data"), "{err}");
    // Too large even with the weights outside.
    let err = build(&st, &spec, &auto, None, dest, 1000).unwrap_err();
    assert!(
        matches!(err, ExportError::TooLarge { external: true, .. }),
        "{err}"
    );
    // In memory: external data is needed but cannot be returned.
    let err = build(&st, &spec, &auto, None, Dest::Memory, n).unwrap_err();
    assert!(
        matches!(&err, ExportError::ExternalDataInMemory { reason } if reason.contains(&n.to_string())),
        "{err}"
    );
}

#[test]
fn in_memory_export_refuses_external_data_and_names_the_option() {
    let spec = spec();
    let bytes = serialize(&random_entries(&spec, 21), Some(&spec));
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let err = export_onnx_bytes(&st, &spec, &always()).unwrap_err();
    assert!(
        matches!(err, ExportError::ExternalDataInMemory { .. }),
        "{err}"
    );
    let msg = err.to_string();
    for needle in [
        "external_data",
        "Always",
        "--external-data never",
        "export_onnx_parts",
    ] {
        assert!(msg.contains(needle), "{needle}: {msg}");
    }
    // Nothing over the threshold: nothing to move, the buffer is the inline model.
    let none = always().with_external_threshold(usize::MAX);
    let (onnx, _) = export_onnx_bytes(&st, &spec, &none).unwrap();
    assert_eq!(
        onnx,
        export_onnx_bytes(&st, &spec, &ExportOptions::default())
            .unwrap()
            .0
    );
}

#[test]
fn parts_are_the_files_export_onnx_writes() {
    let dir = Scratch::new("parts");
    let ckpt = dir.checkpoint();
    let out = dir.model("m");
    export_onnx(&ckpt, &out, &always()).unwrap();
    let spec = spec();
    let bytes = std::fs::read(&ckpt).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let sha = sha256_hex(&bytes);
    let parts = export_onnx_parts(&st, &spec, &always(), Some(&sha), "m.onnx.data").unwrap();
    assert_eq!(parts.onnx, std::fs::read(&out).unwrap());
    let data = parts.data.expect("data");
    assert_eq!(data.location(), "m.onnx.data");
    assert_eq!(
        data.to_vec(),
        std::fs::read(out.with_file_name("m.onnx.data")).unwrap()
    );
    for bad in ["../m.data", "sub/m.data", "/abs/m.data", ""] {
        let err = export_onnx_parts(&st, &spec, &always(), None, bad).unwrap_err();
        assert!(matches!(err, ExportError::BadOption(_)), "{bad}: {err}");
    }
}

#[test]
fn failed_external_export_leaves_neither_file() {
    let dir = Scratch::new("fail");
    let ckpt = dir.checkpoint();
    // The model path is a directory: the data is staged, then the write fails.
    let out = dir.model("m");
    std::fs::create_dir(&out).unwrap();
    let err = export_onnx(&ckpt, &out, &always()).unwrap_err();
    assert!(matches!(err, ExportError::Write { .. }), "{err}");
    assert_eq!(ls(&dir.0.join("m")), ["m.onnx"]);
    std::fs::remove_dir(&out).unwrap();
    // The data path is a directory: an earlier model is gone (it could point at data
    // that no longer matches), nothing new is left.
    export_onnx(&ckpt, &out, &ExportOptions::default()).unwrap();
    std::fs::create_dir(out.with_file_name("m.onnx.data")).unwrap();
    let err = export_onnx(&ckpt, &out, &always()).unwrap_err();
    assert!(err.to_string().contains("m.onnx.data"), "{err}");
    assert_eq!(ls(&dir.0.join("m")), ["m.onnx.data"]);
    assert!(out.with_file_name("m.onnx.data").is_dir());
    // Output under a regular file.
    let blocked = ckpt.join("m.onnx");
    let err = export_onnx(&ckpt, &blocked, &always()).unwrap_err();
    assert!(matches!(err, ExportError::Write { .. }), "{err}");
}

/// The runtime crate's engines open models by path, so external data resolves: tract
/// (tract-onnx resolves `location` against the model's directory) and ONNX Runtime
/// (skipped when its library is not found) give exactly the inline model's logits.
#[test]
fn runtime_engines_load_external_data_from_the_model_path() {
    use segtool_runtime::expert::Engine;
    let dir = Scratch::new("engines");
    let ckpt = dir.checkpoint();
    let (ext, inline) = (dir.model("ext"), dir.model("inline"));
    export_onnx(&ckpt, &ext, &always()).unwrap();
    export_onnx(&ckpt, &inline, &ExportOptions::default()).unwrap();
    let x = ndarray::Array4::from_shape_fn((1, 3, 40, 56), |(_, c, y, x)| {
        ((c * 7 + y * 3 + x) % 17) as f32 / 8.0 - 1.0
    });
    let run = |e: &mut dyn Engine| segtool_runtime::expert::run_logits(e, x.view()).unwrap();
    let a = run(&mut segtool_runtime::expert::TractEngine::open(&ext).unwrap());
    let b = run(&mut segtool_runtime::expert::TractEngine::open(&inline).unwrap());
    assert_eq!(a.shape(), [1, 4, 40, 56]);
    assert_eq!(a, b, "tract: external vs inline");
    let opts = segtool_runtime::OrtOptions::new();
    match segtool_runtime::expert::OrtEngine::open(&ext, &opts) {
        Err(segtool_runtime::RuntimeError::OrtLibraryNotFound { tried }) => {
            crate::testutil::skip::missing_reference(
                format_args!("the ONNX Runtime library (tried {tried:?})"),
                "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
            );
        }
        other => {
            let a = run(&mut other.unwrap());
            let b = run(&mut segtool_runtime::expert::OrtEngine::open(&inline, &opts).unwrap());
            assert_eq!(a, b, "onnxruntime: external vs inline");
        }
    }
}

/// pip `onnx`: `check_model(path, full_check=True)` and `load(path)` with the side file;
/// python onnxruntime gives the inline export's outputs exactly.
#[test]
fn onnx_checker_and_python_onnxruntime_accept_external_data() {
    let Ok(py) = std::env::var("SEGTOOL_PYTHON") else {
        return crate::testutil::skip::missing_reference(
            "the project venv's python (SEGTOOL_PYTHON), with onnx and onnxruntime",
            "source \"$(bash scripts/setup.sh)\"",
        );
    };
    let dir = Scratch::new("python");
    let ckpt = dir.checkpoint();
    let (ext, inline) = (dir.model("ext"), dir.model("inline"));
    let report = export_onnx(&ckpt, &ext, &always()).unwrap();
    export_onnx(&ckpt, &inline, &ExportOptions::default()).unwrap();
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/reference/check_external.py");
    let out = Command::new(py)
        .arg(script)
        .arg(&inline)
        .arg(&ext)
        .args(["--run", "40x56", "67x45", "--batch", "2"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "check_external.py failed");
    let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(v["checker"], "ok");
    assert_eq!(v["load"], "ok");
    assert_eq!(
        v["external_tensors"].as_u64().unwrap() as usize,
        report.external.unwrap().tensors
    );
    for (size, d) in v["max_diff"].as_object().unwrap() {
        assert_eq!(d.as_f64().unwrap(), 0.0, "{size}");
    }
}
