#![no_main]
// The body is targets/trt_cache.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::trt_cache::run(data));
