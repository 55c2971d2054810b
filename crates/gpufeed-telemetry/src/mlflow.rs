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

/// The metric files in `dir`, and how many links were left out: a link is followed only where
/// it stays inside `dir` (a link to another run's file, or to a shared store, would add that
/// run's GPUs to this one).
fn run_files(dir: &Path) -> std::io::Result<(Vec<PathBuf>, u64)> {
    let root = std::fs::canonicalize(dir)?;
    let mut files = Vec::new();
    let mut outside = 0;
    for e in std::fs::read_dir(dir)?.flatten() {
        let p = e.path();
        let link = e.file_type().is_ok_and(|t| t.is_symlink());
        if link && !std::fs::canonicalize(&p).is_ok_and(|t| t.starts_with(&root)) {
            outside += 1;
            continue;
        }
        if p.is_file() {
            files.push(p);
        }
    }
    Ok((files, outside))
}

/// Reads the run's system metrics.
pub fn read_run(
    dir: &Path,
    interval_s: Option<f64>,
    visit: impl FnMut(&Reading),
) -> Result<(LogHeader, LogInfo, BTreeMap<u32, ProfilingMeans>), LogError> {
    let mut t = Table::new();
    let (mut files, outside) = run_files(dir)?;
    if outside > 0 {
        t.info.notes.push(format!(
            "{outside} metric file{} of the run link{} out of its folder: not followed (another \
             run's metrics would read as GPUs of this one).",
            if outside == 1 { "" } else { "s" },
            if outside == 1 { "s" } else { "" },
        ));
    }
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

    /// A metric file that is a link out of the run's folder (to another run's, a shared store) is
    /// not this run's: followed, it read as a phantom GPU.
    #[cfg(unix)]
    #[test]
    fn links_out_of_the_run_are_not_followed() {
        let d = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let sys = d.path().join("metrics").join("system");
        std::fs::create_dir_all(&sys).unwrap();
        let line = "1700000000000 90.0 0\n1700000010000 95.0 1\n";
        std::fs::write(sys.join("gpu_0_utilization_percentage"), line).unwrap();
        let elsewhere = other.path().join("gpu_1_utilization_percentage");
        std::fs::write(&elsewhere, line).unwrap();
        std::os::unix::fs::symlink(&elsewhere, sys.join("gpu_1_utilization_percentage")).unwrap();
        // A link inside the folder is the run's own file under another name.
        std::os::unix::fs::symlink(
            sys.join("gpu_0_utilization_percentage"),
            sys.join("gpu_0_memory_usage_percentage"),
        )
        .unwrap();
        let (h, info, _) = read_run(&system_dir(d.path()).unwrap(), None, |_| {}).unwrap();
        assert_eq!(h.gpus.len(), 1, "{:?}", h.gpus);
        assert!(
            info.notes
                .iter()
                .any(|n| n.contains("1 metric file") && n.contains("not followed")),
            "{:?}",
            info.notes
        );
    }
}
