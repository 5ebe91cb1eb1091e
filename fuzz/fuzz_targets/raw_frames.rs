#![no_main]
// The body is targets/raw_frames.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::raw_frames::run(data));
