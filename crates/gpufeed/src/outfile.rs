//! Writing output files safely: nothing lost, nothing overwritten by surprise, no symlink followed.
//!
//! - A file is written under a temporary, unpredictable name (the `tempfile` crate) in the folder
//!   of its target and only then given the target's name, so the target never exists half-written
//!   and an old file is never truncated before the new one is certain to exist.
//! - Reports are renamed over their target ([`write_atomic`]); recordings are never put over an
//!   existing file unless asked ([`Pending`] with [`Clobber::Replace`]), and default names get a
//!   suffix on collision ([`Clobber::Suffix`]).
//! - `rename(2)` and `link(2)` replace or refuse a symlink at the target; they never write through
//!   it.
//! - gpufeed deletes only what it created: a temporary file not yet named is removed when dropped.

use std::fs::{File, Permissions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use tempfile::NamedTempFile;

#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("{path} already exists: choose another name or add --force to replace it")]
    Exists { path: PathBuf },
    #[error("cannot write {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// What to do when the target of a [`Pending`] file already exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clobber {
    /// Refuse ([`OutputError::Exists`]).
    Refuse,
    /// Replace it (`--force`).
    Replace,
    /// Take the first free name among `NAME-2.EXT`, `NAME-3.EXT`, ... (default names).
    Suffix,
}

/// The folder a file at `path` lives in (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A temporary file in the folder of `target`, readable as a normal new file would be (0666 less
/// the umask).
fn temp_beside(target: &Path) -> io::Result<NamedTempFile> {
    tempfile::Builder::new()
        .prefix(".gpufeed-")
        .suffix(".part")
        .permissions(Permissions::from_mode(0o666))
        .tempfile_in(parent_of(target))
}

/// `path` with `-N` before its extension: `a/rec.ndjson` → `a/rec-2.ndjson`,
/// `rec.ndjson.zst` → `rec-2.ndjson.zst` (a compression suffix stays with its extension).
pub(crate) fn with_suffix(path: &Path, n: u32) -> PathBuf {
    let name = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext_at = match name.rfind('.') {
        Some(i) if i > 0 => {
            let before = &name[..i];
            let compressed = matches!(&name[i + 1..], "zst" | "gz");
            match before.rfind('.') {
                Some(j) if compressed && j > 0 => Some(j),
                _ => Some(i),
            }
        }
        _ => None,
    };
    let name = match ext_at {
        Some(i) => format!("{}-{n}{}", &name[..i], &name[i..]),
        None => format!("{name}-{n}"),
    };
    path.with_file_name(name)
}

/// True when `path` is (or a symlink there leads to) a character or block device, a FIFO or a
/// socket: something a rename must never replace.
pub(crate) fn special(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(path).is_ok_and(|m| {
        let t = m.file_type();
        t.is_char_device() || t.is_block_device() || t.is_fifo() || t.is_socket()
    })
}

