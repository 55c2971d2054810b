#![no_main]
//! The dcgmi / nvidia-smi dmon importer on arbitrary bytes.
use gpufeed::sample::dcgmi::{read_dmon, Flavour};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_dmon(data, Flavour::Dcgmi, None, |_| {});
    let _ = read_dmon(data, Flavour::SmiDmon, Some(1.0), |_| {});
});
