//! The GPU tier's skip-or-fail decisions (tests/gpu/verdict.rs), checked on any machine
//! with fake capability probes: the tier's green must mean the GPU paths work.

#[path = "../gpu/verdict.rs"]
mod verdict;

use verdict::{gated, run_fails, verdict, Outcome, Verdict};

#[test]
fn an_absent_provider_is_a_skip_with_its_reason() {
    let r = gated(
        || Err("libonnxruntime_providers_cuda.so: cannot open shared object file".into()),
        "ONNX Runtime's cuda:0 provider",
        || -> anyhow::Result<()> { panic!("the real model must not be opened") },
    )
    .unwrap();
    match r {
        Err(Outcome::Skipped(why)) => assert!(why.contains("cannot open shared object"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_provider_that_registers_and_then_fails_the_real_model_is_a_failure() {
    let r = gated(
        || Ok(()),
        "ONNX Runtime's tensorrt:0 provider",
        || -> anyhow::Result<()> { anyhow::bail!("TensorRT parser: unsupported node Attention") },
    );
    let e = r.expect_err("a failure, not a skip");
    let v = verdict(Ok(Err(e)));
    match v {
        Verdict::Failed(why) => {
            assert!(why.contains("unsupported node Attention"), "{why}");
            assert!(why.contains("registers on a trivial model"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn out_of_memory_and_panics_are_failures() {
    let oom = verdict(Ok(Err(anyhow::anyhow!("CUDA out of memory"))));
    assert!(
        matches!(oom, Verdict::Failed(ref w) if w.contains("out of memory")),
        "{oom:?}"
    );
    let panic = std::panic::catch_unwind(|| -> anyhow::Result<Outcome> { panic!("boom") });
    assert!(matches!(verdict(panic), Verdict::Failed(ref w) if w.contains("boom")));
    let ok = gated(|| Ok(()), "x", || Ok(7)).unwrap();
    assert!(matches!(ok, Ok(7)));
    let passed = verdict(Ok(Ok(Outcome::Passed("within 1e-4".into()))));
    assert_eq!(passed, Verdict::Passed("within 1e-4".into()));
}

#[test]
fn skips_fail_the_run_only_when_required() {
    assert!(!run_fails(0, 3, false));
    assert!(run_fails(0, 3, true));
    assert!(run_fails(1, 0, false));
    assert!(!run_fails(0, 0, true));
}
