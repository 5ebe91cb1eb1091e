//! `segtool import`'s reader against files PyTorch itself wrote
//! (tests/reference/pytorch_checkpoints.py, using the independent reference DANet):
//! state dicts in torch.save's zip and legacy formats, a DataParallel training checkpoint,
//! a GPU-saved file, safetensors, a torchvision-named ResNet, and broken files. Imported
//! weights must reproduce PyTorch's logits within 1e-4.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use common::*;
use segtool_model_spec::{BackboneSpec, ModelSpec};
use segtool_train::checkpoint;
use segtool_train::import::{import_into, read_state_dict, ImportMode, ImportReport};
use segtool_train::DaNet;
use tch::{nn, Tensor};

fn tiny_spec() -> ModelSpec {
    spec(BackboneSpec::tiny(), 5)
}

/// The fixtures, written once per test run under target/tmp.
fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("import_pytorch");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let spec_path = dir.join("spec.json");
        std::fs::write(&spec_path, tiny_spec().to_json()).unwrap();
        let script = reference_script().with_file_name("pytorch_checkpoints.py");
        let status = python()
            .arg(script)
            .args([&spec_path, &dir])
            .status()
            .expect("python runs (scripts/setup.sh installs the venv)");
        assert!(status.success(), "pytorch_checkpoints.py failed");
        dir
    })
}

fn load(path: &Path) -> Tensor {
    let (shape, values) = read_tensors(path).remove("image").unwrap();
    let shape: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    Tensor::from_slice(&values).view(shape.as_slice())
}

/// Imports `file` in Full mode into a fresh tiny DANet and checks its eval-mode logits
/// against PyTorch's.
fn import_and_compare(file: &str) -> (nn::VarStore, ImportReport) {
    let dir = fixtures();
    let state = read_state_dict(&dir.join(file)).unwrap_or_else(|e| panic!("{file}: {e:#}"));
    assert_eq!(ImportMode::detect(&state), ImportMode::Full, "{file}");
    let spec = tiny_spec();
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let model = DaNet::new(&vs.root(), &spec);
    let report = import_into(&mut vs, state, ImportMode::Full).unwrap();
    assert!(
        report.missing.is_empty(),
        "{file}: missing {:?}",
        report.missing
    );
    assert!(
        report.unexpected.is_empty(),
        "{file}: unexpected {:?}",
        report.unexpected
    );
    assert_eq!(report.loaded.len(), vs.variables().len());
    report.ensure_complete(ImportMode::Full).unwrap();

    let image = load(&dir.join("input.safetensors"));
    let ours = tch::no_grad(|| model.forward_all(&image, false));
    let reference = read_tensors(&dir.join("logits.safetensors"));
    for (name, t) in [
        ("fused", &ours.fused),
        ("position", &ours.position),
        ("channel", &ours.channel),
    ] {
        let diff = max_abs_diff(&tensor_to_f32(t), &reference[name].1);
        eprintln!("{file} {name}: max |tch - pytorch| = {diff:.3e}");
        assert!(
            diff < 1e-4,
            "{file} {name}: max abs diff {diff} exceeds 1e-4"
        );
    }
    (vs, report)
}

#[test]
fn torch_save_state_dicts_reproduce_pytorch_logits() {
    // zip (PyTorch >= 1.6), legacy (< 1.6), and storages tagged "cuda:0" (read to the CPU).
    for file in ["danet.pth", "danet_legacy.pth", "danet_cuda.pth"] {
        import_and_compare(file);
    }
}

#[test]
fn training_checkpoint_is_unwrapped() {
    let state = read_state_dict(&fixtures().join("danet.pth.tar")).unwrap();
    assert_eq!(state.root.as_deref(), Some("state_dict"));
    assert!(state.tensors.iter().all(|(n, _)| n.starts_with("module.")));
    // epoch, best_pred (numpy), args (Namespace), optimizer hyper-parameters and momenta.
    assert!(state.skipped > 10, "skipped {}", state.skipped);
    import_and_compare("danet.pth.tar");
}

#[test]
fn pytorch_safetensors_import() {
    import_and_compare("danet.safetensors");
}

