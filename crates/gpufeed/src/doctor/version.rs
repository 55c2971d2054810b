//! CUDA versions, compute capabilities and what each GPU generation needs from the CUDA stack.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A CUDA version (major.minor), ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub(crate) struct CudaVersion {
    pub major: u32,
    pub minor: u32,
}

impl CudaVersion {
    pub(crate) const fn new(major: u32, minor: u32) -> Self {
        CudaVersion { major, minor }
    }

    /// From NVML's / the driver API's integer form: 12040 → 12.4.
    pub(crate) fn from_int(v: i32) -> Option<Self> {
        let v = u32::try_from(v).ok()?;
        (v >= 1000).then(|| CudaVersion::new(v / 1000, (v % 1000) / 10))
    }

    /// Parses "12.4", "12.4.131" or "11.8".
    pub(crate) fn parse(s: &str) -> Option<Self> {
        let mut it = s.trim().split('.');
        let major = it.next()?.trim().parse().ok()?;
        let minor = it.next().map_or(Some(0), |m| {
            m.trim()
                .trim_end_matches(|c: char| !c.is_ascii_digit())
                .parse()
                .ok()
        })?;
        Some(CudaVersion::new(major, minor))
    }
}

impl fmt::Display for CudaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// A compute capability (major, minor), e.g. (8, 0) for A100.
pub(crate) type Cc = (u32, u32);

pub(crate) fn cc_str(cc: Cc) -> String {
    format!("{}.{}", cc.0, cc.1)
}

/// The architecture's marketing name, for messages.
pub(crate) fn generation(cc: Cc) -> &'static str {
    match cc {
        (3, _) => "Kepler",
        (5, _) => "Maxwell",
        (6, _) => "Pascal",
        (7, 0) | (7, 2) => "Volta",
        (7, 5) => "Turing",
        (8, 9) => "Ada Lovelace",
        (8, _) => "Ampere",
        (9, _) => "Hopper",
        (10, _) | (11, _) | (12, _) => "Blackwell",
        _ => "unknown",
    }
}

/// The first CUDA release that can build code for this GPU at all (CUDA toolkit release notes).
pub(crate) fn min_cuda(cc: Cc) -> Option<CudaVersion> {
    Some(match cc {
        (3, _) | (5, _) => CudaVersion::new(7, 0),
        (6, _) => CudaVersion::new(8, 0),
        (7, 0) | (7, 2) => CudaVersion::new(9, 0),
        (7, 5) => CudaVersion::new(10, 0),
        (8, 0) => CudaVersion::new(11, 0),
        (8, 6) => CudaVersion::new(11, 1),
        (8, 7) => CudaVersion::new(11, 4),
        (8, 9) | (9, 0) => CudaVersion::new(11, 8),
        (10, 0) | (12, 0) => CudaVersion::new(12, 8),
        (10, 3) | (12, 1) => CudaVersion::new(12, 9),
        (11, 0) => CudaVersion::new(13, 0),
        _ => return None,
    })
}

/// The CUDA release from which libraries (cuBLAS, cuDNN, NCCL) are tuned for this generation:
/// below it the GPU runs, but often tens of percent slower (Hopper on 11.8 lacks the FP8 and
/// TMA-based cuBLAS kernels of 12.x; Ada on 11.8 lacks FP8).
pub(crate) fn recommended_cuda(cc: Cc) -> Option<CudaVersion> {
    Some(match cc {
        (8, 9) | (9, 0) => CudaVersion::new(12, 1),
        (8, _) => CudaVersion::new(11, 8),
        _ => return min_cuda(cc),
    })
}

/// The last CUDA major release that still supports this GPU (CUDA 12 dropped Kepler; CUDA 13
/// dropped Maxwell, Pascal and Volta).
pub(crate) fn max_cuda_major(cc: Cc) -> Option<u32> {
    match cc {
        (3, _) => Some(11),
        (5, _) | (6, _) | (7, 0) | (7, 2) => Some(12),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions() {
        assert_eq!(CudaVersion::from_int(12040), Some(CudaVersion::new(12, 4)));
        assert_eq!(CudaVersion::from_int(11080), Some(CudaVersion::new(11, 8)));
        assert_eq!(CudaVersion::from_int(13000), Some(CudaVersion::new(13, 0)));
        assert_eq!(CudaVersion::from_int(0), None);
        assert_eq!(CudaVersion::from_int(-1), None);
        assert_eq!(CudaVersion::parse("12.1"), Some(CudaVersion::new(12, 1)));
        assert_eq!(
            CudaVersion::parse("12.4.131"),
            Some(CudaVersion::new(12, 4))
        );
        assert_eq!(CudaVersion::parse("12"), Some(CudaVersion::new(12, 0)));
        assert_eq!(CudaVersion::parse("x"), None);
        assert!(CudaVersion::new(11, 8) < CudaVersion::new(12, 0));
        assert_eq!(CudaVersion::new(12, 4).to_string(), "12.4");
    }

    #[test]
    fn generations() {
        assert_eq!(generation((9, 0)), "Hopper");
        assert_eq!(generation((8, 9)), "Ada Lovelace");
        assert_eq!(generation((8, 6)), "Ampere");
        assert_eq!(generation((6, 1)), "Pascal");
        assert_eq!(min_cuda((9, 0)), Some(CudaVersion::new(11, 8)));
        assert_eq!(recommended_cuda((9, 0)), Some(CudaVersion::new(12, 1)));
        assert_eq!(recommended_cuda((7, 5)), Some(CudaVersion::new(10, 0)));
        assert_eq!(max_cuda_major((6, 1)), Some(12));
        assert_eq!(max_cuda_major((8, 0)), None);
        assert_eq!(min_cuda((42, 0)), None);
    }
}
