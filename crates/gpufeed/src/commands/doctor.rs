//! `gpufeed doctor`: check the machine and its software stack; exit 4 when a check fails.

use crate::cli::{DoctorArgs, GlobalOpts};
use crate::doctor::{self, Options, Workload};
use crate::exit::Exit;
use crate::present::OutputFormat;
use std::io::Write;

pub(crate) fn run(global: &GlobalOpts, args: &DoctorArgs) -> anyhow::Result<u8> {
    let opts = Options {
        nvml_lib: global.nvml_lib.clone(),
        python: args.python.clone(),
        python_timeout: args.python_timeout,
        data: args.data.clone(),
        data_sample_bytes: args.data_sample,
        data_sample_time: args.data_sample_time,
        workload: Workload {
            num_workers: args.num_workers,
            prefetch_factor: args.prefetch_factor,
            batch_bytes: args.batch_bytes,
        },
        shm_path: args.shm_path.clone(),
    };
    let report = doctor::run(&opts);
    let text = match args.format {
        OutputFormat::Json => {
            let mut s = serde_json::to_string_pretty(&report)?;
            s.push('\n');
            s
        }
        OutputFormat::Text | OutputFormat::Markdown | OutputFormat::Html => {
            crate::present::doctor::text(&report)
        }
    };
    let mut out = std::io::stdout().lock();
    // A closed pipe (`| head`) is not an error worth a message.
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(if report.any_failed() {
        Exit::CheckFailed.code()
    } else {
        Exit::Ok.code()
    })
}
