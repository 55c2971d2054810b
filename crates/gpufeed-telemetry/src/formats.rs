//! Every format the engine reads, in one table ([`FORMATS`]): its name (the `--input-format`
//! value and the `format` of a JSON report), what it is, how the first bytes of a file are told
//! to be it, and its reader. Detection asks the formats in the table's order; [`read`] hands a
//! file to the reader of its format. A new format is a variant of [`Format`] and a row here.

use std::collections::BTreeMap;
use std::path::Path;

use crate::dcgmi::{self, Flavour, ProfilingMeans};
use crate::reading::{LogHeader, Reading};
use crate::smi_csv::{self, CsvOptions};
use crate::{
    csv_table, mlflow, monitor_text, prom, rocm_table, smi_q, smi_table, tegrastats, wandb,
    LogError, LogInfo,
};

/// A telemetry format (snake case is its public name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Format {
    SmiCsv,
    SmiDmon,
    Dcgmi,
    Csv,
    Wandb,
    Prometheus,
    PrometheusJson,
    Mlflow,
    RocmSmi,
    SmiTable,
    Gpustat,
    GpustatJson,
    SmiQ,
    SmiQXml,
    ComputeApps,
    Tegrastats,
    WandbRun,
    XpuSmi,
    MonitorText,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// What the format is, for `--help`.
    pub fn about(self) -> &'static str {
        spec(self).about
    }
}

/// What a reader is given besides the file: options for logs that do not describe themselves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Column names (nvidia-smi CSV `noheader` logs) or renames (`NAME=KNOWN`).
    pub columns: Option<Vec<String>>,
    /// Seconds between polls in logs without timestamps.
    pub interval_s: Option<f64>,
}

/// What a reader hands back besides the readings: the log's GPUs and interval, how it was read,
/// and each GPU's means of the DCGM profiling fields where the format has them.
pub type Read = (LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>);

/// What a reader reads: a file (opened once, a pipe's spill included), or a folder (MLflow).
pub enum Source<'a> {
    File(std::fs::File),
    Dir(&'a Path),
}

type Reader = fn(Source<'_>, &Options, &mut dyn FnMut(&Reading)) -> Result<Read, LogError>;

/// The first bytes of a file as detection looks at them.
pub struct Head<'a> {
    /// The text, a UTF-8 byte-order mark taken off.
    pub text: &'a str,
    /// The first 20 non-blank lines that are not lines of nvidia-smi's own table (a table
    /// dumped before a log, as job scripts do, says nothing of the log's format), trimmed.
    lines: Vec<&'a str>,
    /// The first of them opens a JSON object or array.
    json: bool,
}

impl<'a> Head<'a> {
    pub fn new(head: &'a str) -> Self {
        let text = head.strip_prefix('\u{feff}').unwrap_or(head);
        let lines: Vec<&str> = text
            .lines()
            .map(|l| l.trim_matches(|c: char| c.is_whitespace() || c == '\0'))
            .filter(|l| !l.is_empty() && !is_smi_table_line(l))
            .take(20)
            .collect();
        let json = lines
            .first()
            .is_some_and(|f| f.starts_with('{') || f.starts_with('['));
        Head { text, lines, json }
    }

    /// The first line that counts (not blank, not a line of nvidia-smi's table).
    pub fn first_line(&self) -> Option<&'a str> {
        self.lines.first().copied()
    }

    /// A log's lines (not JSON) hold something.
    fn text_log(&self) -> bool {
        !self.lines.is_empty() && !self.json
    }
}

/// One format: its name, what it is, how it is told, and its reader.
pub struct Spec {
    pub format: Format,
    /// What it is (`--input-format`'s help).
    pub about: &'static str,
    holds: fn(&Head) -> bool,
    read: Reader,
}

macro_rules! interval_reader {
    ($f:path) => {
        |src, o, v| match src {
            Source::File(file) => $f(file, o.interval_s, v),
            Source::Dir(p) => Err(not_a_file(p)),
        }
    };
}

fn not_a_file(p: &Path) -> LogError {
    LogError::Format(format!("{} is a folder, not a log", p.display()))
}

