#![cfg(all(feature = "ort", feature = "tract"))]
//! Execution-provider choice: strict mode, reported CPU fallback, TensorRT options, and
//! the `auto` backend's fallback to tract when ONNX Runtime cannot be loaded.
//!
//! Written for a machine without a GPU (where CUDA and TensorRT cannot register); on a
//! GPU machine the same tests check that the requested provider is the one in use.

use std::path::{Path, PathBuf};

use segtool_runtime::expert::run_logits;
use segtool_runtime::openvino::{OpenVinoOptions, Precision};
use segtool_runtime::{
    expert::{Engine, OrtEngine},
    CudaOptions, EngineKind, OrtOptions, Provider, RuntimeError, Segmenter, TensorRtOptions,
};
use segtool_testkit::{tiny_model_bytes, tiny_spec};

fn model(dir: &Path) -> PathBuf {
    let path = dir.join("rgb.onnx");
    let w = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]];
    std::fs::write(&path, tiny_model_bytes(&tiny_spec(3), &w, &[0.0; 3])).unwrap();
    path
}

/// `None` when no ONNX Runtime library can be loaded at all: a missing reference (a
/// failure under `make test`, else a counted skip), and the test returns.
fn open(path: &Path, options: &OrtOptions) -> Option<Result<OrtEngine, RuntimeError>> {
    match OrtEngine::open(path, options) {
        Err(RuntimeError::OrtLibraryNotFound { tried }) => {
            segtool_testkit::missing_reference(
                format_args!("the ONNX Runtime library (tried {tried:?})"),
                "source \"$(bash scripts/setup.sh)\" (ORT_DYLIB_PATH: the onnxruntime wheel's)",
            );
            None
        }
        other => Some(other),
    }
}

#[test]
fn strict_cuda_without_gpu_is_an_error_naming_cuda() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_provider(Provider::Cuda { device_id: 0 })
        .strict(true);
    match open(&path, &options) {
        None => {}
        Some(Ok(engine)) => {
            // A GPU build with a GPU: strict means CUDA really is in use.
            assert_eq!(engine.provider(), "cuda:0");
            assert!(engine.fallback_reason().is_none());
        }
        Some(Err(e)) => {
            let msg = e.to_string();
            assert!(msg.contains("cuda"), "{msg}");
            assert!(msg.contains("strict"), "{msg}");
        }
    }
}

#[test]
fn non_strict_cuda_falls_back_to_cpu_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_cuda(CudaOptions::new(0).with_memory_limit(1 << 30));
    let Some(engine) = open(&path, &options) else {
        return;
    };
    let mut engine = engine.unwrap();
    if engine.provider() == "cpu" {
        let why = engine.fallback_reason().expect("a fallback reason");
        assert!(why.contains("cuda:0 unavailable"), "{why}");
    } else {
        assert_eq!(engine.provider(), "cuda:0");
    }
    let x = ndarray::Array4::<f32>::ones((1, 3, 2, 2));
    assert_eq!(
        run_logits(&mut engine, x.view()).unwrap().dim(),
        (1, 3, 2, 2)
    );
}

