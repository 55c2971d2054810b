//! Running the user's command: spawn it unchanged, pass its exit status through, and forward
//! signals to the whole job.

pub(crate) mod watchdog;

use crate::exit::{Exit, Failure};
use signal_hook::consts::{SIGHUP, SIGINT, SIGQUIT, SIGTERM};
use signal_hook::iterator::exfiltrator::WithOrigin;
use signal_hook::iterator::SignalsInfo;
use signal_hook::low_level::siginfo::Cause;
use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("command not found: {cmd} (check the name and your PATH)")]
    NotFound { cmd: String },
    #[error("cannot execute {cmd}: {source} (is it a program, with execute permission?)")]
    NotExecutable { cmd: String, source: io::Error },
    #[error("cannot start {cmd}: {source}")]
    Spawn { cmd: String, source: io::Error },
    #[error("no command given: put it after --, e.g. gpufeed run -- python train.py")]
    Empty,
    #[error("lost track of the job: {0}")]
    Wait(io::Error),
    #[error("cannot install signal handlers: {0}")]
    Signals(io::Error),
}

impl crate::exit::HasExit for JobError {
    fn exit(&self) -> crate::exit::Exit {
        use crate::exit::Exit;
        match self {
            JobError::NotFound { .. } => Exit::NotFound,
            JobError::NotExecutable { .. } => Exit::CannotExecute,
            JobError::Empty => Exit::Usage,
            _ => Exit::Failure,
        }
    }
}

/// How the job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum JobExit {
    Code(i32),
    Signal(i32),
}

impl JobExit {
    /// The exit code a shell would report: the code itself, or 128 + signal.
    pub(crate) fn shell_code(self) -> u8 {
        match self {
            JobExit::Code(c) => (c & 0xff) as u8,
            JobExit::Signal(s) => crate::exit::Exit::signal(s),
        }
    }
    pub(crate) fn code(self) -> Option<i32> {
        match self {
            JobExit::Code(c) => Some(c),
            JobExit::Signal(_) => None,
        }
    }
    pub(crate) fn signal(self) -> Option<i32> {
        match self {
            JobExit::Signal(s) => Some(s),
            JobExit::Code(_) => None,
        }
    }
}

/// The user's command, running.
pub(crate) struct Job {
    child: Child,
    /// With a watchdog ([`SpawnOpts::die_with_parent`]): the job's own pid (`child` is the
    /// watchdog) and gpufeed's end of the pipe whose closing tells the watchdog gpufeed is gone.
    watched: Option<(u32, std::os::fd::OwnedFd)>,
}

impl Job {
    /// Starts `argv` with the terminal's stdin/stdout/stderr, in gpufeed's process group (so a
    /// Ctrl-C at the terminal reaches the job directly, as it would without gpufeed), with
    /// variables added to (or replacing in) gpufeed's own environment. Arguments are passed as
    /// they are, bytes that are not UTF-8 included. With `stdout_to_stderr`, the job's stdout goes to gpufeed's stderr: gpufeed's own stdout
    /// then holds only its report (`run --format json > r.json`).
    pub(crate) fn spawn_terminal<S: AsRef<OsStr>>(
        argv: &[S],
        env: &[(String, String)],
        stdout_to_stderr: bool,
    ) -> Result<Job, JobError> {
        let (prog, args) = argv.split_first().ok_or(JobError::Empty)?;
        let mut cmd = Command::new(prog);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        if stdout_to_stderr {
            cmd.stdout(Stdio::from(std::io::stderr()));
        }
        Self::spawn_command(prog.as_ref(), cmd)
    }