/// True when something (a file, a folder, a symlink, even a dangling one) is at `path`.
pub(crate) fn occupied(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// A file being written that takes its name only at [`Pending::commit`]. Dropped uncommitted, it
/// is removed (it was gpufeed's own temporary file).
pub(crate) struct Pending {
    tmp: NamedTempFile,
    target: PathBuf,
    clobber: Clobber,
}

impl Pending {
    /// Creates the temporary file beside `target`. With [`Clobber::Refuse`], an existing target is
    /// refused now, before anything else happens.
    pub(crate) fn new(target: &Path, clobber: Clobber) -> Result<Pending, OutputError> {
        if clobber == Clobber::Refuse && occupied(target) {
            return Err(OutputError::Exists {
                path: target.to_path_buf(),
            });
        }
        // `--force` over a device, FIFO or socket would rename a file over it: as root, over
        // `/dev/null` itself. A recording only ever replaces a file (or a symlink).
        if clobber == Clobber::Replace && special(target) {
            return Err(OutputError::Io {
                path: target.to_path_buf(),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "it is a device, FIFO or socket, not a file: a recording is written to a file; choose a file name",
                ),
            });
        }
        let tmp = temp_beside(target).map_err(|source| OutputError::Io {
            path: target.to_path_buf(),
            source,
        })?;
        Ok(Pending {
            tmp,
            target: target.to_path_buf(),
            clobber,
        })
    }

    /// The open temporary file (the same file the target will be).
    pub(crate) fn file(&self) -> &File {
        self.tmp.as_file()
    }

    /// The name the file will get.
    pub(crate) fn target(&self) -> &Path {
        &self.target
    }

    /// Gives the file its name; returns the open file and the name it got (a suffixed one with
    /// [`Clobber::Suffix`] when the target was taken meanwhile).
    pub(crate) fn commit(self) -> Result<(File, PathBuf), OutputError> {
        let Pending {
            tmp,
            target,
            clobber,
        } = self;
        let io_err = |path: &Path, source: io::Error| OutputError::Io {
            path: path.to_path_buf(),
            source,
        };
        match clobber {
            Clobber::Replace => tmp
                .persist(&target)
                .map(|f| (f, target.clone()))
                .map_err(|e| io_err(&target, e.error)),
            Clobber::Refuse => match tmp.persist_noclobber(&target) {
                Ok(f) => Ok((f, target)),
                Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                    Err(OutputError::Exists { path: target })
                }
                Err(e) => Err(io_err(&target, e.error)),
            },
            Clobber::Suffix => {
                let mut tmp = tmp;
                for n in 1..10_000u32 {
                    let name = if n == 1 {
                        target.clone()
                    } else {
                        with_suffix(&target, n)
                    };
                    match tmp.persist_noclobber(&name) {
                        Ok(f) => return Ok((f, name)),
                        Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => tmp = e.file,
                        Err(e) => return Err(io_err(&name, e.error)),
                    }
                }
                Err(OutputError::Exists { path: target })
            }
        }
    }
}

/// Writes a report: `write` fills a temporary file beside `path`, which is then renamed over
/// `path` (replacing a file or a symlink there, never writing through it). A failure leaves
/// `path` as it was. A device, FIFO or socket there (`/dev/stdout`, `/dev/null`, a pipe) is
/// written to, not replaced: renaming over it would, as root, replace the device node itself.
pub(crate) fn write_atomic_with(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<&File>) -> io::Result<()>,
) -> io::Result<()> {
    if special(path) {
        let f = std::fs::OpenOptions::new().write(true).open(path)?;
        let mut w = BufWriter::with_capacity(1 << 16, &f);
        write(&mut w)?;
        return w.flush();
    }
    let tmp = temp_beside(path)?;
    {
        let mut w = BufWriter::with_capacity(1 << 16, tmp.as_file());
        write(&mut w)?;
        w.flush()?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// [`write_atomic_with`] for bytes in memory.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Writes a report file (`--html`, `--export-*`, a sweep's own files) whole or not at all: through
/// a temporary file and a rename ([`write_atomic`]), so a reader or a crash never sees half a
/// report and a symlink at `path` is never followed. Presenters only make the bytes; this is
/// where they reach the disk. The error names the file (bad input or output, exit 3).
pub(crate) fn write_report(
    path: &Path,
    bytes: impl AsRef<[u8]>,
) -> Result<(), crate::exit::Failure> {
    write_atomic(path, bytes.as_ref())
        .map_err(|e| crate::exit::Failure::input(format!("cannot write {}: {e}", path.display())))
}

/// True when `a` and `b` name the same file: the same inode when both exist, else the same
/// folder (symlinks resolved) and the same name.
pub(crate) fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        (Err(_), Err(_)) => {
            let canon = |p: &Path| {
                std::fs::canonicalize(parent_of(p))
                    .ok()
                    .map(|d| d.join(p.file_name().unwrap_or_default()))
            };
            match (canon(a), canon(b)) {
                (Some(x), Some(y)) => x == y,
                _ => a == b,
            }
        }
        _ => false,
    }
}

