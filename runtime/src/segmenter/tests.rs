//! The segmenter on the tiny 1x1-conv model: mixed sizes in order, logits, and the
//! fallback report, through tract and ONNX Runtime.

use std::path::Path;

use crate::testing::{tiny_model_bytes, tiny_spec};
use crate::{Backend, Segmenter};
#[cfg(feature = "ort")]
use crate::{Fallback, ModelFileError, OrtEngine, OrtOptions, Provider, RuntimeError};
use image::{Rgb, RgbImage};

/// Class 0 scores red, class 1 green, class 2 blue: the mask is the dominant channel.
fn write_rgb_model(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("rgb.onnx");
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
    path
}

fn images() -> Vec<RgbImage> {
    let mut a = RgbImage::from_pixel(4, 3, Rgb([250, 0, 0]));
    a.put_pixel(1, 1, Rgb([0, 0, 250]));
    let b = RgbImage::from_pixel(2, 2, Rgb([0, 250, 0]));
    let c = RgbImage::from_pixel(4, 3, Rgb([0, 0, 250]));
    vec![a, b, c]
}

fn check_results(seg: &mut Segmenter) {
    let imgs = images();
    let out = seg.segment_batch(&imgs).unwrap();
    assert_eq!(out.len(), 3);
    assert_eq!(out[0].mask.dim(), (3, 4));
    assert_eq!(out[0].mask[[0, 0]], 0);
    assert_eq!(out[0].mask[[1, 1]], 2);
    assert!(out[1].mask.iter().all(|&m| m == 1));
    assert!(out[2].mask.iter().all(|&m| m == 2));
    assert_eq!(out[0].logits.as_ref().unwrap().dim(), (3, 3, 4));
    let single = seg.segment(&imgs[0]).unwrap();
    assert_eq!(single.mask, out[0].mask);
}

#[cfg(feature = "tract")]
#[test]
fn segmenter_with_tract_handles_mixed_sizes_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let mut seg = Segmenter::open(&path, Backend::Tract)
        .unwrap()
        .with_logits(true);
    assert_eq!(seg.spec(), &tiny_spec(3));
    assert_eq!(
        (seg.engine().name(), seg.engine().provider()),
        ("tract", "cpu")
    );
    check_results(&mut seg);
}

/// Needs `libonnxruntime` (ORT_DYLIB_PATH or the build-time path); skipped without it.
#[cfg(feature = "ort")]
#[test]
fn segmenter_with_ort_falls_back_to_cpu_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_rgb_model(dir.path());
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_provider(Provider::Cuda { device_id: 0 });
    let seg = match Segmenter::open(&path, Backend::Ort(options)) {
        Err(RuntimeError::OrtLibraryNotFound { tried }) => {
            eprintln!("skipping: no ONNX Runtime library ({tried:?})");
            return;
        }
        other => other.unwrap(),
    };
    let mut seg = seg.with_logits(true);
    assert_eq!(seg.engine().name(), "onnxruntime");
    if seg.engine().provider() == "cpu" {
        assert!(seg.engine().fallback_reason().unwrap().contains("cuda:0"));
        assert!(
            matches!(&seg.fallbacks()[0], Fallback::Provider { requested, running, .. }
                if requested == "cuda:0" && running == "cpu"),
            "{:?}",
            seg.fallbacks()
        );
    }
    check_results(&mut seg);

    let bad = dir.path().join("bad.onnx");
    std::fs::write(&bad, b"\x08\x08garbage").unwrap();
    let err = OrtEngine::open(&bad, &OrtOptions::new()).err().unwrap();
    assert!(
        matches!(err, RuntimeError::File(ModelFileError::Invalid { .. }))
            && err.to_string().contains("bad.onnx"),
        "{err}"
    );
}
