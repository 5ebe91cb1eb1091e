//! Checkpoints round-trip exactly and reject files that do not fit the model.

use crate::common;

use common::*;
use segtool_model_spec::BackboneSpec;
use segtool_train::{checkpoint, load_model, Checkpoint};
use tch::{Kind, Tensor};

#[test]
fn roundtrip_gives_identical_outputs() {
    let spec = spec(BackboneSpec::tiny(), 3);
    let (vs, model) = random_model(&spec, 7);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    let info = [("iterations".to_string(), "12".to_string())]
        .into_iter()
        .collect();
    checkpoint::save(&path, &vs, &spec, &info).unwrap();
    let ckpt = Checkpoint::read(&path).unwrap();
    assert_eq!(ckpt.spec, spec);
    assert_eq!(ckpt.info["iterations"], "12");
    let (_vs2, model2) = load_model(&ckpt, tch::Device::Cpu).unwrap();
    let x = Tensor::randn([1, 3, 40, 48], (Kind::Float, tch::Device::Cpu));
    let (a, b) = tch::no_grad(|| {
        (
            model.forward_all(&x, false).fused,
            model2.forward_all(&x, false).fused,
        )
    });
    assert_eq!(max_abs_diff(&tensor_to_f32(&a), &tensor_to_f32(&b)), 0.0);
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        1,
        "no temp file left behind"
    );
}

#[test]
fn mismatched_truncated_and_missing_files_fail_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let spec5 = spec(BackboneSpec::tiny(), 5);
    let (vs, _) = random_model(&spec5, 1);
    let path = dir.path().join("five.safetensors");
    checkpoint::save(&path, &vs, &spec5, &Default::default()).unwrap();

    // A 5-class checkpoint loaded into a 3-class model: the classifier's shape differs.
    let mut ckpt = Checkpoint::read(&path).unwrap();
    ckpt.spec = spec(BackboneSpec::tiny(), 3);
    let err = load_model(&ckpt, tch::Device::Cpu)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("head.conv6.1.bias") && err.contains("[5]") && err.contains("[3]"),
        "{err}"
    );

    let bytes = std::fs::read(&path).unwrap();
    let truncated = dir.path().join("truncated.safetensors");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let err = format!("{:#}", Checkpoint::read(&truncated).err().unwrap());
    assert!(err.contains("truncated.safetensors"), "{err}");

    let err = format!(
        "{:#}",
        Checkpoint::read(&dir.path().join("nope.safetensors"))
            .err()
            .unwrap()
    );
    assert!(
        err.contains("nope.safetensors") && err.contains("No such file"),
        "{err}"
    );
}
