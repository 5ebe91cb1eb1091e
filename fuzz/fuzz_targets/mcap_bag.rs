#![no_main]
// The body is targets/mcap_bag.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::mcap_bag::run(data));
