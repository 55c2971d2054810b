//! `nvidia-smi -q` (the indented text report) and `nvidia-smi -q -x` (its XML), once or looped
//! (`-l`, or a shell loop): each report is one reading of every GPU at its `Timestamp`. Both are
//! read as (section, key, value) — `FB Memory Usage` / `Used` / `40536 MiB` in the text,
//! `<fb_memory_usage><used>40536 MiB</used>` in the XML — and the section and key, in snake case,
//! are looked up in the one vocabulary (`fb_memory_usage/used`). The processes each report lists
//! give a note.

use super::dcgmi::ProfilingMeans;
use super::smi_table::{Proc, Snapshots};
use super::table::{number, When};
use super::vocab::{self, Family};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::io::Read;

/// Does this start of a file hold an `nvidia-smi -q` report?
pub fn holds_text(head: &str) -> bool {
    head.contains("==============NVSMI LOG==============")
}

/// Does this start of a file hold an `nvidia-smi -q -x` report?
pub fn holds_xml(head: &str) -> bool {
    head.contains("<nvidia_smi_log>")
}

/// The report being read: the GPU whose values come, the process being listed.
struct Report {
    s: Snapshots,
    /// GPUs of this report so far (the n-th is GPU n).
    ordinal: u32,
    gpu: Option<(u32, When, String)>,
    proc: Option<Proc>,
}

impl Report {
    fn new() -> Self {
        Report {
            s: Snapshots::new(),
            ordinal: 0,
            gpu: None,
            proc: None,
        }
    }

    /// A report starts: its GPUs are numbered from 0 again.
    fn report(&mut self) {
        self.flush_proc();
        self.ordinal = 0;
        self.gpu = None;
    }

    fn new_gpu(&mut self) {
        self.flush_proc();
        let id = self.ordinal.to_string();
        self.ordinal += 1;
        self.gpu = self.s.gpu(&id, None).map(|(e, w)| (e, w, id));
        if self.gpu.is_some() {
            self.s.t.info.rows += 1;
        }
    }

    fn flush_proc(&mut self) {
        if let Some(p) = self.proc.take() {
            self.s.process(p);
        }
    }

    /// One value: `section` and `key` in snake case.
    fn value(&mut self, section: &str, key: &str, v: &str) {
        if key == "timestamp" && section.is_empty() {
            self.s.maybe_time(v);
            return;
        }
        let Some((e, when, id)) = self.gpu.clone() else {
            return;
        };
        match (section, key) {
            (_, "product_name") => self.s.t.describe(e, Some(v), None),
            (_, "gpu_uuid" | "uuid") => self.s.t.describe(e, None, Some(v)),
            ("processes" | "process_info", "process_id" | "pid") => {
                self.flush_proc();
                self.proc = v.trim().parse().ok().map(|pid| Proc {
                    gpu: id,
                    pid,
                    name: String::new(),
                    mem_bytes: None,
                });
            }
            ("processes" | "process_info", "name" | "process_name") => {
                if let Some(p) = &mut self.proc {
                    p.name = v.trim().to_string();
                }
            }
            ("processes" | "process_info", "used_gpu_memory" | "used_memory") => {
                if let Some(p) = &mut self.proc {
                    p.mem_bytes = number(v).map(|(x, b)| if b { x } else { x * 1_048_576.0 });
                }
            }
            _ => {
                let Some(f) = vocab::lookup(&format!("{section}/{key}"))
                    .filter(|f| f.term.family == Family::SmiQ)
                else {
                    return;
                };
                if let Some((x, bytes)) = number(v) {
                    let x = if bytes { x } else { x * f.scale };
                    self.s.t.put(e, when, f.term.metric, x);
                }
            }
        }
    }

    fn finish(
        mut self,
        format: &'static str,
        interval_s: Option<f64>,
        visit: impl FnMut(&Reading),
    ) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
        self.flush_proc();
        self.s.finish(format, interval_s, visit)
    }
}

/// Runs `f` on every line of `r` with the report; an over-long line is counted and passed
/// over.
fn each_line(
    rep: &mut Report,
    r: impl Read,
    mut f: impl FnMut(&mut Report, &str),
) -> Result<(), LogError> {
    super::each_line(r, |line| {
        match line {
            super::LogLine::Text(buf) => f(rep, &String::from_utf8_lossy(buf)),
            super::LogLine::Overlong => rep.s.t.info.overlong_line(),
        }
        Ok(())
    })
}