    /// Starts `argv` with extra environment variables, in a process group of its own (so gpufeed
    /// alone decides when the job stops and can signal every process of it, see
    /// [`Job::stop_tree`]), stdin closed, and stdout/stderr piped when `opts.capture` (take them
    /// with [`Job::take_output`]) or inherited otherwise.
    pub(crate) fn spawn_with(argv: &[String], opts: &SpawnOpts) -> Result<Job, JobError> {
        let (prog, args) = argv.split_first().ok_or(JobError::Empty)?;
        let mut cmd = Command::new(prog);
        cmd.args(args)
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .process_group(0);
        if opts.capture {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        if !opts.die_with_parent {
            return Self::spawn_command(prog.as_ref(), cmd);
        }
        // A watchdog between gpufeed and the job (see `watchdog`): it holds the read end of
        // `alive`, learns that gpufeed died when the pipe closes, and then ends the job's whole
        // tree. It reports the job's pid on `pid_pipe`.
        let (alive_r, alive_w) = cloexec_pipe().map_err(|source| JobError::Spawn {
            cmd: prog.to_string(),
            source,
        })?;
        let (pid_r, pid_w) = cloexec_pipe().map_err(|source| JobError::Spawn {
            cmd: prog.to_string(),
            source,
        })?;
        let fds = watchdog::Fds {
            alive_r: alive_r.as_raw_fd(),
            alive_w: alive_w.as_raw_fd(),
            pid_r: pid_r.as_raw_fd(),
            pid_w: pid_w.as_raw_fd(),
        };
        // SAFETY: `watchdog::fork_in_child` runs between fork and exec and makes only
        // async-signal-safe calls (no allocation, no lock).
        unsafe {
            cmd.pre_exec(move || watchdog::fork_in_child(fds));
        }
        let mut job = Self::spawn_command(prog.as_ref(), cmd)?;
        drop(pid_w);
        drop(alive_r);
        let mut buf = [0u8; 4];
        let job_pid = match std::io::Read::read_exact(&mut File::from(pid_r), &mut buf) {
            Ok(()) => u32::from_ne_bytes(buf),
            // The watchdog could not fork: it exits at once; the error shows in its status.
            Err(_) => job.child.id(),
        };
        job.watched = Some((job_pid, alive_w));
        Ok(job)
    }

    fn spawn_command(prog: &OsStr, mut cmd: Command) -> Result<Job, JobError> {
        let prog = prog.to_string_lossy().into_owned();
        let child = cmd.spawn().map_err(|source| match source.kind() {
            io::ErrorKind::NotFound => JobError::NotFound { cmd: prog.clone() },
            io::ErrorKind::PermissionDenied => JobError::NotExecutable {
                cmd: prog.clone(),
                source,
            },
            _ if source.raw_os_error() == Some(libc::ENOEXEC) => JobError::NotExecutable {
                cmd: prog.clone(),
                source,
            },
            _ => JobError::Spawn {
                cmd: prog.clone(),
                source,
            },
        })?;
        Ok(Job {
            child,
            watched: None,
        })
    }

    /// The job's piped stdout and stderr (once; `None` when not captured or already taken).
    pub(crate) fn take_output(&mut self) -> (Option<ChildStdout>, Option<ChildStderr>) {
        (self.child.stdout.take(), self.child.stderr.take())
    }

    /// The exit status if the job has ended, without blocking.
    pub(crate) fn try_wait(&mut self) -> Result<Option<JobExit>, JobError> {
        Ok(self.child.try_wait().map_err(JobError::Wait)?.map(exit_of))
    }

    /// Stops the job's whole process tree: its process group (a job started with
    /// [`Job::spawn_with`] leads one) plus `extra` pids (descendants that may have left the
    /// group), first with SIGINT, then SIGTERM, then SIGKILL, each given `grace` to work. Returns
    /// how the root process ended and the last signal that had to be sent (`None` when the job had
    /// already ended and nothing of it was left).
    pub(crate) fn stop_tree(
        &mut self,
        extra: &[u32],
        grace: Duration,
    ) -> Result<(JobExit, Option<i32>), JobError> {
        let pgid = self.pid();
        let mut root_exit = self.try_wait()?;
        let mut last = None;
        // Descendants that left the group (a `setsid` daemon re-parented to the watchdog) are
        // found through their parents while the watchdog lives, and signalled with the rest.
        let mut extra = extra.to_vec();
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGKILL] {
            add_new(&mut extra, descendants(pgid));
            let left = live_members(pgid, &extra);
            if root_exit.is_some() && left.is_empty() {
                break;
            }
            last = Some(sig);
            if root_exit.is_none() {
                signal_all(&[pgid], sig);
            }
            // SAFETY: kill(2) on a process group with a valid signal has no memory effects.
            unsafe {
                libc::kill(-(pgid as libc::pid_t), sig);
            }
            signal_all(&left, sig);
            let deadline = Instant::now() + grace;
            loop {
                if root_exit.is_none() {
                    root_exit = self.try_wait()?;
                }
                add_new(&mut extra, descendants(pgid));
                if root_exit.is_some() && live_members(pgid, &extra).is_empty() {
                    break;
                }
                if Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        let exit = match root_exit {
            Some(e) => e,
            None => self.wait()?,
        };
        Ok((exit, last))
    }

    /// The pid to signal and wait for: the job, or its watchdog (which passes signals sent to
    /// the job's process group through, since it ignores them, and exits as the job did).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The job's own pid: the root of the process tree to record.
    pub(crate) fn job_pid(&self) -> u32 {
        self.watched.as_ref().map_or(self.child.id(), |(p, _)| *p)
    }

    /// Waits for the job to end.
    pub(crate) fn wait(&mut self) -> Result<JobExit, JobError> {
        let st = self.child.wait().map_err(JobError::Wait)?;
        Ok(exit_of(st))
    }
}

/// A pipe whose two ends are closed on exec.
fn cloexec_pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array we own; we own them from here on.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Options for [`Job::spawn_with`].
#[derive(Debug, Clone, Default)]
pub(crate) struct SpawnOpts {
    /// Variables added to (or replacing in) gpufeed's own environment.
    pub env: Vec<(String, String)>,
    /// Pipe stdout and stderr instead of inheriting them.
    pub capture: bool,
    /// The job's whole tree ends if gpufeed dies without stopping it (even by SIGKILL): a
    /// watchdog process (see [`watchdog`]) sits between gpufeed and the job, is the job's child
    /// subreaper, and when the pipe it holds to gpufeed closes it sends SIGTERM to every process
    /// of the tree, then SIGKILL 2 s later. [`Job::pid`] is then the watchdog's pid (it exits as
    /// the job did) and [`Job::job_pid`] the job's.
    pub die_with_parent: bool,
}

fn exit_of(st: std::process::ExitStatus) -> JobExit {
    match (st.code(), st.signal()) {
        (Some(c), _) => JobExit::Code(c),
        (None, Some(s)) => JobExit::Signal(s),
        (None, None) => JobExit::Code(1),
    }
}

/// Pids of processes that are alive (not zombies) and either in process group `pgid` or listed in
/// `extra`.
pub(crate) fn live_members(pgid: u32, extra: &[u32]) -> Vec<u32> {
    let mut out = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((state, pgrp)) = stat_state_pgrp(pid) {
                if state != 'Z' && state != 'X' && (pgrp == pgid || extra.contains(&pid)) {
                    out.push(pid);
                }
            }
        }
    }
    out
}

