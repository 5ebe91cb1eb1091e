//! The ROS 2 fuzzers' regression corpus, replayed on stable: fuzz/corpus/{cdr,mcap_bag}/
//! and fuzz/regressions/{cdr,mcap_bag}/ through fuzz/targets/{cdr,mcap_bag}.rs, the bodies
//! the fuzz binaries run (see tests/it/fuzz_regression.rs at the workspace root).

#[path = "../../../fuzz/targets/cdr.rs"]
mod cdr;
#[path = "../../../fuzz/targets/mcap_bag.rs"]
mod mcap_bag;
#[path = "../../../fuzz/targets/support.rs"]
mod support;

use std::path::Path;
use std::time::Duration;

fn replay(target: &str, run: fn(&[u8])) {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let r = support::replay(&fuzz, target, run, Duration::from_secs(5));
    println!(
        "fuzz {target}: {} inputs in {:.2?}, slowest {:.2?} ({})",
        r.files,
        r.total,
        r.slowest,
        r.slowest_file.display()
    );
}

#[test]
fn cdr_corpus() {
    replay("cdr", cdr::run);
}

#[test]
fn mcap_bag_corpus() {
    replay("mcap_bag", mcap_bag::run);
}