/// Reads `nvidia-smi -q` text reports.
pub fn read_text(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut rep = Report::new();
    // The open sections, each with its indent.
    let mut sections: Vec<(usize, String)> = Vec::new();
    each_line(&mut rep, r, |rep, line| {
        let l = line.trim_end();
        if l.trim().is_empty() {
            return;
        }
        if l.contains("NVSMI LOG") {
            rep.report();
            sections.clear();
            return;
        }
        let indent = l.len() - l.trim_start().len();
        while sections.last().is_some_and(|(i, _)| *i >= indent) {
            sections.pop();
        }
        let t = l.trim();
        if indent == 0 && t.starts_with("GPU ") && !t.contains(" : ") {
            rep.new_gpu();
            sections.clear();
            return;
        }
        match t
            .split_once(" : ")
            .or_else(|| t.strip_suffix(" :").map(|k| (k, "")))
        {
            // A MIG instance's values (its memory, its utilization) are not its GPU's.
            Some(_) if sections.iter().any(|(_, s)| s == "mig_devices") => {}
            Some((k, v)) => {
                // The innermost section under the GPU names the value (`FB Memory Usage`).
                let section = if indent == 0 {
                    String::new()
                } else {
                    sections.last().map(|(_, s)| s.clone()).unwrap_or_default()
                };
                rep.value(&section, &vocab::snake(k), v.trim());
            }
            None => sections.push((indent, vocab::snake(t))),
        }
    })?;
    rep.finish("nvidia-smi -q", interval_s, visit)
}

/// Reads `nvidia-smi -q -x` XML reports (one element a line, as nvidia-smi writes them).
pub fn read_xml(
    r: impl Read,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut rep = Report::new();
    let mut open: Vec<String> = Vec::new();
    each_line(&mut rep, r, |rep, line| {
        let t = line.trim();
        let Some(inner) = t.strip_prefix('<') else {
            return;
        };
        if inner.starts_with(['?', '!']) {
            return;
        }
        if let Some(close) = inner.strip_prefix('/') {
            let name = close.trim_end_matches('>').trim();
            if let Some(i) = open.iter().rposition(|o| o == name) {
                open.truncate(i);
            }
            return;
        }
        let name_end = inner.find(['>', ' ', '/']).unwrap_or(inner.len());
        let name = &inner[..name_end];
        if name == "nvidia_smi_log" {
            rep.report();
            open.clear();
            open.push(name.into());
            return;
        }
        // `<used>40536 MiB</used>`: a value in the innermost open element (not a MIG
        // instance's: its memory is not its GPU's).
        if let Some(v) = inner[name_end..]
            .strip_prefix('>')
            .and_then(|rest| rest.strip_suffix(&format!("</{name}>")))
        {
            let section = if open.len() <= 2 {
                ""
            } else {
                open.last().map_or("", String::as_str)
            };
            if open.iter().any(|o| o == "mig_devices") {
                return;
            }
            let v = v
                .replace("&amp;", "&")
                .replace("&lt;", "<")
                .replace("&gt;", ">");
            rep.value(section, name, &v);
            return;
        }
        if inner.ends_with("/>") {
            return;
        }
        if name == "gpu" && open.len() == 1 {
            rep.new_gpu();
        }
        open.push(name.into());
    })?;
    rep.finish("nvidia-smi -q -x", interval_s, visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::smi_table::tests::samples;

    const TEXT: &str = "
==============NVSMI LOG==============

Timestamp                                 : Wed Jan 10 12:00:00 2024
Driver Version                            : 535.54.03

Attached GPUs                             : 1
GPU 00000000:01:00.0
    Product Name                          : NVIDIA A100-SXM4-80GB
    FB Memory Usage
        Total                             : 81920 MiB
        Reserved                          : 450 MiB
        Used                              : 40536 MiB
        Free                              : 40934 MiB
    BAR1 Memory Usage
        Total                             : 131072 MiB
        Used                              : 1 MiB
    Utilization
        Gpu                               : 30 %
        Memory                            : 20 %
    Temperature
        GPU Current Temp                  : 33 C
    GPU Power Readings
        Power Draw                        : 62.00 W
    Processes
        GPU instance ID                   : N/A
        Process ID                        : 28690
            Type                          : C
            Name                          : python
            Used GPU Memory               : 40520 MiB
";

    #[test]
    fn text_reports_are_read_through_the_vocabulary() {
        assert!(holds_text(TEXT));
        let looped = format!(
            "{TEXT}{}",
            TEXT.replace("12:00:00", "12:00:05").replace("30 %", "95 %")
        );
        let (h, info, g) = samples(|b, v| read_text(b, None, v), &looped);
        assert_eq!(h.gpus.len(), 1);
        assert_eq!(h.gpus[0].name.as_deref(), Some("NVIDIA A100-SXM4-80GB"));
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].util_pct, Some(30.0));
        assert_eq!(g[0].mem_used_bytes, Some(40536 * 1_048_576), "not BAR1's");
        assert_eq!(g[0].power_w, Some(62.0));
        assert_eq!((g[1].t_s, g[1].util_pct), (5.0, Some(95.0)));
        assert!(
            info.notes.join(" ").contains("GPU 0 PID 28690 python"),
            "{:?}",
            info.notes
        );
    }

    const XML: &str = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">
