#![no_main]
//! The Kineto trace reader (and the analysis behind `gpufeed analyze`) on arbitrary bytes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpufeed::trace::analyze_reader(data, "fuzz");
});
