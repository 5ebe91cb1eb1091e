#![no_main]
// The body is targets/card_huggingface.rs (replayed by the regression tests on stable).
libfuzzer_sys::fuzz_target!(|data: &[u8]| targets::card_huggingface::run(data));
