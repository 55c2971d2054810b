//! Output lines that mean a job ran out of memory: what a trial watches its job's output for
//! ([`super::trial`]) and what the batch-size search classifies a failed trial by
//! ([`super::batch_plan`]).

/// Output that means the job ran out of memory (GPU or host), with a short name for each.
pub(crate) const OOM_MARKERS: &[(&str, &str)] = &[
    ("CUDA out of memory", "cuda_oom"),
    ("OutOfMemoryError", "cuda_oom"),
    (" out of memory.", "out_of_memory"),
    ("CUBLAS_STATUS_ALLOC_FAILED", "cublas_alloc_failed"),
    ("CUDNN_STATUS_NOT_SUPPORTED", "cudnn_not_supported"),
    ("DefaultCPUAllocator: can't allocate memory", "host_oom"),
    ("RESOURCE_EXHAUSTED", "jax_resource_exhausted"),
    ("PT_DEVMEM Allocation failed", "device_alloc_failed"),
    ("is killed by signal", "dataloader_worker_killed"),
];

/// The kind of out-of-memory a line reports, if any.
pub(crate) fn oom_marker(line: &str) -> Option<&'static str> {
    OOM_MARKERS.iter().find_map(|(pat, kind)| {
        if !line.contains(pat) {
            return None;
        }
        // `DataLoader worker (pid N) is killed by signal`: only that sentence, not any kill.
        if *kind == "dataloader_worker_killed" && !line.contains("DataLoader worker") {
            return None;
        }
        Some(*kind)
    })
}
