#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txgate_fuzz::proxyd_hook(data));
