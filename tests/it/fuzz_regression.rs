//! The fuzzers' regression corpus, replayed on stable: every input of
//! fuzz/corpus/<target>/ (the minimised corpus, `cargo fuzz cmin`) and of
//! fuzz/regressions/<target>/ (every crash or hang input the fuzzers found; see
//! fuzz/FINDINGS.md) goes through the target's own body, fuzz/targets/<target>.rs, the
//! very file the fuzz binary runs. Each must end in success or a typed error: no panic
//! (caught or not: a panic hook counts them), no abort, and within `BOUND` per input.
//!
//! The targets of the ROS 2 package and the C library replay in ros2/tests/ and
//! capi/tests/ (fuzz_regression.rs there), the packages that have their dependencies.

#[path = "../../fuzz/targets/card_huggingface.rs"]
mod card_huggingface;
#[path = "../../fuzz/targets/card_mmdeploy.rs"]
mod card_mmdeploy;
#[path = "../../fuzz/targets/card_sidecar.rs"]
mod card_sidecar;
#[path = "../../fuzz/targets/config.rs"]
mod config;
#[path = "../../fuzz/targets/images.rs"]
mod images;
#[path = "../../fuzz/targets/onnx.rs"]
mod onnx;
#[path = "../../fuzz/targets/pickle.rs"]
mod pickle;
#[path = "../../fuzz/targets/raw_frames.rs"]
mod raw_frames;
#[path = "../../fuzz/targets/safetensors.rs"]
mod safetensors;
#[path = "../../fuzz/targets/support.rs"]
mod support;
#[path = "../../fuzz/targets/trt_cache.rs"]
mod trt_cache;

use std::path::Path;
use std::time::Duration;

/// Per input. The slowest input of each target is printed (`--nocapture`); on this
/// machine's 2 cores none takes more than a small fraction of it (fuzz/README.md).
const BOUND: Duration = Duration::from_secs(5);

fn replay(target: &str, run: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let r = support::replay(&fuzz, target, run, BOUND);
    println!(
        "fuzz {target}: {} inputs in {:.2?}, slowest {:.2?} ({})",
        r.files,
        r.total,
        r.slowest,
        r.slowest_file.display()
    );
}

#[test]
fn onnx_corpus() {
    replay("onnx", onnx::run);
}

#[test]
fn safetensors_corpus() {
    replay("safetensors", safetensors::run);
}

#[test]
fn pickle_corpus() {
    replay("pickle", pickle::run);
}

#[test]
fn config_corpus() {
    replay("config", config::run);
}

#[test]
fn images_corpus() {
    replay("images", images::run);
}

#[test]
fn raw_frames_corpus() {
    replay("raw_frames", raw_frames::run);
}

#[test]
fn trt_cache_corpus() {
    replay("trt_cache", trt_cache::run);
}

#[test]
fn card_mmdeploy_corpus() {
    replay("card_mmdeploy", card_mmdeploy::run);
}

#[test]
fn card_huggingface_corpus() {
    replay("card_huggingface", card_huggingface::run);
}

#[test]
fn card_sidecar_corpus() {
    replay("card_sidecar", card_sidecar::run);
}

/// Writes the seeds only Rust can make into `$SEGTOOL_FUZZ_SEEDS/<target>/`: a small real
/// checkpoint (DaNet at width 4, one block per layer: `checkpoint::save` of a freshly
/// built model) and its `segtool export`, the runtime's test graphs (a segtool export's
/// metadata on a 1x1 conv; a foreign graph). scripts/fuzz_seeds.sh runs it; a no-op
/// without the variable.
#[test]
#[ignore = "writes fuzz seeds (scripts/fuzz_seeds.sh)"]
fn write_fuzz_seeds() {
    use segtool_model_spec::{BackboneSpec, ModelSpec};
    let Some(out) = std::env::var_os("SEGTOOL_FUZZ_SEEDS") else {
        return;
    };
    let out = Path::new(&out);
    let dir = |target: &str| {
        let d = out.join(target);
        std::fs::create_dir_all(&d).unwrap();
        d
    };
    let mut backbone = BackboneSpec::tiny();
    backbone.width = 4;
    let classes = ["road", "person", "sky"].map(String::from).to_vec();
    let spec = ModelSpec::new("fuzz-seed", backbone, classes);
    let vs = tch::nn::VarStore::new(tch::Device::Cpu);
    let _model = segtool_train::DaNet::new(&vs.root(), &spec);
    let ckpt = dir("safetensors").join("width4.safetensors");
    let info = [("seed".to_string(), "scripts/fuzz_seeds.sh".to_string())].into();
    segtool_train::checkpoint::save(&ckpt, &vs, &spec, &info).unwrap();
    let onnx = dir("onnx").join("width4.onnx");
    segtool_export::export_onnx(&ckpt, &onnx, &Default::default()).unwrap();
    use segtool_testkit::{foreign_model_bytes, tiny_model_bytes, tiny_spec};
    let tiny = tiny_model_bytes(&tiny_spec(3), &[[1.0; 3], [0.0; 3], [-1.0; 3]], &[0.0; 3]);
    std::fs::write(dir("onnx").join("tiny.onnx"), tiny).unwrap();
    std::fs::write(
        dir("onnx").join("foreign.onnx"),
        foreign_model_bytes(3, 4, false),
    )
    .unwrap();
    std::fs::write(
        dir("onnx").join("foreign_argmax.onnx"),
        foreign_model_bytes(3, 4, true),
    )
    .unwrap();
}
