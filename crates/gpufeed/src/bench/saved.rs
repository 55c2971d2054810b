//! The best pinned bandwidths of each GPU's last bench, saved to `~/.cache/gpufeed/bench.json`
//! ([`SavedBench`]) for scripts and later runs. `diagnose` does not read it: it judges
//! `transfer_bound` against the link's theoretical rate, the same wherever a recording is
//! diagnosed.

use super::{BenchError, BenchReport, SCHEMA_VERSION};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// `~/.cache/gpufeed/bench.json`: the last bench per GPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedBench {
    pub schema_version: u32,
    pub gpus: Vec<SavedGpu>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct SavedGpu {
    /// NVML/nvidia-smi UUID ("GPU-…"): the key.
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// CUDA ordinal at measurement time (informative only; the UUID identifies the GPU).
    pub index: usize,
    pub measured_at_unix_s: u64,
    pub h2d_pinned_bytes_per_s: Option<f64>,
    pub d2h_pinned_bytes_per_s: Option<f64>,
    pub h2d_pageable_bytes_per_s: Option<f64>,
    pub d2h_pageable_bytes_per_s: Option<f64>,
    pub link_theoretical_bytes_per_s: Option<f64>,
    pub pcie_gen: Option<u32>,
    pub pcie_width: Option<u32>,
}

/// `$XDG_CACHE_HOME/gpufeed/bench.json`, else `$HOME/.cache/gpufeed/bench.json`.
pub(crate) fn default_saved_path() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        })?;
    Some(base.join("gpufeed").join("bench.json"))
}

impl SavedBench {
    /// Reads the file; `None` when absent or unreadable (a missing ceiling is not an error).
    pub(crate) fn load(path: &Path) -> Option<SavedBench> {
        let text = std::fs::read_to_string(path).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Replaces the entry of the same GPU (by UUID, else by index when no UUID) or adds it.
    pub(crate) fn upsert(&mut self, g: SavedGpu) {
        self.schema_version = SCHEMA_VERSION;
        let same = |o: &SavedGpu| match (&o.uuid, &g.uuid) {
            (Some(a), Some(b)) => a == b,
            (None, None) => o.index == g.index,
            _ => false,
        };
        match self.gpus.iter_mut().find(|o| same(o)) {
            Some(o) => *o = g,
            None => self.gpus.push(g),
        }
    }

    /// Writes atomically (temp file + rename), creating the directory.
    pub(crate) fn save(&self, path: &Path) -> Result<(), BenchError> {
        let err = |source| BenchError::Save {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(err)?;
        }
        let text = serde_json::to_string_pretty(self).expect("plain data serializes");
        crate::outfile::write_atomic(path, (text + "\n").as_bytes()).map_err(err)
    }
}

pub(crate) fn saved_entry(r: &BenchReport, now_unix_s: u64) -> SavedGpu {
    SavedGpu {
        uuid: r.gpu_uuid.clone(),
        name: r.gpu_name.clone(),
        index: r.gpu_index,
        measured_at_unix_s: now_unix_s,
        h2d_pinned_bytes_per_s: r.best.h2d_pinned_bytes_per_s,
        d2h_pinned_bytes_per_s: r.best.d2h_pinned_bytes_per_s,
        h2d_pageable_bytes_per_s: r.best.h2d_pageable_bytes_per_s,
        d2h_pageable_bytes_per_s: r.best.d2h_pageable_bytes_per_s,
        link_theoretical_bytes_per_s: r.link.theoretical_bytes_per_s,
        pcie_gen: r.link.pcie_cur_gen,
        pcie_width: r.link.pcie_cur_width,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The entry for a GPU by UUID.
    fn for_uuid<'a>(s: &'a SavedBench, uuid: &str) -> Option<&'a SavedGpu> {
        s.gpus.iter().find(|g| g.uuid.as_deref() == Some(uuid))
    }

    #[test]
    fn saved_file_round_trip_and_upsert() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/bench.json");
        assert_eq!(SavedBench::load(&path), None);
        let g = |uuid: &str, bw| SavedGpu {
            uuid: Some(uuid.into()),
            name: Some("NVIDIA H200".into()),
            index: 0,
            measured_at_unix_s: 1,
            h2d_pinned_bytes_per_s: Some(bw),
            d2h_pinned_bytes_per_s: Some(bw),
            h2d_pageable_bytes_per_s: None,
            d2h_pageable_bytes_per_s: None,
            link_theoretical_bytes_per_s: Some(63e9),
            pcie_gen: Some(5),
            pcie_width: Some(16),
        };
        let mut s = SavedBench::default();
        s.upsert(g("GPU-a", 50e9));
        s.upsert(g("GPU-b", 40e9));
        s.upsert(g("GPU-a", 55e9));
        assert_eq!(s.gpus.len(), 2);
        s.save(&path).unwrap();
        let back = SavedBench::load(&path).unwrap();
        assert_eq!(back.schema_version, SCHEMA_VERSION);
        assert_eq!(
            for_uuid(&back, "GPU-a").unwrap().h2d_pinned_bytes_per_s,
            Some(55e9)
        );
        assert_eq!(for_uuid(&back, "GPU-c"), None);
        std::fs::write(&path, "not json").unwrap();
        assert_eq!(SavedBench::load(&path), None);
    }
}