#[test]
fn tensorrt_options_and_strictness() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let cache = dir.path().join("trt-cache");
    let trt = TensorRtOptions::new(0)
        .with_fp16(true)
        .with_engine_cache_dir(&cache)
        .with_timing_cache_dir(&cache)
        .with_profile_shapes("image:1x3x8x8", "image:1x3x16x16", "image:2x3x32x32");
    let dbg = format!("{:?}", trt.to_ep());
    assert!(
        dbg.contains(r#""trt_profile_max_shapes": "image:2x3x32x32""#),
        "{dbg}"
    );
    assert!(dbg.contains(r#""trt_fp16_enable": "true""#), "{dbg}");
    assert_eq!(
        Provider::TensorRtWith(trt.clone()).to_string(),
        "tensorrt:0(fp16)"
    );
    // The provider strings still parse to the short forms.
    assert_eq!(
        "tensorrt-fp16:1".parse::<Provider>().unwrap(),
        Provider::TensorRt {
            device_id: 1,
            fp16: true,
            cache_dir: None
        }
    );

    let strict = OrtOptions::new()
        .with_intra_threads(1)
        .with_tensorrt(trt.clone())
        .strict(true);
    match open(&path, &strict) {
        None => return,
        Some(Ok(engine)) => assert!(engine.provider().starts_with("tensorrt:0")),
        Some(Err(e)) => assert!(
            e.to_string().contains("tensorrt:0(fp16) unavailable"),
            "{e}"
        ),
    }
    let lenient = OrtOptions::new().with_intra_threads(1).with_tensorrt(trt);
    let engine = open(&path, &lenient).unwrap().unwrap();
    if engine.provider() == "cpu" {
        assert!(engine
            .fallback_reason()
            .unwrap()
            .contains("tensorrt:0(fp16)"));
    }
    // Strict with CPU listed explicitly: CPU is a requested provider, not a fallback.
    let cpu = OrtOptions::new()
        .with_intra_threads(1)
        .with_provider(Provider::Cuda { device_id: 0 })
        .with_provider(Provider::Cpu)
        .strict(true);
    let engine = open(&path, &cpu).unwrap().unwrap();
    assert!(["cpu", "cuda:0"].contains(&engine.provider()));
}

/// A builder for `path` whose auto cache is `cache` (a test's own, never the user's).
fn auto(path: &Path, cache: &Path) -> segtool_runtime::SegmenterBuilder {
    Segmenter::builder(path)
        .engine(EngineKind::Auto)
        .auto_cache(Some(cache.join("auto-engine.json")))
}

#[test]
fn auto_backend_falls_back_to_tract_when_ort_cannot_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let bogus = OrtOptions::new().with_dylib_path(dir.path().join("no/libonnxruntime.so"));
    let no_openvino = OpenVinoOptions {
        library: Some(dir.path().join("no/libopenvino_c.so")),
        ..OpenVinoOptions::new()
    };
    let without_libraries = || {
        auto(&path, dir.path())
            .ort_options(bogus.clone())
            .openvino_options(no_openvino.clone())
    };
    // Timed now, then taken from the cache: the same choice, the same report.
    for kept in ["timed now, cached in", "; cached in"] {
        let seg = without_libraries().open().unwrap();
        assert_eq!(seg.engine().name(), "tract");
        let choice = seg.engine_choice().unwrap();
        assert!(
            choice.starts_with("auto chose tract: the fastest when timed"),
            "{choice}"
        );
        assert!(choice.contains("onnxruntime is missing"), "{choice}");
        assert!(choice.contains(kept), "{choice}");
        let kinds: Vec<&str> = seg.fallbacks().iter().map(|f| f.kind()).collect();
        assert_eq!(kinds, ["ort_library_missing"]);
    }
    // strict refuses it: tract is not what was asked of a machine without ONNX Runtime.
    match without_libraries().strict(true).open() {
        Err(RuntimeError::FallbackRefused { fallback, .. }) => {
            assert!(
                fallback.contains("ONNX Runtime cannot be loaded"),
                "{fallback}"
            )
        }
        other => panic!("strict auto without ONNX Runtime: {:?}", other.err()),
    }
    // Explicit ONNX Runtime stays an error.
    match Segmenter::builder(&path)
        .engine(EngineKind::Ort)
        .ort_options(bogus)
        .open()
    {
        Err(RuntimeError::OrtLibraryNotFound { tried }) => {
            assert!(
                tried.iter().any(|t| t.contains("libonnxruntime.so")),
                "{tried:?}"
            )
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a bogus library path must not load"),
    }
}

#[test]
fn auto_times_the_engines_on_this_machine_and_keeps_the_fastest() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    if open(&path, &OrtOptions::new().with_intra_threads(1)).is_none() {
        return;
    }
    // Every engine this build has is timed, with its median in the report.
    let seg = auto(&path, dir.path()).threads(1).open().unwrap();
    let choice = seg.engine_choice().unwrap().to_string();
    let running = seg.engine().name().to_string();
    assert!(
        choice.starts_with(&format!(
            "auto chose {running}: the fastest when timed on this machine at 512x512, 1 thread: "
        )),
        "{choice}"
    );
    for engine in ["onnxruntime", "tract", "openvino"] {
        assert!(choice.contains(&format!("{engine} ")), "{engine}: {choice}");
    }
    assert!(choice.contains("timed now, cached in"), "{choice}");
    assert!(seg.fallbacks().is_empty(), "{:?}", seg.fallbacks());
    // The fastest median is the one chosen: it comes first in the report.
    let first = choice.split(": ").nth(2).unwrap();
    assert!(first.starts_with(&format!("{running} ")), "{choice}");
    // Taken from the cache the second time: the same engine, nothing timed.
    let again = auto(&path, dir.path()).threads(1).open().unwrap();
    assert_eq!(again.engine().name(), running);
    assert!(again.engine_choice().unwrap().contains("; cached in"));
    // Another thread count, another fixed size or another file is another entry.
    let two = auto(&path, dir.path())
        .threads(2)
        .fixed_size(32, 48)
        .open()
        .unwrap();
    let two = two.engine_choice().unwrap();
    assert!(
        two.contains("at 32x48, 2 threads") && two.contains("timed now"),
        "{two}"
    );
    // Without a cache, every open times.
    let uncached = Segmenter::builder(&path)
        .threads(1)
        .auto_cache(None)
        .open()
        .unwrap();
    assert!(uncached
        .engine_choice()
        .unwrap()
        .ends_with("timed now, not cached"));
}

#[test]
fn auto_rules_and_their_fallbacks() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    if open(&path, &OrtOptions::new().with_intra_threads(1)).is_none() {
        return;
    }
    // bf16 asked for: OpenVINO, the one engine that computes it.
    if cfg!(feature = "openvino") {
        let seg = auto(&path, dir.path())
            .precision(Precision::Bf16)
            .threads(1)
            .open()
            .unwrap();
        assert_eq!(seg.engine().name(), "openvino", "{:?}", seg.engine_choice());
        assert_eq!(
            seg.engine_choice(),
            Some("auto chose openvino: bf16 asked for, which only OpenVINO computes")
        );
        // Without OpenVINO: ONNX Runtime at float32, a fallback that strict refuses.
        let no_openvino = OpenVinoOptions {
            precision: Precision::Bf16,
            library: Some(dir.path().join("no/libopenvino_c.so")),
            ..OpenVinoOptions::new()
        };
        let seg = auto(&path, dir.path())
            .openvino_options(no_openvino.clone())
            .threads(1)
            .open()
            .unwrap();
        assert_eq!(seg.engine().name(), "onnxruntime");
        let kinds: Vec<&str> = seg.fallbacks().iter().map(|f| f.kind()).collect();
        assert_eq!(
            kinds,
            ["engine", "option_not_applied"],
            "{:?}",
            seg.fallbacks()
        );
        let text = seg.fallbacks()[0].to_string();
        assert!(text.contains("did not open the model"), "{text}");
        assert!(text.contains("libopenvino_c.so"), "{text}");
        assert!(seg.fallbacks()[1].to_string().contains("precision bf16"));
        let strict = auto(&path, dir.path())
            .openvino_options(no_openvino)
            .strict(true)
            .open();
        assert!(
            matches!(strict, Err(RuntimeError::FallbackRefused { .. })),
            "{:?}",
            strict.err()
        );
    }
    // A GPU provider asked of ONNX Runtime keeps it, on any CPU.
    let seg = auto(&path, dir.path())
        .providers([Provider::Cuda { device_id: 0 }])
        .threads(1)
        .open()
        .unwrap();
    assert_eq!(seg.engine().name(), "onnxruntime");
    assert_eq!(
        seg.engine_choice(),
        Some("auto chose onnxruntime: cuda:0 asked for")
    );
    // A size too large to time at (its probe alone would take gigabytes): ONNX Runtime,
    // untimed, saying why.
    let seg = auto(&path, dir.path())
        .fixed_size(5000, 5000)
        .threads(1)
        .open()
        .unwrap();
    assert_eq!(seg.engine().name(), "onnxruntime");
    let choice = seg.engine_choice().unwrap();
    assert!(
        choice.contains("5000x5000 is too large to time"),
        "{choice}"
    );
    // A named engine makes no choice.
    let seg = Segmenter::builder(&path)
        .engine(EngineKind::Ort)
        .open()
        .unwrap();
    assert_eq!(seg.engine_choice(), None);
}

