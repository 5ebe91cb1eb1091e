#![no_main]
// The body is targets/safetensors.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::safetensors::run(data));
