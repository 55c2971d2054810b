#![no_main]
//! The nvidia-smi CSV importer on arbitrary bytes, with and without --columns.
use gpufeed::sample::smi_csv::{read_smi_csv, CsvOptions};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = read_smi_csv(data, &CsvOptions::default(), |_| {});
    let cols = CsvOptions {
        columns: Some(vec!["utilization.gpu".into(), "memory.used".into()]),
        interval_s: Some(0.5),
    };
    let _ = read_smi_csv(data, &cols, |_| {});
});
