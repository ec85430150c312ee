#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| txgate_fuzz::raw_tx_differential(data));