/// Every format, in the order detection asks them: the pasted views whose lines look like other
/// logs' (gpustat's commas and units, `-q`'s keys) first, nvidia-smi's table last (a table before
/// another log says nothing of the log's format; a table alone is the log).
pub const FORMATS: &[Spec] = &[
    Spec {
        format: Format::WandbRun,
        about: "W&B run file (run-ID.wandb, binary): its system metrics",
        holds: |h| h.text.as_bytes().starts_with(wandb::RUN_FILE_MAGIC),
        read: interval_reader!(wandb::read_run),
    },
    Spec {
        format: Format::Gpustat,
        about: "gpustat's text output, once or looped",
        holds: |h| smi_table::holds_gpustat(h.text),
        read: interval_reader!(smi_table::read_gpustat),
    },
    Spec {
        format: Format::GpustatJson,
        about: "gpustat --json output, once or looped",
        holds: |h| smi_table::holds_gpustat_json(h.text),
        read: interval_reader!(smi_table::read_gpustat_json),
    },
    Spec {
        format: Format::SmiQXml,
        about: "nvidia-smi -q -x XML reports, once or looped",
        holds: |h| smi_q::holds_xml(h.text),
        read: interval_reader!(smi_q::read_xml),
    },
    Spec {
        format: Format::SmiQ,
        about: "nvidia-smi -q text reports, once or looped",
        holds: |h| smi_q::holds_text(h.text),
        read: interval_reader!(smi_q::read_text),
    },
    Spec {
        format: Format::ComputeApps,
        about: "nvidia-smi --query-compute-apps=... --format=csv (memory per process)",
        holds: |h| smi_table::holds_compute_apps(h.text),
        read: interval_reader!(smi_table::read_compute_apps),
    },
    Spec {
        format: Format::RocmSmi,
        about: "rocm-smi's concise table (Device … VRAM% GPU%), as job logs hold it",
        holds: |h| !h.lines.is_empty() && rocm_table::holds_table(h.text),
        read: interval_reader!(rocm_table::read),
    },
    Spec {
        format: Format::Tegrastats,
        about: "Jetson tegrastats logs (GR3D_FREQ busy percent, the board's shared RAM)",
        holds: |h| h.text_log() && tegrastats::holds(h.text),
        read: interval_reader!(tegrastats::read),
    },
    Spec {
        format: Format::PrometheusJson,
        about: "Prometheus HTTP API query result (/api/v1/query_range JSON)",
        holds: |h| h.json && (h.text.contains("\"resultType\"") || h.text.contains("\"__name__\"")),
        read: interval_reader!(prom::read_json),
    },
    Spec {
        format: Format::Wandb,
        about: "W&B system metrics (wandb-events.jsonl)",
        holds: |h| {
            h.json && (h.lines[0].contains("\"system.") || h.lines[0].contains("\"_wandb\""))
        },
        read: interval_reader!(wandb::read_events),
    },
    Spec {
        format: Format::Prometheus,
        about: "Prometheus text scrapes (dcgm-exporter, nvidia_gpu_exporter)",
        holds: |h| h.text_log() && holds_prometheus(&h.lines),
        read: interval_reader!(prom::read_text),
    },
    Spec {
        format: Format::Dcgmi,
        about: "dcgmi dmon output",
        holds: |h| h.text_log() && dmon_flavour(&h.lines) == Some(Flavour::Dcgmi),
        read: |src, o, v| match src {
            Source::File(file) => dcgmi::read_dmon(file, Flavour::Dcgmi, o.interval_s, v),
            Source::Dir(p) => Err(not_a_file(p)),
        },
    },
    Spec {
        format: Format::SmiDmon,
        about: "nvidia-smi dmon output",
        holds: |h| h.text_log() && dmon_flavour(&h.lines) == Some(Flavour::SmiDmon),
        read: |src, o, v| match src {
            Source::File(file) => dcgmi::read_dmon(file, Flavour::SmiDmon, o.interval_s, v),
            Source::Dir(p) => Err(not_a_file(p)),
        },
    },
    Spec {
        format: Format::XpuSmi,
        about: "Intel xpu-smi dump CSV (Timestamp, DeviceId, GPU Utilization (%), ...)",
        holds: |h| h.text_log() && h.lines.iter().any(|l| is_xpu_dump_header(l)),
        read: |src, o, v| match src {
            Source::File(file) => {
                let opts = CsvOptions {
                    columns: o.columns.clone(),
                    interval_s: o.interval_s,
                };
                let (h, info) = smi_csv::read_smi_csv(file, &opts, v)?;
                Ok((h, info, BTreeMap::new()))
            }
            Source::Dir(p) => Err(not_a_file(p)),
        },
    },
    Spec {
        format: Format::Csv,
        about: "Another tool's CSV: DCGM (EntityId,GRACT,…), W&B or MLflow export, Grafana, rocm-smi, amd-smi",
        holds: |h| h.text_log() && h.lines.iter().any(|l| csv_table::is_other_tools_header(l)),
        read: |src, o, v| match src {
            Source::File(file) => {
                let cols = o.columns.clone().unwrap_or_default();
                csv_table::read_csv(file, &cols, o.interval_s, v)
            }
            Source::Dir(p) => Err(not_a_file(p)),
        },
    },
    Spec {
        format: Format::SmiCsv,
        about: "nvidia-smi --query-gpu=... --format=csv log",
        holds: |h| h.text_log() && holds_smi_csv(&h.lines),
        read: |src, o, v| match src {
            Source::File(file) => {
                let opts = CsvOptions {
                    columns: o.columns.clone(),
                    interval_s: o.interval_s,
                };
                let (h, info) = smi_csv::read_smi_csv(file, &opts, v)?;
                Ok((h, info, BTreeMap::new()))
            }
            Source::Dir(p) => Err(not_a_file(p)),
        },
    },
    Spec {
        format: Format::Mlflow,
        about: "MLflow run folder (metrics/system/gpu_0_utilization_percentage)",
        // A folder: told by its path ([`mlflow::system_dir`]), not by bytes.
        holds: |_| false,
        read: |src, o, v| match src {
            Source::Dir(p) => mlflow::read_run(p, o.interval_s, v),
            Source::File(_) => Err(LogError::Format(
                "an MLflow run is a folder: give its path".into(),
            )),
        },
    },
    Spec {
        format: Format::MonitorText,
        about: "A monitoring script's text log: `GPU Load: 45%` lines under time banners",
        holds: |h| !h.json && monitor_text::holds(h.text),
        read: interval_reader!(monitor_text::read),
    },
    Spec {
        format: Format::SmiTable,
        about: "The plain nvidia-smi table (or nvitop -1), once or looped (watch, date banners)",
        holds: |h| !h.json && smi_table::holds_table(h.text),
        read: interval_reader!(smi_table::read),
    },
];

