//! `gpufeed bench`: copy bandwidth and GEMM throughput on the GPU; exit 5 without one.

use crate::bench::{self, BenchOptions, SavedBench};
use crate::cli::{BenchArgs, GlobalOpts};
use crate::exit::{Exit, Failure};
use crate::present::OutputFormat;
use std::io::Write;

pub(crate) fn run(global: &GlobalOpts, args: &BenchArgs) -> anyhow::Result<u8> {
    if args.min_size == 0 || args.min_size > args.max_size {
        return Err(anyhow::Error::new(Failure::new(
            Exit::Usage,
            format!(
                "--min-size must be above 0 and at most --max-size (got {} and {})",
                args.min_size, args.max_size
            ),
        )));
    }
    let opts = BenchOptions {
        device: args.device,
        min_bytes: args.min_size,
        max_bytes: args.max_size,
        gemm_n: (!args.no_gemm).then_some(args.gemm_size),
        nvml_lib: global.nvml_lib.clone(),
    };
    let mut report = bench::run(&opts).map_err(Failure::from)?;
    if !args.no_save {
        match args.save_to.clone().or_else(bench::default_saved_path) {
            Some(path) => {
                let mut saved = SavedBench::load(&path).unwrap_or_default();
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs());
                saved.upsert(bench::saved_entry(&report, now));
                match saved.save(&path) {
                    Ok(()) => report.saved_to = Some(path),
                    Err(e) => eprintln!("gpufeed: warning: {e}"),
                }
            }
            None => eprintln!("gpufeed: warning: no HOME or XDG_CACHE_HOME: results not saved"),
        }
    }
    let text = match args.format {
        OutputFormat::Json => serde_json::to_string_pretty(&report)? + "\n",
        OutputFormat::Text | OutputFormat::Markdown | OutputFormat::Html => {
            crate::present::bench::text(&report)
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|_| out.flush());
    Ok(Exit::Ok.code())
}