/// State letter and process group of `pid` from /proc/PID/stat.
fn stat_state_pgrp(pid: u32) -> Option<(char, u32)> {
    stat_fields(pid).map(|(state, _, pgrp)| (state, pgrp))
}

/// State letter, parent pid and process group of `pid` from /proc/PID/stat.
fn stat_fields(pid: u32) -> Option<(char, u32, u32)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    let pgrp = f.next()?.parse().ok()?;
    Some((state, ppid, pgrp))
}

/// Pids of every live descendant of `root` (children, their children, ...), from one pass over
/// /proc.
pub(crate) fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if let Some((state, ppid, _)) = stat_fields(pid) {
                if state != 'Z' && state != 'X' {
                    parent_of.push((pid, ppid));
                }
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        let p = out[i];
        out.extend(
            parent_of
                .iter()
                .filter(|&&(_, pp)| pp == p)
                .map(|&(c, _)| c),
        );
        i += 1;
    }
    out.remove(0);
    out
}

/// Appends the pids of `new` that `to` does not hold yet.
fn add_new(to: &mut Vec<u32>, new: Vec<u32>) {
    for p in new {
        if !to.contains(&p) {
            to.push(p);
        }
    }
}

/// One termination signal gpufeed received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Received {
    pub signal: i32,
    /// Generated by the terminal (Ctrl-C, Ctrl-\, hang-up): everyone in the foreground process
    /// group, the job included, received it already.
    pub from_terminal: bool,
}