/// Refuses (exit 2) an input that is a pipe, a FIFO or a socket (`/dev/stdin`, `<(cmd)`), for
/// commands that read their inputs more than once: the second read would hang or find nothing.
/// `diagnose` reads once and takes them.
pub(crate) fn refuse_unseekable(what: &str, input: &Path) -> Result<(), crate::exit::Failure> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(m) = std::fs::metadata(input) else {
        return Ok(()); // missing or unreadable: the reader's own message says so
    };
    let t = m.file_type();
    // Character devices (/dev/zero, /dev/null) read alike every time: the readers refuse them
    // by their content.
    if t.is_fifo() || t.is_socket() {
        return Err(crate::exit::Failure::new(
            crate::exit::Exit::Usage,
            format!(
                "{what} {} is a pipe or a socket, not a file: this command reads it more than once; save it to a file first (e.g. `cat ... > input.ndjson`)",
                input.display()
            ),
        ));
    }
    Ok(())
}

/// Refuses (exit 2) an output that is the same file as one of the inputs.
pub(crate) fn refuse_same_as_input<'a>(
    option: &str,
    output: &Path,
    inputs: impl IntoIterator<Item = &'a Path>,
) -> Result<(), crate::exit::Failure> {
    for input in inputs {
        if same_file(output, input) {
            return Err(crate::exit::Failure::new(
                crate::exit::Exit::Usage,
                format!(
                    "{option} {} is the same file as the input {}: writing it would destroy the input; choose another output name",
                    output.display(),
                    input.display()
                ),
            ));
        }
    }
    Ok(())
}

/// One output a command writes: the option that names it (or what it is, for a file in the
/// output folder), its path, and what it holds: two outputs holding the same bytes (`tune.json`
/// and `--export-json`) may share a path.
struct Output<'a> {
    option: &'a str,
    path: &'a Path,
    content: &'a str,
}

impl<'a> Output<'a> {
    fn new(option: &'a str, path: &'a Path) -> Self {
        Output {
            option,
            path,
            content: option,
        }
    }
}

/// `/dev/null`, `/dev/stdout` on a terminal: written to, never replaced, so two outputs may share it.
fn is_char_device(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_char_device())
}