#[test]
fn imported_model_saves_a_checkpoint_pytorch_loads_strictly() {
    // import -> our checkpoint -> the reference's load_state_dict(strict=True) -> same logits.
    let dir = fixtures();
    let (vs, _) = import_and_compare("danet.pth");
    let out = tempfile::tempdir().unwrap();
    let ckpt = out.path().join("imported.safetensors");
    checkpoint::save(&ckpt, &vs, &tiny_spec(), &Default::default()).unwrap();
    let outputs = out.path().join("outputs.safetensors");
    let status = python()
        .arg(reference_script())
        .arg(&ckpt)
        .arg(dir.join("input.safetensors"))
        .arg(&outputs)
        .status()
        .unwrap();
    assert!(status.success(), "danet_ref.py rejected the checkpoint");
    let (ours, theirs) = (
        read_tensors(&outputs),
        read_tensors(&dir.join("logits.safetensors")),
    );
    let diff = max_abs_diff(&ours["fused"].1, &theirs["fused"].1);
    eprintln!("round trip fused: max diff {diff:.3e}");
    assert!(diff < 1e-5);
}

#[test]
fn torchvision_resnet_initialises_the_backbone() {
    let state = read_state_dict(&fixtures().join("resnet_tv.pth")).unwrap();
    assert_eq!(ImportMode::detect(&state), ImportMode::Backbone);
    let conv = state
        .tensors
        .iter()
        .find(|(n, _)| n == "layer2.0.downsample.0.weight")
        .unwrap()
        .1
        .copy();
    let spec = spec(
        BackboneSpec {
            layers: [2, 2, 2, 2],
            ..BackboneSpec::tiny()
        },
        3,
    );
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &spec);
    let report = import_into(&mut vs, state, ImportMode::Backbone).unwrap();

    assert_eq!(
        report.unexpected,
        ["pretrained.fc.bias", "pretrained.fc.weight"]
    );
    let vars = vs.variables();
    let backbone = vars.keys().filter(|n| n.starts_with("pretrained.")).count();
    assert_eq!(report.loaded.len(), backbone);
    assert!(!report.missing.is_empty() && report.missing.iter().all(|n| n.starts_with("head.")));
    assert_eq!(report.missing.len(), vars.len() - backbone);
    report.ensure_complete(ImportMode::Backbone).unwrap();
    assert!(report.ensure_complete(ImportMode::Full).is_err());
    assert!(vars["pretrained.layer2.0.downsample.0.weight"].equal(&conv));

    // The same file into a shallower ResNet: layerK.1 has no place, which is an error.
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &tiny_spec());
    let state = read_state_dict(&fixtures().join("resnet_tv.pth")).unwrap();
    let report = import_into(&mut vs, state, ImportMode::Backbone).unwrap();
    let err = report
        .ensure_complete(ImportMode::Backbone)
        .unwrap_err()
        .to_string();
    assert!(err.contains("`pretrained.layer1.1.bn1.bias`"), "{err}");
}

#[test]
fn wrong_shape_names_the_key_and_both_shapes() {
    let spec = tiny_spec();
    let mut vs = nn::VarStore::new(tch::Device::Cpu);
    let _model = DaNet::new(&vs.root(), &spec);
    let want = vs.variables()["head.conv5a.0.weight"].size();
    let state = read_state_dict(&fixtures().join("bad_shape.pth")).unwrap();
    let err = format!(
        "{:#}",
        import_into(&mut vs, state, ImportMode::Full).unwrap_err()
    );
    eprintln!("{err}");
    assert!(err.contains("`head.conv5a.0.weight`"), "{err}");
    assert!(
        err.contains("[8, 4, 1, 1]") && err.contains(&format!("{want:?}")),
        "{err}"
    );
}

#[test]
fn broken_files_fail_naming_the_file() {
    let dir = fixtures();
    let out = tempfile::tempdir().unwrap();
    for (source, keep) in [
        ("danet.pth", 0.5),
        ("danet_legacy.pth", 0.5),
        ("danet_legacy.pth", 0.001),
        ("danet.safetensors", 0.5),
    ] {
        let bytes = std::fs::read(dir.join(source)).unwrap();
        let broken = out.path().join(format!("cut-{keep}-{source}"));
        std::fs::write(&broken, &bytes[..(bytes.len() as f64 * keep) as usize]).unwrap();
        let err = format!(
            "{:#}",
            read_state_dict(&broken)
                .err()
                .expect("a truncated file fails")
        );
        eprintln!("{err}");
        assert!(err.contains(&broken.display().to_string()), "{err}");
        assert!(err.contains("not a PyTorch checkpoint"), "{err}");
    }
    let text = out.path().join("notes.pth");
    std::fs::write(&text, "not a checkpoint").unwrap();
    assert!(format!("{:#}", read_state_dict(&text).err().unwrap())
        .contains("neither a torch.save file"));
}
