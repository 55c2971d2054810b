//! `--data PATH` checks: the filesystem type (network filesystems are the usual slow input),
//! whether the disk under it rotates, and a short read-throughput sample.

use super::{Check, Group, Status};
use crate::units;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Below this read rate a multi-GPU job is likely to wait on storage.
pub(crate) const SLOW_READ_BYTES_PER_S: f64 = 200e6;

/// The mount a path lives on, from /proc/mounts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Mount {
    pub source: String,
    pub mount_point: String,
    pub fs_type: String,
}

/// The mount with the longest mount point that is a prefix of `path` (later entries win ties,
/// as the last mount over a point hides earlier ones). Mount points are octal-escaped.
pub(crate) fn find_mount(mounts: &str, path: &Path) -> Option<Mount> {
    let mut best: Option<Mount> = None;
    for l in mounts.lines() {
        let mut it = l.split_whitespace();
        let (Some(src), Some(mp), Some(fs)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        let mp = unescape(mp);
        if !path.starts_with(&mp) {
            continue;
        }
        if best
            .as_ref()
            .is_none_or(|b| mp.len() >= b.mount_point.len())
        {
            best = Some(Mount {
                source: src.to_string(),
                mount_point: mp,
                fs_type: fs.to_string(),
            });
        }
    }
    best
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Network and distributed filesystems (and FUSE object-store mounts).
pub(crate) fn is_network_fs(fs_type: &str) -> bool {
    const NET: [&str; 16] = [
        "nfs",
        "nfs4",
        "cifs",
        "smb3",
        "smbfs",
        "lustre",
        "gpfs",
        "ceph",
        "glusterfs",
        "9p",
        "beegfs",
        "afs",
        "wekafs",
        "virtiofs",
        "panfs",
        "fuse.glusterfs",
    ];
    NET.contains(&fs_type) || fs_type.starts_with("fuse.") && fs_type != "fuse.lxcfs"
}

/// Whether the block device holding `path` rotates (/sys/dev/block/MAJ:MIN/queue/rotational,
/// looking at the parent disk for a partition). `None` when not on a block device.
pub(crate) fn rotational(path: &Path) -> Option<bool> {
    let dev = std::fs::metadata(path).ok()?.dev();
    // SAFETY: major/minor are pure arithmetic on the device number.
    let (maj, min) = (libc::major(dev), libc::minor(dev));
    if maj == 0 {
        return None; // tmpfs, overlay, NFS and other virtual devices
    }
    let mut dir = std::fs::canonicalize(format!("/sys/dev/block/{maj}:{min}")).ok()?;
    if dir.join("partition").exists() {
        dir.pop();
    }
    let s = std::fs::read_to_string(dir.join("queue/rotational")).ok()?;
    Some(s.trim() == "1")
}

/// What the read sample measured.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ReadSample {
    pub bytes: u64,
    pub files: u64,
    pub seconds: f64,
}

/// Reads files under `path` (depth-first, in name order) until `max_bytes` or `max_time`.
/// Each file is first dropped from the page cache (`POSIX_FADV_DONTNEED`, clean pages only) so
/// the sample measures the storage, not memory.
pub(crate) fn read_sample(
    path: &Path,
    max_bytes: u64,
    max_time: Duration,
) -> std::io::Result<ReadSample> {
    let mut files: Vec<PathBuf> = Vec::new();
    collect_files(path, &mut files, 10_000, 0);
    let mut buf = vec![0u8; 4 << 20];
    let t0 = Instant::now();
    let mut s = ReadSample {
        bytes: 0,
        files: 0,
        seconds: 0.0,
    };
    for f in files {
        if s.bytes >= max_bytes || t0.elapsed() >= max_time {
            break;
        }
        let Ok(mut file) = std::fs::File::open(&f) else {
            continue;
        };
        drop_cache(&file);
        let mut any = false;
        loop {
            let want = buf.len().min((max_bytes - s.bytes) as usize).max(1);
            match file.read(&mut buf[..want]) {
                Ok(0) => break,
                Ok(n) => {
                    s.bytes += n as u64;
                    any = true;
                    if s.bytes >= max_bytes || t0.elapsed() >= max_time {
                        break;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        if any {
            s.files += 1;
        }
    }
    s.seconds = t0.elapsed().as_secs_f64();
    Ok(s)
}

fn drop_cache(f: &std::fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: advisory call on an open descriptor.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED);
    }
}

fn collect_files(p: &Path, out: &mut Vec<PathBuf>, max: usize, depth: u32) {
    if out.len() >= max || depth > 16 {
        return;
    }
    let Ok(md) = std::fs::metadata(p) else { return };
    if md.is_file() {
        out.push(p.to_path_buf());
    } else if md.is_dir() {
        let Ok(rd) = std::fs::read_dir(p) else { return };
        let mut entries: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        entries.sort();
        for e in entries {
            collect_files(&e, out, max, depth + 1);
            if out.len() >= max {
                return;
            }
        }
    }
}

pub(crate) fn checks(path: &Path, max_bytes: u64, max_time: Duration) -> Vec<Check> {
    let shown = path.display().to_string();
    let canon = match std::fs::canonicalize(path) {
        Ok(p) => p,
        Err(e) => {
            let why = format!("--data {shown}: {e}");
            return vec![
                Check::new("data_filesystem", Group::Data, Status::Fail, why.clone())
                    .fix("give --data an existing dataset directory or file"),
                Check::skip("data_storage", Group::Data, why.clone()),
                Check::skip("data_read_throughput", Group::Data, why),
            ];
        }
    };
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mount = find_mount(&mounts, &canon);
    let sample = read_sample(&canon, max_bytes, max_time).ok();
    vec![
        judge_filesystem(&shown, mount.as_ref()),
        judge_storage(&shown, rotational(&canon), mount.as_ref(), sample),
        judge_throughput(&shown, sample),
    ]
}

pub(crate) fn judge_filesystem(path: &str, m: Option<&Mount>) -> Check {
    let id = "data_filesystem";
    let Some(m) = m else {
        return Check::skip(id, Group::Data, format!("no /proc/mounts entry for {path}"));
    };
    let c = |st, s: String| {
        Check::new(id, Group::Data, st, s)
            .with("fs_type", m.fs_type.clone())
            .with("mount_point", m.mount_point.clone())
            .with("source", m.source.clone())
    };
    if is_network_fs(&m.fs_type) {
        c(
            Status::Warn,
            format!("{path} is on a network filesystem ({} from {}): per-file latency, not bandwidth, usually starves the GPU", m.fs_type, m.source),
        )
        .fix("copy the dataset to local NVMe (or /dev/shm) before training, pack small files into shards (WebDataset, TFRecord, Parquet), and raise num_workers to hide latency")
    } else {
        c(
            Status::Pass,
            format!(
                "{path} is on a local {} filesystem ({})",
                m.fs_type, m.mount_point
            ),
        )
    }
}

/// Files per second above which a disk cannot be spinning (a seek costs 5–10 ms: 100–200 random
/// reads per second at most), whatever the kernel's `rotational` flag says.
pub(crate) const SPINNING_MAX_FILES_PER_S: f64 = 400.0;
/// Files the sample must have read for its rate to overrule the flag.
const MIN_FILES_MEASURED: u64 = 20;

/// The storage class, from the kernel's `rotational` flag unless the read sample contradicts it
/// (virtio and many cloud volumes report `rotational=1` by default).
pub(crate) fn judge_storage(
    path: &str,
    rot: Option<bool>,
    m: Option<&Mount>,
    sample: Option<ReadSample>,
) -> Check {
    let id = "data_storage";
    let measured = sample
        .filter(|s| s.files >= MIN_FILES_MEASURED && s.seconds > 0.0)
        .map(|s| (s.files, s.seconds, s.files as f64 / s.seconds));
    match (rot, measured) {
        (None, _) => Check::skip(
            id,
            Group::Data,
            format!(
                "{path} is not on a local block device ({})",
                m.map_or("unknown filesystem", |m| m.fs_type.as_str())
            ),
        ),
        (Some(true), Some((files, secs, rate))) if rate > SPINNING_MAX_FILES_PER_S => Check::new(
            id,
            Group::Data,
            Status::Pass,
            format!(
                "{path}: the kernel flags its disk as rotational, but {files} files were read in {secs:.2} s ({rate:.0} per second), beyond any spinning disk: a virtual or solid-state device (virtio disks report rotational by default)"
            ),
        )
        .with("rotational", true)
        .with("measured_files_per_s", rate),
        (Some(true), _) => Check::new(id, Group::Data, Status::Warn, format!("{path} is on a spinning disk: random reads of small files manage ~100–200 per second"))
            .with("rotational", true)
            .fix("move the dataset to SSD/NVMe, or read it sequentially in large shards"),
        (Some(false), _) => Check::new(id, Group::Data, Status::Pass, format!("{path} is on a solid-state device"))
            .with("rotational", false),
    }
}

pub(crate) fn judge_throughput(path: &str, s: Option<ReadSample>) -> Check {
    let id = "data_read_throughput";
    let Some(s) = s.filter(|s| s.bytes > 0 && s.seconds > 0.0) else {
        return Check::skip(id, Group::Data, format!("nothing readable under {path}"));
    };
    let rate = s.bytes as f64 / s.seconds;
    let c = |st, sum: String| {
        Check::new(id, Group::Data, st, sum)
            .with("read_bytes", s.bytes)
            .with("files_read", s.files)
            .with("elapsed_s", s.seconds)
            .with("read_bytes_per_s", rate)
            .with("files_per_s", s.files as f64 / s.seconds)
    };
    let summary = format!(
        "read {} from {} in {:.2} s: {}/s",
        units::bytes(s.bytes),
        if s.files == 1 {
            "1 file".to_string()
        } else {
            format!("{} files", s.files)
        },
        s.seconds,
        units::bytes(rate as u64)
    );
    if rate < SLOW_READ_BYTES_PER_S {
        c(Status::Warn, format!("{summary}: slow for feeding GPUs"))
            .fix("cache the dataset on local NVMe or in RAM, use larger files/shards, and overlap reads with more DataLoader workers")
    } else {
        c(Status::Pass, summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTS: &str = "overlay / overlay rw,relatime 0 0\n\
        /dev/nvme0n1p2 /data ext4 rw 0 0\n\
        nas:/export /data/remote nfs4 rw 0 0\n\
        /dev/sdb1 /mnt/with\\040space xfs rw 0 0\n";

    #[test]
    fn mounts() {
        let m = find_mount(MOUNTS, Path::new("/data/imagenet/train")).unwrap();
        assert_eq!(m.fs_type, "ext4");
        let m = find_mount(MOUNTS, Path::new("/data/remote/x")).unwrap();
        assert_eq!(m.fs_type, "nfs4");
        let m = find_mount(MOUNTS, Path::new("/datax")).unwrap();
        assert_eq!(
            m.fs_type, "overlay",
            "a prefix of the name is not a parent directory"
        );
        let m = find_mount(MOUNTS, Path::new("/mnt/with space/a")).unwrap();
        assert_eq!(m.fs_type, "xfs");
    }

    #[test]
    fn network_types() {
        assert!(is_network_fs("nfs4"));
        assert!(is_network_fs("fuse.s3fs"));
        assert!(is_network_fs("lustre"));
        assert!(!is_network_fs("ext4"));
        assert!(!is_network_fs("fuse.lxcfs"));
    }

    #[test]
    fn filesystem_judgement() {
        let m = find_mount(MOUNTS, Path::new("/data/remote/x")).unwrap();
        let c = judge_filesystem("/data/remote/x", Some(&m));
        assert_eq!(c.status, Status::Warn);
        assert!(c.fix.unwrap().contains("shards"));
        let m = find_mount(MOUNTS, Path::new("/data/x")).unwrap();
        assert_eq!(judge_filesystem("/data/x", Some(&m)).status, Status::Pass);
        assert_eq!(judge_filesystem("/x", None).status, Status::Skip);
    }

    #[test]
    fn storage_and_throughput_judgement() {
        assert_eq!(
            judge_storage("/d", Some(true), None, None).status,
            Status::Warn
        );
        assert_eq!(
            judge_storage("/d", Some(false), None, None).status,
            Status::Pass
        );
        assert_eq!(judge_storage("/d", None, None, None).status, Status::Skip);
        // a virtio disk flagged rotational, measured at 158 files in 0.01 s: not spinning
        let fast = Some(ReadSample {
            bytes: 1 << 20,
            files: 158,
            seconds: 0.01,
        });
        let c = judge_storage("/d", Some(true), None, fast);
        assert_eq!(c.status, Status::Pass);
        assert!(
            !c.summary.contains("is on a spinning disk") && c.summary.contains("158 files"),
            "{}",
            c.summary
        );
        // too few files to judge by, or slow enough to be a disk: the flag stands
        let few = Some(ReadSample {
            bytes: 1 << 20,
            files: 3,
            seconds: 0.001,
        });
        assert_eq!(
            judge_storage("/d", Some(true), None, few).status,
            Status::Warn
        );
        let slow = Some(ReadSample {
            bytes: 1 << 20,
            files: 150,
            seconds: 1.0,
        });
        assert_eq!(
            judge_storage("/d", Some(true), None, slow).status,
            Status::Warn
        );
        let s = |bytes, secs| {
            Some(ReadSample {
                bytes,
                files: 3,
                seconds: secs,
            })
        };
        assert_eq!(judge_throughput("/d", s(1 << 30, 1.0)).status, Status::Pass);
        assert_eq!(
            judge_throughput("/d", s(10 << 20, 1.0)).status,
            Status::Warn
        );
        assert_eq!(judge_throughput("/d", s(0, 1.0)).status, Status::Skip);
        assert_eq!(judge_throughput("/d", None).status, Status::Skip);
    }

    #[test]
    fn samples_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.bin"), vec![1u8; 300_000]).unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/b.bin"), vec![2u8; 200_000]).unwrap();
        let s = read_sample(dir.path(), 1 << 30, Duration::from_secs(5)).unwrap();
        assert_eq!(s.bytes, 500_000);
        assert_eq!(s.files, 2);
        let s = read_sample(dir.path(), 100_000, Duration::from_secs(5)).unwrap();
        assert_eq!(s.bytes, 100_000, "stops at the byte budget");
    }
}