/// The row of a format.
pub fn spec(f: Format) -> &'static Spec {
    FORMATS
        .iter()
        .find(|s| s.format == f)
        .expect("every format has a row (formats::tests)")
}

/// The format the first bytes of a file show, `None` when none of the engine's (a recording,
/// a JSON file of another kind, text).
pub fn detect(head: &str) -> Option<Format> {
    let h = Head::new(head);
    FORMATS.iter().find(|s| (s.holds)(&h)).map(|s| s.format)
}

/// Reads `src` as `format`, handing each reading to `visit`.
pub fn read(
    format: Format,
    src: Source<'_>,
    opts: &Options,
    visit: &mut dyn FnMut(&Reading),
) -> Result<Read, LogError> {
    (spec(format).read)(src, opts, visit)
}

/// `xpu-smi dump`'s header: its time and device columns, then its metrics' names with units
/// (the columns are the same as an nvidia-smi query log's, under Intel's names, and the same
/// reader reads them through the vocabulary).
fn is_xpu_dump_header(l: &str) -> bool {
    let mut f = l.split(',').map(str::trim);
    f.next() == Some("Timestamp")
        && f.next() == Some("DeviceId")
        && f.next()
            .is_some_and(|m| m.starts_with("GPU ") && m.ends_with(')'))
}

/// Prometheus's text format: a `# TYPE` or `# HELP` line, or mostly `name{labels} value` lines.
fn holds_prometheus(lines: &[&str]) -> bool {
    let prom_sample = |l: &str| {
        let name_end = l.find('{').unwrap_or(0);
        name_end > 0
            && l[..name_end]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
            && l.contains('}')
    };
    lines
        .iter()
        .any(|l| l.starts_with("# TYPE ") || l.starts_with("# HELP "))
        || lines.iter().filter(|l| prom_sample(l)).count() * 2 > lines.len()
}