/// Catches SIGINT, SIGTERM, SIGHUP and SIGQUIT on a thread of its own, so gpufeed survives them
/// long enough to flush the recording, and hands each one to `on_signal`.
pub(crate) struct SignalWatch {
    handle: signal_hook::iterator::Handle,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl SignalWatch {
    pub(crate) fn start(
        on_signal: impl Fn(Received) + Send + 'static,
    ) -> Result<SignalWatch, JobError> {
        let mut signals = SignalsInfo::<WithOrigin>::new([SIGINT, SIGTERM, SIGHUP, SIGQUIT])
            .map_err(JobError::Signals)?;
        let handle = signals.handle();
        let thread = std::thread::Builder::new()
            .name("gpufeed-signals".into())
            .spawn(move || {
                for origin in signals.forever() {
                    on_signal(Received {
                        signal: origin.signal,
                        from_terminal: matches!(origin.cause, Cause::Kernel),
                    });
                }
            })
            .map_err(JobError::Signals)?;
        Ok(SignalWatch {
            handle,
            thread: Some(thread),
        })
    }
}

impl Drop for SignalWatch {
    fn drop(&mut self) {
        self.handle.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends `signal` to each pid (errors for processes that are already gone are ignored).
pub(crate) fn signal_all(pids: &[u32], signal: i32) {
    for &pid in pids {
        if pid > 1 {
            // SAFETY: kill(2) with a positive pid and a valid signal number has no memory effects.
            unsafe {
                libc::kill(pid as libc::pid_t, signal);
            }
        }
    }
}

/// Starts `command` with its output (stdout and stderr) in the file `log`, replaced by rename
/// (`watch -- CMD`: the terminal belongs to the view).
pub(crate) fn spawn_logged(
    command: &[String],
    env: &[(String, String)],
    log_path: &std::path::Path,
) -> Result<Child, Failure> {
    // The log replaces an earlier one by rename (a symlink there is replaced, never followed).
    let log = crate::outfile::Pending::new(log_path, crate::outfile::Clobber::Replace)
        .and_then(|p| p.commit())
        .map(|(f, _)| f)
        .map_err(|e| {
            Failure::input(format!(
                "cannot create the job's log {}: {e} (choose another with --job-log)",
                log_path.display()
            ))
        })?;
    let err = log
        .try_clone()
        .map_err(|e| Failure::with(Exit::Failure, e))?;
    let (prog, rest) = command
        .split_first()
        .ok_or_else(|| Failure::new(Exit::Usage, "no command given"))?;
    Command::new(prog)
        .args(rest)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(err)
        .spawn()
        .map_err(|e| {
            let exit = match e.kind() {
                std::io::ErrorKind::NotFound => Exit::NotFound,
                std::io::ErrorKind::PermissionDenied => Exit::CannotExecute,
                _ => Exit::Failure,
            };
            Failure::new(exit, format!("cannot start {prog}: {e}"))
        })
}

/// A finished job's exit code as a shell gives it (128+N for signal N; 1 when neither is known).
pub(crate) fn shell_code(st: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .map(|c| c as u8)
        .or(st.signal().map(crate::exit::Exit::signal))
        .unwrap_or(1)
}

/// Ends a job gpufeed started and the processes of its tree (`pids`): SIGTERM, then SIGKILL
/// after 5 s. Returns the job's exit code as a shell gives it.
pub(crate) fn stop_tree(j: &mut Child, mut pids: Vec<u32>) -> u8 {
    pids.push(j.id());
    signal_all(&pids, libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        if let Ok(Some(_)) = j.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !matches!(j.try_wait(), Ok(Some(_))) {
        signal_all(&pids, libc::SIGKILL);
    }
    j.wait().ok().map(shell_code).unwrap_or(1)
}

/// Signals: one from the terminal reached the whole foreground group, the job included; one
/// sent to gpufeed alone (kill, a scheduler) is forwarded to every process of the job. Installed
/// before the job starts, so no signal can kill gpufeed and orphan the job. Returns the watch
/// and the last signal received (0: none). `pids`: the job's tree, filled in once it runs.
pub(crate) fn forward_signals(
    pids: std::sync::Arc<std::sync::Mutex<Vec<u32>>>,
) -> Result<(SignalWatch, std::sync::Arc<std::sync::atomic::AtomicI32>), Failure> {
    let early_signal = std::sync::Arc::new(std::sync::atomic::AtomicI32::new(0));
    let early = std::sync::Arc::clone(&early_signal);
    let watch = SignalWatch::start(move |r: Received| {
        early.store(r.signal, std::sync::atomic::Ordering::SeqCst);
        if !r.from_terminal {
            let targets = pids.lock().map(|p| p.clone()).unwrap_or_default();
            signal_all(&targets, r.signal);
        }
    })?;
    Ok((watch, early_signal))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::HasExit;

    #[test]
    fn exit_codes_follow_the_shell() {
        assert_eq!(JobExit::Code(3).shell_code(), 3);
        assert_eq!(JobExit::Signal(libc::SIGINT).shell_code(), 130);
        assert_eq!(JobExit::Signal(libc::SIGKILL).shell_code(), 137);
    }

    #[test]
    fn spawn_errors_are_classified() {
        let e = Job::spawn_terminal(&["definitely-not-a-command-xyz"], &[], false)
            .err()
            .unwrap();
        assert_eq!(e.exit().code(), 127);
        assert!(e.to_string().contains("command not found"));
        let e = Job::spawn_terminal(&["/etc/hostname"], &[], false)
            .err()
            .unwrap();
        assert_eq!(e.exit().code(), 126, "{e}");
        assert_eq!(
            Job::spawn_terminal::<&str>(&[], &[], false)
                .err()
                .unwrap()
                .exit()
                .code(),
            2
        );
    }

    #[test]
    fn stop_tree_leaves_no_process_of_the_job() {
        // A shell that ignores SIGINT and SIGTERM, with a background child that does too.
        let argv: Vec<String> = ["sh", "-c", "trap '' INT TERM; sleep 30 & sleep 30 & wait"]
            .map(String::from)
            .to_vec();
        let mut j = Job::spawn_with(&argv, &SpawnOpts::default()).unwrap();
        std::thread::sleep(Duration::from_millis(200));
        let pgid = j.pid();
        assert!(live_members(pgid, &[]).len() >= 3);
        let (exit, last) = j.stop_tree(&[], Duration::from_millis(300)).unwrap();
        assert_eq!(last, Some(libc::SIGKILL));
        assert_eq!(exit, JobExit::Signal(libc::SIGKILL));
        assert!(live_members(pgid, &[]).is_empty());
    }

    fn watched(script: &str) -> Job {
        let argv: Vec<String> = ["sh", "-c", script].map(String::from).to_vec();
        let opts = SpawnOpts {
            die_with_parent: true,
            capture: true,
            ..Default::default()
        };
        Job::spawn_with(&argv, &opts).unwrap()
    }

    #[test]
    fn the_watchdog_ends_the_whole_tree_when_gpufeed_goes() {
        // A background child that ignores SIGTERM and one that left the process group.
        let mut j = watched("trap '' TERM; sleep 30 & setsid sleep 31 & sleep 32; wait");
        std::thread::sleep(Duration::from_millis(300));
        let pgid = j.pid();
        assert_ne!(j.job_pid(), j.pid());
        let outside: Vec<u32> = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.starts_with("sleep\u{0}31"))
            })
            .collect();
        assert!(live_members(pgid, &[]).len() >= 3);
        assert_eq!(outside.len(), 1, "the setsid child");
        // What gpufeed's death does to the pipe.
        let t = Instant::now();
        drop(j.watched.take());
        while !(live_members(pgid, &outside).is_empty()) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(
            live_members(pgid, &outside).is_empty(),
            "left after {:?}",
            t.elapsed()
        );
        eprintln!("tree ended {:?} after the pipe closed", t.elapsed());
    }

