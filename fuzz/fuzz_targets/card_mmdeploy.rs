#![no_main]
// The body is targets/card_mmdeploy.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::card_mmdeploy::run(data));
