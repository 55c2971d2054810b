#![no_main]
//! The dcgmi / nvidia-smi dmon importer on arbitrary bytes; what it reads is fed to the evidence
//! builder and the rules.
use gpufeed::diagnose::{evidence::EvidenceBuilder, rules, verdict};
use gpufeed::{read_dmon, Flavour, GpuSample, Header, Line};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for (flavour, interval) in [(Flavour::Dcgmi, None), (Flavour::SmiDmon, Some(1.0))] {
        let mut b = EvidenceBuilder::new();
        if let Ok((h, _, prof)) = read_dmon(data, flavour, interval, |r| {
            b.push(&Line::Gpu(GpuSample::from(r)))
        }) {
            for (i, p) in prof {
                b.set_profiling(i, p);
            }
            let e = b.finish(&Header::from(h));
            let f = rules::evaluate(&e);
            let _ = verdict::decide(&e, &f);
        }
    }
});
