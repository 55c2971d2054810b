#![no_main]
//! The recording (NDJSON) reader on arbitrary bytes.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = gpufeed::read_from(std::path::Path::new("fuzz"), data, ());
});
