#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    rnnlens_fuzz::checkpoint(data);
});
