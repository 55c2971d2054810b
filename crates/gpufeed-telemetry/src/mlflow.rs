//! MLflow system metrics in a file-store run (`mlruns/<experiment>/<run>/`): each metric is a
//! file `metrics/system/gpu_0_utilization_percentage` of lines `timestamp_ms value step`.

use super::dcgmi::ProfilingMeans;
use super::table::{Table, When};
use super::vocab::{self, Metric};
use super::{LogError, LogInfo};
use crate::reading::{LogHeader, Reading};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The folder of system metric files under `path` (a run folder, its `metrics/`, or
/// `metrics/system/` itself), if it has one.
pub fn system_dir(path: &Path) -> Option<PathBuf> {
    [
        path.join("metrics").join("system"),
        path.join("system"),
        path.to_path_buf(),
    ]
    .into_iter()
    .find(|d| {
        std::fs::read_dir(d).is_ok_and(|mut it| {
            it.any(|e| {
                e.is_ok_and(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.starts_with("gpu_") || n.starts_with("cpu_"))
                })
            })
        })
    })
}

/// Reads the run's system metrics.
pub fn read_run(
    dir: &Path,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    for p in files {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let Some(f) = vocab::lookup(&format!("system/{name}")) else {
            if name.starts_with("gpu_") {
                t.unknown(&format!("system/{name}"));
            }
            continue;
        };
        let metric = f.term.metric;
        if matches!(
            metric,
            Metric::Ignored | Metric::Time | Metric::Date | Metric::RelativeS
        ) {
            continue;
        }
        let Some(e) = t.entity(None, &f.gpu.unwrap_or(0).to_string()) else {
            continue;
        };
        let file = std::fs::File::open(&p)?;
        t.each_line(file, |t, buf| {
            let text = String::from_utf8_lossy(buf);
            let mut it = text.split_whitespace();
            match (
                it.next().and_then(|s| s.parse::<f64>().ok()),
                it.next().and_then(|s| s.parse::<f64>().ok()),
            ) {
                (Some(ms), Some(v)) => {
                    t.info.rows += 1;
                    t.put(e, When::At(ms / 1000.0), metric, v * f.scale);
                }
                _ if text.trim().is_empty() => {}
                _ => t.info.malformed += 1,
            }
            Ok(())
        })?;
    }
    if t.is_empty() {
        return Err(LogError::Format(format!(
            "no GPU system metrics in {} (gpu_N_utilization_percentage, …): the run was logged \
             without log_system_metrics=True, or on a machine without a GPU (MLflow needs pynvml)",
            dir.display()
        )));
    }
    t.finish("MLflow system metrics", interval_s, visit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_folder() {
        let d = tempfile::tempdir().unwrap();
        let sys = d.path().join("metrics").join("system");
        std::fs::create_dir_all(&sys).unwrap();
        std::fs::write(
            sys.join("gpu_0_utilization_percentage"),
            "1700000000000 90.0 0\n1700000010000 95.0 1\n",
        )
        .unwrap();
        std::fs::write(
            sys.join("gpu_0_memory_usage_megabytes"),
            "1700000000000 30000.0 0\n",
        )
        .unwrap();
        std::fs::write(
            sys.join("cpu_utilization_percentage"),
            "1700000000000 5 0\n",
        )
        .unwrap();
        let dir = system_dir(d.path()).unwrap();
        let mut out = Vec::new();
        let (h, _, _) = read_run(&dir, None, |l| out.push(l.clone())).unwrap();
        assert_eq!(h.gpus.len(), 1);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].mem_used_bytes, Some(30_000_000_000));
        assert_eq!(out[1].t_s, 10.0);
        assert!(system_dir(Path::new("/nonexistent")).is_none());
    }
}