/// Which `dmon` wrote the first line that tells: a `#Entity` header or a `GPU N` row is dcgmi's,
/// a `# gpu … sm` header nvidia-smi's.
fn dmon_flavour(lines: &[&str]) -> Option<Flavour> {
    for l in lines {
        if let Some(rest) = l.strip_prefix('#') {
            let toks: Vec<String> = rest
                .split_whitespace()
                .map(|t| t.to_ascii_lowercase())
                .collect();
            if toks.first().is_some_and(|t| t == "entity") {
                return Some(Flavour::Dcgmi);
            }
            if toks.iter().any(|t| t == "gpu")
                && toks
                    .iter()
                    .any(|t| ["sm", "pwr", "mem", "fb", "rxpci", "gtemp"].contains(&t.as_str()))
            {
                return Some(Flavour::SmiDmon);
            }
        }
        if l.starts_with("GPU ")
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|t| t.parse::<u32>().is_ok())
        {
            return Some(Flavour::Dcgmi);
        }
    }
    None
}

/// An nvidia-smi `--query-gpu` CSV: one field's query looped, or mostly comma-separated lines
/// with a header nvidia-smi or a script would write, units in the values, or only numbers
/// (`noheader,nounits`: the reader asks for --columns).
fn holds_smi_csv(lines: &[&str]) -> bool {
    let csv_like = lines.iter().filter(|l| l.contains(',')).count();
    if csv_like == 0 && one_field_query(lines) {
        return true;
    }
    if csv_like * 2 < lines.len() {
        return false;
    }
    let known = [
        "utilization.gpu",
        "memory.used",
        "memory.total",
        "timestamp",
        "pci.bus_id",
        "index",
    ];
    let has_header = lines.iter().any(|l| {
        let lower = l.to_ascii_lowercase();
        known.iter().any(|k| lower.contains(k)) || smi_csv::looks_like_header(l)
    });
    let has_units = lines.iter().any(|l| l.contains(" %") || l.contains("MiB"));
    let numeric = lines.iter().all(|l| {
        l.split(',').all(|v| {
            let v = v.trim();
            v.parse::<f64>().is_ok() || v.starts_with('[')
        })
    });
    has_header || has_units || (numeric && lines.iter().any(|l| l.contains(',')))
}

/// A line of `nvidia-smi`'s own table (`+---…`, `| GPU  Name …|`, `|===…`).
pub fn is_smi_table_line(l: &str) -> bool {
    l.starts_with('|') || l.starts_with("+-") || l.starts_with("+=")
}

