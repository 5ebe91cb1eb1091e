#![no_main]
// The body is targets/card_sidecar.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::card_sidecar::run(data));
