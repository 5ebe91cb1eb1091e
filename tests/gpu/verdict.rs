//! The GPU tier's decisions, free of any GPU so that `make test` checks them
//! (tests/it/gpu_verdicts.rs): a check is SKIPPED only where its capability is absent (no
//! CUDA device visible, or the provider does not register on a trivial model, the way
//! `segtool doctor` probes it). Once the capability is present, every error, panic, or
//! failed open of the real model is FAILED.

/// What a check that did not fail found.
#[derive(Debug)]
pub enum Outcome {
    Passed(String),
    Skipped(String),
}

/// The line a check ends with.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Passed(String),
    Failed(String),
    Skipped(String),
}

/// A check's run (its result, or the panic that ended it) as its verdict.
pub fn verdict(run: std::thread::Result<anyhow::Result<Outcome>>) -> Verdict {
    match run {
        Ok(Ok(Outcome::Passed(what))) => Verdict::Passed(what),
        Ok(Ok(Outcome::Skipped(why))) => Verdict::Skipped(why),
        Ok(Err(e)) => Verdict::Failed(format!("{e:#}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            Verdict::Failed(format!("panicked: {msg}"))
        }
    }
}

/// `open` once `probe` found the capability: `Ok(Err(Skipped))` with the probe's reason
/// when it is absent; when it is present, `open`'s error is returned as an error (the
/// check FAILS), never as a skip.
pub fn gated<T>(
    probe: impl FnOnce() -> Result<(), String>,
    what: &str,
    open: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<Result<T, Outcome>> {
    if let Err(why) = probe() {
        return Ok(Err(Outcome::Skipped(format!("{what} is absent: {why}"))));
    }
    match open() {
        Ok(v) => Ok(Ok(v)),
        Err(e) => Err(e.context(format!(
            "{what} registers on a trivial model but failed on this check's model"
        ))),
    }
}

/// Whether the run as a whole fails: any failure, or a skip when everything is required
/// (`SEGTOOL_GPU_REQUIRE=1`).
pub fn run_fails(failed: usize, skipped: usize, require: bool) -> bool {
    failed > 0 || (require && skipped > 0)
}