/// A query of one field (`--query-gpu=utilization.gpu --format=csv`, often in a loop that writes
/// the header before every reading): no commas, only the field's header and values with its unit.
fn one_field_query(lines: &[&str]) -> bool {
    // `utilization.gpu [%]`: a field name and at most its unit.
    let header = |l: &str| {
        let l = l.to_ascii_lowercase();
        let mut t = l.split_whitespace();
        t.next().is_some_and(|f| {
            ["utilization.", "memory.", "power.draw", "temperature.gpu"]
                .iter()
                .any(|k| f.starts_with(k))
        }) && t
            .next()
            .is_none_or(|u| u.starts_with('[') && u.ends_with(']'))
            && t.next().is_none()
    };
    let value = |l: &str| {
        let mut t = l.split_whitespace();
        t.next().is_some_and(|v| v.parse::<f64>().is_ok())
            && t.next()
                .is_some_and(|u| ["%", "MiB", "W", "C"].contains(&u))
            && t.next().is_none()
    };
    lines.iter().any(|l| header(l))
        && lines.iter().any(|l| value(l))
        && lines.iter().all(|l| header(l) || value(l))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strum::VariantArray;

    #[test]
    fn every_format_has_one_row() {
        for f in Format::VARIANTS {
            assert_eq!(
                FORMATS.iter().filter(|s| s.format == *f).count(),
                1,
                "{f:?}"
            );
        }
    }

    #[test]
    fn detection() {
        assert_eq!(
            detect("{\"type\":\"header\"}\n"),
            None,
            "a recording is gpufeed's"
        );
        assert_eq!(
            detect("timestamp, index, utilization.gpu [%]\n2026/12/02 12:00:00.000, 0, 5 %\n"),
            Some(Format::SmiCsv)
        );
        assert_eq!(detect("0, 87 %, 1024 MiB\n"), Some(Format::SmiCsv));
        assert_eq!(
            detect(
                "Timestamp, DeviceId, GPU Utilization (%), GPU Power (W)\n\
                 21:54:35.000,    0, 6.47, 303.12\n"
            ),
            Some(Format::XpuSmi)
        );
        assert_eq!(
            detect("# gpu    pwr  gtemp     sm\n# Idx      W      C      %\n    0  50 40 3\n"),
            Some(Format::SmiDmon)
        );
        assert_eq!(
            detect("#Entity  GPUTL\nID\nGPU 0  5\n"),
            Some(Format::Dcgmi)
        );
        assert_eq!(detect("hello world\n"), None);
        assert_eq!(detect("a,b\nx,y\n"), None);
        assert_eq!(detect("97, 40211, 81920\n"), Some(Format::SmiCsv));
        // One field, its header written before every reading by a loop.
        assert_eq!(
            detect("utilization.gpu [%]\n85 %\nutilization.gpu [%]\n100 %\n"),
            Some(Format::SmiCsv)
        );
        assert_eq!(detect("utilization.gpu is high\n85 %\n"), None);
        // nvidia-smi's table before the log (an LSF job script printing both to one file).
        let table = "+---+\n| NVIDIA-SMI 495.44  Driver Version: 495.44 |\n|---+\n".repeat(7);
        assert_eq!(
            detect(&format!(
                "Thu Dec  9 11:19:15 2021\n{table}index, name, utilization.gpu [%]\n0, V100, 0 %\n"
            )),
            Some(Format::SmiCsv)
        );
        assert_eq!(
            detect("time,gpu_util,mem_used_mib\n2026-12-02T12:00:00Z,50,1024\n"),
            Some(Format::SmiCsv),
            "a logging script's own header"
        );
        assert_eq!(detect(""), None);
        assert_eq!(
            detect("utilization.gpu [%]\n95 %\nutilization.gpu [%]\n97 %\n"),
            Some(Format::SmiCsv)
        );
        assert_eq!(
            detect("EntityId,GRACT,FBUSD,TimeStamp\n0,0.5,9,1657283672\n"),
            Some(Format::Csv)
        );
        assert_eq!(
            detect("{\"system.gpu.0.gpu\": 4.07, \"_timestamp\": 1582070941}\n"),
            Some(Format::Wandb)
        );
        assert_eq!(
            detect("# TYPE DCGM_FI_DEV_GPU_UTIL gauge\nDCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 5\n"),
            Some(Format::Prometheus)
        );
        assert_eq!(
            detect("{\"status\":\"success\",\"data\":{\"resultType\":\"matrix\"}}"),
            Some(Format::PrometheusJson)
        );
    }

    #[test]
    fn what_people_paste_is_detected() {
        let table = "Wed May  6 15:30:55 2020\n\
            +------+\n\
            | NVIDIA-SMI 418.87.01    Driver Version: 418.87.01    CUDA Version: 10.1     |\n\
            |   0  GeForce RTX 208...  On   | 00000000:01:00.0 Off |                  N/A |\n\
            |  0%   80C    P2    74W / 250W |   6762MiB / 10989MiB |      0%      Default |\n";
        assert_eq!(detect(table), Some(Format::SmiTable));
        // The table before a CSV log is not the log.
        assert_eq!(
            detect(&format!("{table}index, utilization.gpu [%]\n0, 5 %\n")),
            Some(Format::SmiCsv)
        );
        assert_eq!(
            detect(&table.replace('|', "│")),
            Some(Format::SmiTable),
            "nvitop"
        );
        assert_eq!(
            detect("node1  Wed Sep  7 23:57:26 2025  580.82.07\n[0] NVIDIA H200 | 60°C, 100 % | 80161 / 143771 MB | root(80154M)\n"),
            Some(Format::Gpustat)
        );
        assert_eq!(
            detect("{\"hostname\": \"n\", \"query_time\": \"2024-01-10T12:00:00\", \"gpus\": []}"),
            Some(Format::GpustatJson)
        );
        assert_eq!(
            detect(
                "\n==============NVSMI LOG==============\n\nTimestamp : Wed Aug 30 12:18:12 2023\n"
            ),
            Some(Format::SmiQ)
        );
        assert_eq!(
            detect("<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<timestamp>x</timestamp>\n"),
            Some(Format::SmiQXml)
        );
        assert_eq!(
            detect("pid, process_name, used_gpu_memory [MiB]\n4242, python, 3000 MiB\n"),
            Some(Format::ComputeApps)
        );
        assert_eq!(
            detect("08-14-2025 15:00:57 RAM 12574/62841MB (lfb 9x4MB) SWAP 0/31420MB (cached 0MB) CPU [7%@1728,31%@1036] EMC_FREQ 12%@204 GR3D_FREQ 39%@[305,0]\n"),
            Some(Format::Tegrastats)
        );
    }
}
