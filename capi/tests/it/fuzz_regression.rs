//! The C ABI fuzzer's regression corpus, replayed on stable: fuzz/corpus/capi/ and
//! fuzz/regressions/capi/ through fuzz/targets/capi.rs, the body the fuzz binary runs (see
//! tests/it/fuzz_regression.rs at the workspace root). tract only: ONNX Runtime is never
//! loaded in this process.

#[path = "../../../fuzz/targets/capi.rs"]
mod capi;
#[path = "../../../fuzz/targets/support.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

#[test]
fn capi_corpus() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let r = support::replay(&fuzz, "capi", capi::run, Duration::from_secs(5));
    println!(
        "fuzz capi: {} inputs in {:.2?}, slowest {:.2?} ({})",
        r.files,
        r.total,
        r.slowest,
        r.slowest_file.display()
    );
}