/// Refuses (exit 2) two outputs of one command at one path: the files its options name
/// (`(option, path)`, absent ones `None`) and the files it writes in its output folder `dir`
/// (`(file name, the option that writes the same bytes)`: an option may share its path with the
/// folder's file of the same content).
pub(crate) fn refuse_shared(
    options: &[(&str, Option<&Path>)],
    dir: Option<&Path>,
    dir_files: &[(&str, &str)],
) -> Result<(), crate::exit::Failure> {
    let in_dir: Vec<(String, PathBuf, &str)> = dir
        .map(|d| {
            dir_files
                .iter()
                .map(|(name, content)| {
                    (
                        format!("the output folder's {name}"),
                        d.join(name),
                        *content,
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let mut outputs: Vec<Output> = options
        .iter()
        .filter_map(|(o, p)| Some(Output::new(o, (*p)?)))
        .collect();
    outputs.extend(in_dir.iter().map(|(what, path, content)| Output {
        option: what,
        path,
        content,
    }));
    refuse_shared_outputs(&outputs)
}

/// Refuses (exit 2) two outputs of one command that are the same file: one would silently
/// overwrite the other.
fn refuse_shared_outputs(outputs: &[Output<'_>]) -> Result<(), crate::exit::Failure> {
    for (i, a) in outputs.iter().enumerate() {
        for b in &outputs[i + 1..] {
            if a.content != b.content && same_file(a.path, b.path) && !is_char_device(a.path) {
                return Err(crate::exit::Failure::new(
                    crate::exit::Exit::Usage,
                    format!(
                        "{} {} and {} {} are the same file: one would overwrite the other; give each its own name",
                        a.option,
                        a.path.display(),
                        b.option,
                        b.path.display()
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Creates a new folder at `base`, or at `base-2`, `base-3`, ... when taken; returns its path.
pub(crate) fn create_dir_unique(base: &Path) -> io::Result<PathBuf> {
    for n in 1..10_000u32 {
        let p = if n == 1 {
            base.to_path_buf()
        } else {
            let mut s = base.as_os_str().to_owned();
            s.push(format!("-{n}"));
            PathBuf::from(s)
        };
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AlreadyExists,
        format!("{} and 9,999 suffixed names are taken", base.display()),
    ))
}

/// A private folder (mode 0700, unpredictable name) in the temporary directory, or in /tmp when
/// that path would leave no room for a Unix socket name (108 bytes). Removed when dropped.
pub(crate) fn private_dir(prefix: &str) -> io::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(prefix)
        .permissions(Permissions::from_mode(0o700))
        .tempdir_in(private_base())
}

/// The file that marks a private folder as gpufeed's own: only folders holding it are ever
/// removed as stale (a folder of someone else's that happens to match the name is left alone).
const OWNED_MARK: &str = ".gpufeed-owned";

/// A private folder (see [`private_dir`]) named `{kind}{pid}-…` and marked as gpufeed's; the
/// folders of the same kind that a gpufeed killed before it could clean up (SIGKILL) left behind
/// are removed first.
pub(crate) fn owned_private_dir(kind: &str) -> io::Result<tempfile::TempDir> {
    let base = private_base();
    remove_stale(&base, kind);
    let d = private_dir(&format!("{kind}{}-", std::process::id()))?;
    std::fs::write(d.path().join(OWNED_MARK), b"")?;
    Ok(d)
}

/// Removes the folders `{kind}PID-*` in `base` that gpufeed made ([`OWNED_MARK`]) and left
/// behind: only real folders, not symlinks, owned by this user, whose PID no longer runs.
/// Returns how many were removed.
pub(crate) fn remove_stale(base: &Path, kind: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(kind))
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(pid, _)| pid.parse::<u32>().ok())
        else {
            continue;
        };
        // symlink_metadata: a symlink planted under our name is left alone, never followed.
        let ours = std::fs::symlink_metadata(e.path())
            .is_ok_and(|m| m.file_type().is_dir() && m.uid() == uid)
            && std::fs::symlink_metadata(e.path().join(OWNED_MARK))
                .is_ok_and(|m| m.file_type().is_file());
        if ours && !pid_alive(pid) && std::fs::remove_dir_all(e.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Whether a process with this pid runs (a zombie does not); read from /proc, as
/// `sample::host::pid_alive` does, which this low layer cannot import.
fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            let (_, rest) = s.rsplit_once(')')?;
            rest.trim_start().chars().next()
        })
        .is_some_and(|state| state != 'Z' && state != 'X')
}

/// The folder [`private_dir`] creates its folders in: the temporary directory, or `/tmp` when
/// that path is too long for a socket inside it.
pub(crate) fn private_base() -> PathBuf {
    let tmp = std::env::temp_dir();
    if tmp.as_os_str().len() < 60 {
        tmp
    } else {
        PathBuf::from("/tmp")
    }
}

/// Refuses (exit 2) a `--tensorboard DIR` that is a symlink: no output follows one.
pub(crate) fn refuse_symlinked_tensorboard(dir: &Path) -> Result<(), crate::exit::Failure> {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(crate::exit::Failure::new(
            crate::exit::Exit::Usage,
            format!(
                "--tensorboard {} is a symlink: give the real folder it points to, or another folder",
                dir.display()
            ),
        ));
    }
    Ok(())
}

/// `run --tensorboard DIR`, before the job starts (else a file there or a folder that cannot
/// be written would be found out only after the job ended): DIR is no symlink, is a
/// folder or can be made one, and a file can be created in it. Exit 2 otherwise.
pub(crate) fn check_tensorboard_dir(dir: &Path) -> Result<(), crate::exit::Failure> {
    refuse_symlinked_tensorboard(dir)?;
    let bad = |why: String| {
        crate::exit::Failure::new(
            crate::exit::Exit::Usage,
            format!(
                "--tensorboard {}: {why}; choose another folder",
                dir.display()
            ),
        )
    };
    if std::fs::symlink_metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(bad("it is a file, not a folder".into()));
    }
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("cannot create the folder ({e})")))?;
    tempfile::Builder::new()
        .prefix(".gpufeed-write-check-")
        .tempfile_in(dir)
        .map(drop)
        .map_err(|e| bad(format!("cannot write in it ({e})")))
}

/// Writes `bytes` as `name` into the `--tensorboard` folder `dir` (created if absent) and returns
/// its path. `replace`: a file of that name is replaced (`export` again); else a name taken
/// meanwhile gets a suffix (`run`: never another run's scalars).
pub(crate) fn write_into_tensorboard_dir(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    replace: bool,
) -> Result<PathBuf, crate::exit::Failure> {
    refuse_symlinked_tensorboard(dir)?;
    std::fs::create_dir_all(dir).map_err(|e| {
        crate::exit::Failure::input(format!(
            "cannot create the TensorBoard directory {}: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join(name);
    if replace {
        write_report(&path, bytes)?;
        return Ok(path);
    }
    let cannot = |e: &dyn std::fmt::Display| {
        crate::exit::Failure::input(format!("cannot write {}: {e}", path.display()))
    };
    let pending = Pending::new(&path, Clobber::Suffix).map_err(|e| cannot(&e))?;
    pending.file().write_all(bytes).map_err(|e| cannot(&e))?;
    let (_, name) = pending.commit().map_err(|e| cannot(&e))?;
    Ok(name)
}

/// Writes generated text to stdout; a closed pipe (`| head`) is not an error.
pub(crate) fn print_stdout(bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(bytes).and_then(|()| so.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_device_is_written_to_never_replaced() {
        let null = std::path::Path::new("/dev/null");
        assert!(super::special(null));
        // --force over a device is refused before anything is created
        assert!(super::Pending::new(null, super::Clobber::Replace).is_err());
        // a report to /dev/null goes into the device; the node stays a device
        super::write_atomic(null, b"report").unwrap();
        assert!(super::special(null));
    }

    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn pending_file_appears_only_on_commit() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("r.ndjson");
        let mut p = Pending::new(&t, Clobber::Refuse).unwrap();
        writeln!(p.tmp.as_file_mut(), "x").unwrap();
        assert!(!t.exists());
        let (_, name) = p.commit().unwrap();
        assert_eq!(name, t);
        assert_eq!(std::fs::read_to_string(&t).unwrap(), "x\n");
        // Dropped uncommitted: nothing left behind.
        drop(Pending::new(&d.path().join("other"), Clobber::Refuse).unwrap());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn refuse_keeps_an_existing_file_and_a_symlink_target() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("keep");
        std::fs::write(&t, "old").unwrap();
        assert!(matches!(
            Pending::new(&t, Clobber::Refuse),
            Err(OutputError::Exists { .. })
        ));
        // Created after the check: commit still refuses.
        let t2 = d.path().join("late");
        let p = Pending::new(&t2, Clobber::Refuse).unwrap();
        std::fs::write(&t2, "theirs").unwrap();
        assert!(matches!(p.commit(), Err(OutputError::Exists { .. })));
        assert_eq!(std::fs::read_to_string(&t2).unwrap(), "theirs");
        // A symlink planted at the output is not followed, even with Replace.
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.path().join("link");
        symlink(&victim, &link).unwrap();
        let (_, name) = Pending::new(&link, Clobber::Replace)
            .unwrap()
            .commit()
            .unwrap();
        assert_eq!(name, link);
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(!std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn suffix_on_collision() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            with_suffix(Path::new("a/rec.ndjson.zst"), 2),
            Path::new("a/rec-2.ndjson.zst")
        );
        assert_eq!(with_suffix(Path::new("rec"), 3), Path::new("rec-3"));
        let t = d.path().join("g.ndjson");
        std::fs::write(&t, "a").unwrap();
        std::fs::write(d.path().join("g-2.ndjson"), "b").unwrap();
        let (_, name) = Pending::new(&t, Clobber::Suffix).unwrap().commit().unwrap();
        assert_eq!(name, d.path().join("g-3.ndjson"));
        assert_eq!(std::fs::read_to_string(&t).unwrap(), "a");
        let base = d.path().join("sweep");
        assert_eq!(create_dir_unique(&base).unwrap(), base);
        assert_eq!(create_dir_unique(&base).unwrap(), d.path().join("sweep-2"));
    }

    #[test]
    fn atomic_write_replaces_a_symlink_instead_of_following_it() {
        let d = tempfile::tempdir().unwrap();
        let victim = d.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        let link = d.path().join("report.html");
        symlink(&victim, &link).unwrap();
        write_atomic(&link, b"<html>").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "<html>");
        // A failed write leaves the old report.
        let r: io::Result<()> = write_atomic_with(&link, |_| Err(io::Error::other("boom")));
        assert!(r.is_err());
        assert_eq!(std::fs::read_to_string(&link).unwrap(), "<html>");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn same_file_by_inode_or_by_name() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, "x").unwrap();
        let hard = d.path().join("hard");
        std::fs::hard_link(&a, &hard).unwrap();
        assert!(same_file(&a, &hard));
        assert!(same_file(&d.path().join("n"), &d.path().join("./n")));
        assert!(!same_file(&a, &d.path().join("n")));
        assert!(refuse_same_as_input("--html", &hard, [a.as_path()]).is_err());
    }

    #[test]
    fn stale_folders_of_gone_gpufeeds_are_removed_and_nothing_else() {
        let base = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        child.wait().unwrap();
        let gone = child.id();
        let me = std::process::id();
        let mk = |n: &str, owned: bool| {
            let d = base.path().join(n);
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("step.sock"), "").unwrap();
            if owned {
                std::fs::write(d.join(OWNED_MARK), "").unwrap();
            }
            d
        };
        let stale = mk(&format!("gpufeed-steps-{gone}-abc"), true);
        let live = mk(&format!("gpufeed-steps-{me}-abc"), true);
        let other = mk("gpufeed-steps-xyz", true);
        // Named like ours, pid gone, but gpufeed never made it: left alone.
        let foreign = mk(&format!("gpufeed-steps-{gone}-foreign"), false);
        let other_kind = mk(&format!("gpufeed-inject-{gone}-abc"), true);
        let target = mk("elsewhere", true);
        let link = base.path().join(format!("gpufeed-steps-{gone}-lnk"));
        symlink(&target, &link).unwrap();
        assert_eq!(remove_stale(base.path(), "gpufeed-steps-"), 1);
        assert!(!stale.exists());
        assert!(live.exists() && other.exists() && foreign.exists() && other_kind.exists());
        assert!(target.join("step.sock").exists());
        assert!(std::fs::symlink_metadata(&link).is_ok());
        assert_eq!(remove_stale(base.path(), "gpufeed-inject-"), 1);
        assert!(!other_kind.exists());
    }

    #[test]
    fn two_outputs_at_one_path_are_refused_unless_they_hold_the_same_bytes() {
        let d = tempfile::tempdir().unwrap();
        let j = d.path().join("r.json");
        let h = d.path().join("./r.json");
        let e =
            refuse_shared_outputs(&[Output::new("--export-json", &j), Output::new("--html", &h)])
                .unwrap_err();
        assert_eq!(e.exit, crate::exit::Exit::Usage);
        assert!(
            e.to_string().contains("--export-json") && e.to_string().contains("--html"),
            "{e}"
        );
        let folder = Output {
            option: "the output folder's tune.json",
            path: &j,
            content: "--export-json",
        };
        refuse_shared_outputs(&[Output::new("--export-json", &j), folder]).unwrap();
        refuse_shared_outputs(&[
            Output::new("--export-json", &j),
            Output::new("--html", &d.path().join("r.html")),
        ])
        .unwrap();
        // a device is written to, never replaced: nothing is lost
        let null = Path::new("/dev/null");
        refuse_shared_outputs(&[
            Output::new("--export-json", null),
            Output::new("--html", null),
        ])
        .unwrap();
    }

    #[test]
    fn private_dir_is_0700() {
        let d = private_dir("gpufeed-test-").unwrap();
        let m = std::fs::metadata(d.path()).unwrap().permissions().mode();
        assert_eq!(m & 0o777, 0o700);
    }
}