    /// Live processes whose command line starts with `sleep\0{secs}`.
    fn sleeping(secs: &str) -> Vec<u32> {
        let want = format!("sleep\u{0}{secs}\u{0}");
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .filter(|&p| stat_fields(p).is_some_and(|(st, _, _)| st != 'Z' && st != 'X'))
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| c.starts_with(&want))
            })
            .collect()
    }

    #[test]
    fn a_double_forked_daemon_ends_with_its_job() {
        // Normal end: the subshell forks a `setsid` daemon and exits, the job exits 3 after.
        let mut j = watched("( setsid sleep 41.5 & ); sleep 0.3; exit 3");
        assert_eq!(j.wait().unwrap(), JobExit::Code(3));
        assert!(sleeping("41.5").is_empty(), "the daemon outlived its job");
        // Stopped while running: the daemon ignores SIGTERM and left the group.
        let mut j = watched("( setsid sh -c \"trap '' TERM; sleep 42.5\" & ); sleep 30");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(sleeping("42.5").len(), 1);
        let (_, last) = j.stop_tree(&[], Duration::from_millis(300)).unwrap();
        assert!(last.is_some());
        assert!(sleeping("42.5").is_empty(), "the daemon outlived stop_tree");
    }

    #[test]
    fn descendants_follow_parents_not_groups() {
        let mut j = watched("( setsid sleep 43.5 & ); sleep 30");
        std::thread::sleep(Duration::from_millis(300));
        let d = descendants(j.pid());
        assert!(d.contains(&j.job_pid()));
        let daemon = sleeping("43.5");
        assert_eq!(daemon.len(), 1);
        assert!(d.contains(&daemon[0]), "{d:?} lacks {daemon:?}");
        assert!(!live_members(j.pid(), &[]).contains(&daemon[0]));
        j.stop_tree(&[], Duration::from_millis(300)).unwrap();
        assert!(descendants(j.pid()).is_empty());
    }

    #[test]
    fn the_watchdog_passes_the_exit_status_and_the_output_through() {
        let mut j = watched("echo out; exit 7");
        let (out, _) = j.take_output();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out.unwrap(), &mut s).unwrap();
        assert_eq!(s, "out\n");
        assert_eq!(j.wait().unwrap(), JobExit::Code(7));
        let mut j = watched("kill -TERM $$");
        assert_eq!(j.wait().unwrap(), JobExit::Signal(libc::SIGTERM));
        let e = Job::spawn_with(
            &["no-such-program-gpufeed-xyz".to_string()],
            &SpawnOpts {
                die_with_parent: true,
                ..Default::default()
            },
        )
        .err()
        .unwrap();
        assert_eq!(e.exit().code(), 127);
        // stop_tree still reaches the job through the watchdog.
        let mut j = watched("trap '' INT; sleep 30 & wait");
        std::thread::sleep(Duration::from_millis(200));
        let (exit, last) = j.stop_tree(&[], Duration::from_millis(300)).unwrap();
        assert_eq!(last, Some(libc::SIGTERM));
        assert_eq!(exit, JobExit::Signal(libc::SIGTERM));
        assert!(live_members(j.pid(), &[]).is_empty());
    }

    #[test]
    fn spawn_with_sets_env_and_captures_output() {
        let argv: Vec<String> = ["sh", "-c", "echo $GPUFEED_T"].map(String::from).to_vec();
        let mut j = Job::spawn_with(
            &argv,
            &SpawnOpts {
                env: vec![("GPUFEED_T".into(), "hello".into())],
                capture: true,
                ..Default::default()
            },
        )
        .unwrap();
        let (out, _) = j.take_output();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut out.unwrap(), &mut s).unwrap();
        assert_eq!(s, "hello\n");
        assert_eq!(j.wait().unwrap(), JobExit::Code(0));
        // Nothing left of an ended job: no signal needed.
        let (exit, last) = j.stop_tree(&[], Duration::from_millis(300)).unwrap();
        assert_eq!((exit, last), (JobExit::Code(0), None));
    }

    #[test]
    fn exit_status_passes_through() {
        let mut j = Job::spawn_terminal(&["sh", "-c", "exit 7"], &[], false).unwrap();
        assert_eq!(j.wait().unwrap(), JobExit::Code(7));
        let mut j = Job::spawn_terminal(&["sh", "-c", "kill -TERM $$"], &[], false).unwrap();
        assert_eq!(j.wait().unwrap(), JobExit::Signal(libc::SIGTERM));
    }
}
