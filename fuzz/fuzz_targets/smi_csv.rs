#![no_main]
//! The nvidia-smi CSV importer on arbitrary bytes, with and without --columns; what it reads is
//! fed to the evidence builder and the rules (impossible values, NaN, odd times).
use gpufeed::diagnose::{evidence::EvidenceBuilder, rules, verdict};
use gpufeed::{read_smi_csv, CsvOptions, GpuSample, Header, Line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let cols = CsvOptions {
        columns: Some(vec!["utilization.gpu".into(), "memory.used".into()]),
        interval_s: Some(0.5),
    };
    for opts in [CsvOptions::default(), cols] {
        let mut b = EvidenceBuilder::new();
        if let Ok((h, _)) = read_smi_csv(std::io::Cursor::new(data), &opts, |r| {
            b.push(&Line::Gpu(GpuSample::from(r)))
        }) {
            let e = b.finish(&Header::from(h));
            let f = rules::evaluate(&e);
            let _ = verdict::decide(&e, &f);
        }
    }
});