<nvidia_smi_log>
	<timestamp>Wed Jan 10 12:00:00 2024</timestamp>
	<driver_version>535.54.03</driver_version>
	<attached_gpus>2</attached_gpus>
	<gpu id="00000000:01:00.0">
		<product_name>NVIDIA A100-SXM4-80GB</product_name>
		<uuid>GPU-1234</uuid>
		<fb_memory_usage>
			<total>81920 MiB</total>
			<used>40536 MiB</used>
		</fb_memory_usage>
		<utilization>
			<gpu_util>30 %</gpu_util>
			<memory_util>20 %</memory_util>
		</utilization>
		<gpu_power_readings>
			<power_draw>62.00 W</power_draw>
		</gpu_power_readings>
		<processes>
			<process_info>
				<pid>28690</pid>
				<type>C</type>
				<process_name>python</process_name>
				<used_memory>40520 MiB</used_memory>
			</process_info>
		</processes>
	</gpu>
	<gpu id="00000000:41:00.0">
		<product_name>NVIDIA A100-SXM4-80GB</product_name>
		<fb_memory_usage>
			<total>81920 MiB</total>
			<used>4 MiB</used>
		</fb_memory_usage>
		<utilization>
			<gpu_util>0 %</gpu_util>
		</utilization>
		<processes>
		</processes>
	</gpu>
</nvidia_smi_log>
"#;

    /// A GPU in MIG mode lists its instances, each with its own `FB Memory Usage`: an
    /// instance's memory is not the GPU's, wherever the report puts the instances.
    #[test]
    fn mig_instances_are_not_read_as_their_gpu() {
        let mig = "    MIG Devices
        MIG Device
            Index                         : 0
            GPU Instance ID               : 1
            FB Memory Usage
                Total                     : 19968 MiB
                Used                      : 13 MiB
                Free                      : 19955 MiB
            Utilization
                Gpu                       : 99 %
";
        let gpu = "GPU 00000000:07:00.0
    Product Name                          : NVIDIA A100-SXM4-40GB
    FB Memory Usage
        Total                             : 40960 MiB
        Used                              : 10100 MiB
        Free                              : 30289 MiB
";
        let head = "==============NVSMI LOG==============\nTimestamp : Wed Jan 10 12:00:00 2024\n";
        // The instances after the GPU's own values, and before them (as nvidia-smi writes).
        let (name, fb) = gpu.split_at(gpu.find("    FB").unwrap());
        for text in [
            format!("{head}{gpu}{mig}"),
            format!("{head}{name}{mig}{fb}"),
        ] {
            let (h, _, g) = samples(|b, v| read_text(b, None, v), &text);
            assert_eq!(h.gpus.len(), 1);
            assert_ne!(
                g.first().and_then(|g| g.mem_used_bytes),
                Some(13 * 1_048_576),
                "{text}"
            );
            assert_eq!(
                g.first().and_then(|g| g.util_pct),
                None,
                "an instance's, not the GPU's"
            );
        }
        let xml = "<?xml version=\"1.0\" ?>\n<nvidia_smi_log>\n<gpu id=\"00000000:07:00.0\">\n\
                   <fb_memory_usage>\n<used>10100 MiB</used>\n</fb_memory_usage>\n\
                   <mig_devices>\n<mig_device>\n<fb_memory_usage>\n<used>13 MiB</used>\n\
                   </fb_memory_usage>\n</mig_device>\n</mig_devices>\n</gpu>\n</nvidia_smi_log>\n";
        let (_, _, g) = samples(|b, v| read_xml(b, None, v), xml);
        assert_eq!(g[0].mem_used_bytes, Some(10100 * 1_048_576));
    }

    #[test]
    fn xml_reports_are_read_through_the_vocabulary() {
        assert!(holds_xml(XML));
        let (h, info, g) = samples(|b, v| read_xml(b, None, v), XML);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(h.gpus[0].uuid.as_deref(), Some("GPU-1234"));
        assert_eq!(g.len(), 2);
        assert_eq!(g[0].util_pct, Some(30.0));
        assert_eq!(g[1].mem_used_bytes, Some(4 * 1_048_576));
        assert_eq!(g[0].power_w, Some(62.0));
        let notes = info.notes.join(" ");
        assert!(notes.contains("GPU 0 PID 28690 python"), "{notes}");
        assert!(notes.contains("A single snapshot"), "{notes}");
    }

    /// An excerpt of Apache Hadoop's nvidia-smi sample (apache/hadoop, hadoop-yarn-project/
    /// hadoop-yarn/hadoop-yarn-server/hadoop-yarn-server-nodemanager/src/test/resources/
    /// nvidia-smi-sample-output.xml, commit 4994beff): driver 375, a comment before the root,
    /// `power_readings` (not 535's `gpu_power_readings`), fractional utilization, BAR1 and
    /// max clocks that must not be taken for the GPU's memory and clock.
    const HADOOP: &str = r#"<?xml version="1.0" ?>
