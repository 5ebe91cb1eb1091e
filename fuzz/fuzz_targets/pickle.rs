#![no_main]
// The body is targets/pickle.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::pickle::run(data));