#[test]
fn an_option_the_named_engine_does_not_take_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let refused = |builder: segtool_runtime::SegmenterBuilder, name: &str| match builder.open() {
        Err(RuntimeError::Option { name: n, message }) => {
            assert_eq!(n, name, "{message}");
            message
        }
        other => panic!("{name}: {:?}", other.err()),
    };
    let b = || Segmenter::builder(&path);
    let why = refused(
        b().engine(EngineKind::Ort).precision(Precision::Bf16),
        "precision",
    );
    assert!(
        why.contains("OpenVINO's") && why.contains("ort runs the model"),
        "{why}"
    );
    refused(
        b().engine(EngineKind::Tract).precision(Precision::Bf16),
        "precision",
    );
    refused(
        b().engine(EngineKind::Tract).fixed_size(32, 48),
        "fixed_size",
    );
    refused(b().engine(EngineKind::Ort).streams(2), "streams");
    refused(
        b().engine(EngineKind::OpenVino)
            .providers([Provider::Cuda { device_id: 0 }]),
        "providers",
    );
    // 0 threads is the engine's default in every front end, not 1.
    let seg = b().engine(EngineKind::Tract).threads(0).open().unwrap();
    assert_eq!(seg.engine().name(), "tract");
}

#[test]
fn fixed_input_size_gives_the_same_logits_and_refuses_other_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let cpu = OrtOptions::new().with_intra_threads(1);
    let Some(dynamic) = open(&path, &cpu) else {
        return;
    };
    let mut dynamic = dynamic.unwrap();
    let mut fixed = open(&path, &cpu.clone().with_fixed_input_size(6, 5))
        .unwrap()
        .unwrap();
    let x = ndarray::Array4::from_shape_fn((2, 3, 6, 5), |(n, c, y, x)| {
        (n * 7 + c * 5 + y * 3 + x) as f32 * 0.1 - 1.0
    });
    let want = run_logits(&mut dynamic, x.view()).unwrap();
    // A batch of 2 and then of 1: the batch stays dynamic.
    assert_eq!(run_logits(&mut fixed, x.view()).unwrap(), want);
    let one = x.slice(ndarray::s![..1, .., .., ..]);
    assert_eq!(
        run_logits(&mut fixed, one).unwrap(),
        run_logits(&mut dynamic, one).unwrap()
    );

    let other = ndarray::Array4::<f32>::zeros((1, 3, 4, 4));
    let err = run_logits(&mut fixed, other.view())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains('6') && err.contains('5') && err.contains('4'),
        "{err}"
    );
    assert!(run_logits(&mut dynamic, other.view()).is_ok());
}