<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v8.dtd">

<!--
   Licensed to the Apache Software Foundation (ASF) under one or more
-->

<nvidia_smi_log>
    <timestamp>Wed Sep  6 21:52:51 2017</timestamp>
    <driver_version>375.66</driver_version>
    <attached_gpus>2</attached_gpus>
    <gpu id="0000:04:00.0">
        <product_name>Tesla P100-PCIE-12GB</product_name>
        <uuid>GPU-28604e81-21ec-cc48-6759-bf2648b22e16</uuid>
        <minor_number>0</minor_number>
        <pci>
            <pci_bus_id>0000:04:00.0</pci_bus_id>
            <tx_util>0 KB/s</tx_util>
        </pci>
        <fb_memory_usage>
            <total>11567 MiB</total>
            <used>11400 MiB</used>
            <free>167 MiB</free>
        </fb_memory_usage>
        <bar1_memory_usage>
            <total>16384 MiB</total>
            <used>2 MiB</used>
            <free>16382 MiB</free>
        </bar1_memory_usage>
        <utilization>
            <gpu_util>33.4 %</gpu_util>
            <memory_util>0 %</memory_util>
        </utilization>
        <temperature>
            <gpu_temp>31 C</gpu_temp>
            <gpu_temp_max_threshold>80 C</gpu_temp_max_threshold>
        </temperature>
        <power_readings>
            <power_draw>24.84 W</power_draw>
            <power_limit>250.00 W</power_limit>
        </power_readings>
        <clocks>
            <sm_clock>405 MHz</sm_clock>
        </clocks>
        <max_clocks>
            <sm_clock>1328 MHz</sm_clock>
        </max_clocks>
        <processes>
        </processes>
        <accounted_processes>
        </accounted_processes>
    </gpu>

    <gpu id="0000:82:00.0">
        <product_name>Tesla P100-PCIE-12GB_2</product_name>
        <fb_memory_usage>
            <total>12290 MiB</total>
            <used>11800 MiB</used>
            <free>490 MiB</free>
        </fb_memory_usage>
        <utilization>
            <gpu_util>10.3 %</gpu_util>
        </utilization>
    </gpu>

</nvidia_smi_log>"#;

    #[test]
    fn a_real_xml_report_from_an_old_driver() {
        assert!(holds_xml(HADOOP));
        let (h, _, g) = samples(|b, v| read_xml(b, None, v), HADOOP);
        assert_eq!(h.gpus.len(), 2);
        assert_eq!(h.gpus[1].name.as_deref(), Some("Tesla P100-PCIE-12GB_2"));
        assert_eq!(g[0].util_pct, Some(33.4));
        assert_eq!(g[0].mem_used_bytes, Some(11400 * 1_048_576));
        assert_eq!(g[0].power_w, Some(24.84));
        assert_eq!(g[0].temperature_c, Some(31));
        assert_eq!(g[0].sm_clock_mhz, Some(405));
        assert_eq!(g[1].util_pct, Some(10.3));
    }
}