/// ONNX Runtime's own profile says which provider ran each node: on this CPU session,
/// every node of the graph, on the CPU provider (the GPU tier reads the same trace to
/// show what CUDA and TensorRT took).
#[test]
fn profile_names_the_provider_of_every_node() {
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let options = OrtOptions::new()
        .with_intra_threads(1)
        .with_profiling(dir.path().join("trace"));
    let Some(engine) = open(&path, &options) else {
        return;
    };
    let mut engine = engine.unwrap();
    let x = ndarray::Array4::<f32>::zeros((1, 3, 4, 4));
    run_logits(&mut engine, x.view()).unwrap();
    let placement = engine.end_profiling().unwrap();
    assert!(
        !placement.nodes("CPUExecutionProvider").is_empty(),
        "{}",
        placement.summary()
    );
    assert!(
        placement.elsewhere("CPUExecutionProvider").is_empty(),
        "{}",
        placement.summary()
    );
}

#[test]
fn the_segmenter_reports_the_options_it_was_opened_with() {
    use segtool_runtime::openvino::{Device, PerformanceHint};
    use segtool_runtime::SegmenterOptions;
    let dir = tempfile::tempdir().unwrap();
    let path = model(dir.path());
    let defaults = Segmenter::builder(&path)
        .engine(EngineKind::Tract)
        .open()
        .unwrap();
    let want = SegmenterOptions {
        engine: EngineKind::Tract,
        ..SegmenterOptions::default()
    };
    assert_eq!(defaults.options(), &want);
    // Every option set through the one value comes back as set (0 threads: the default).
    let set = SegmenterOptions {
        engine: EngineKind::Ort,
        providers: vec!["cuda:1".into(), "cpu".into()],
        threads: Some(2),
        fixed_size: Some([32, 48]),
        logits: true,
        ..SegmenterOptions::default()
    };
    if open(&path, &OrtOptions::new()).is_none() {
        return;
    }
    let seg = Segmenter::builder(&path)
        .options(&set)
        .unwrap()
        .open()
        .unwrap();
    assert_eq!(seg.options(), &set);
    let zero = SegmenterOptions {
        threads: Some(0),
        ..set.clone()
    };
    let seg = Segmenter::builder(&path)
        .options(&zero)
        .unwrap()
        .open()
        .unwrap();
    assert_eq!(seg.options().threads, None);
    if cfg!(feature = "openvino") {
        let openvino = SegmenterOptions {
            engine: EngineKind::OpenVino,
            device: Device::Cpu,
            precision: Precision::Bf16,
            hint: PerformanceHint::Throughput,
            streams: Some(2),
            threads: Some(1),
            strict: true,
            ..SegmenterOptions::default()
        };
        let seg = Segmenter::builder(&path)
            .options(&openvino)
            .unwrap()
            .open()
            .unwrap();
        assert_eq!(seg.options(), &openvino);
    }
}
