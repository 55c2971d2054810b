//! The watchdog of a job that must not outlive gpufeed (`sweep` and `batch-size` trials).
//!
//! `PR_SET_PDEATHSIG` reaches only the job's root process, and only when the spawning *thread*
//! ends: a SIGKILLed gpufeed left DataLoader workers and `sh -c 'sleep 40 & wait'` children
//! running. Instead, the child gpufeed forks becomes a small watchdog that
//!
//! 1. becomes a child subreaper (`PR_SET_CHILD_SUBREAPER`), so every process of the job's tree
//!    whose parent dies is re-parented to it rather than to init;
//! 2. forks the job (which goes on to `exec` the command) and reports its pid to gpufeed;
//! 3. holds the read end of a pipe whose only writer is gpufeed: when gpufeed dies, even by
//!    SIGKILL, the kernel closes the write end and `poll` wakes the watchdog;
//! 4. then sends SIGTERM to the job's process group and to each of its own children, waits up to
//!    [`GRACE_MS`] for them to go, and SIGKILLs what is left, child by child (descendants are
//!    re-parented to it as their parents die), until it has no child; finally it SIGKILLs the
//!    process group, itself included.
//!
//! While gpufeed lives, the watchdog ignores SIGINT/SIGTERM/SIGHUP/SIGQUIT (gpufeed signals the
//! job's process group, which includes it). When the job exits, the watchdog first ends what the
//! job left behind the same way (a daemon that forked, `setsid`ed and forked again is re-parented
//! to it, not to init) and then exits as the job did, so `Job::try_wait` and
//! `Job::stop_tree` see the job's own exit status and no process of the trial outlives it.
//!
//! Why not a cgroup v2: it needs a delegated, writable cgroup tree, which neither CI containers
//! nor most workstations give an unprivileged user (the development machine has a cgroup v1
//! hierarchy with v2 only at /sys/fs/cgroup/unified, not delegated). The watchdog works
//! everywhere, unprivileged; its cost is one process with gpufeed's memory shared copy-on-write.
//! Its limit: a process that both leaves the job's process group and double-forks *after* its
//! parent was killed can outlive it by at most one round (50 ms) before it is found.
//!
//! Everything here runs in a forked child of a multi-threaded process: only async-signal-safe
//! calls, no allocation, no lock.

use std::io;

/// How long the job's processes get between SIGTERM and SIGKILL once gpufeed is gone.
pub(crate) const GRACE_MS: i32 = 2000;

/// The raw ends of the two pipes, as seen in the forked child.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Fds {
    pub alive_r: libc::c_int,
    pub alive_w: libc::c_int,
    pub pid_r: libc::c_int,
    pub pid_w: libc::c_int,
}

const TERM_SIGNALS: [libc::c_int; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

/// Runs in the child between fork and exec. Returns `Ok` in the job (which then execs); never
/// returns in the watchdog.
///
/// # Safety
/// Call only from `CommandExt::pre_exec`.
pub(crate) unsafe fn fork_in_child(fds: Fds) -> io::Result<()> {
    libc::close(fds.alive_w);
    libc::close(fds.pid_r);
    // No termination signal may be lost or act between the fork and ignoring it.
    let mut set: libc::sigset_t = std::mem::zeroed();
    let mut old: libc::sigset_t = std::mem::zeroed();
    libc::sigemptyset(&mut set);
    for s in TERM_SIGNALS {
        libc::sigaddset(&mut set, s);
    }
    libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
    libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong);
    let job = libc::fork();
    if job < 0 {
        return Err(io::Error::last_os_error());
    }
    if job == 0 {
        // The job: as it would be without the watchdog.
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 0 as libc::c_ulong);
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        libc::close(fds.alive_r);
        libc::close(fds.pid_w);
        return Ok(());
    }
    // The watchdog.
    let pid = (job as u32).to_ne_bytes();
    libc::write(fds.pid_w, pid.as_ptr().cast(), pid.len());
    for s in TERM_SIGNALS {
        libc::signal(s, libc::SIG_IGN);
    }
    libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
    // Keep nothing of gpufeed open but the pipe: not its recording, its sockets, nor the
    // write ends of the job's output pipes (whose readers wait for EOF).
    close_all_but(fds.alive_r);
    watch(fds.alive_r, job)
}

/// Closes every descriptor except `keep`.
unsafe fn close_all_but(keep: libc::c_int) {
    let max = libc::c_uint::MAX;
    let k = keep as libc::c_uint;
    let ok = (k == 0 || libc::syscall(libc::SYS_close_range, 0 as libc::c_uint, k - 1, 0) == 0)
        && libc::syscall(libc::SYS_close_range, k + 1, max, 0) == 0;
    if !ok {
        // Kernels before 5.9: close one by one.
        for fd in 0..4096 {
            if fd != keep {
                libc::close(fd);
            }
        }
    }
}

/// Waits for the job to exit (then exits likewise) or for gpufeed to die (then ends the tree).
unsafe fn watch(alive_r: libc::c_int, job: libc::pid_t) -> ! {
    loop {
        if let Some(st) = reap(job) {
            // The job is done; whatever it left behind (a double-forked daemon re-parented
            // here, a background child in the group) ends with it.
            end_descendants();
            exit_like(st);
        }
        let mut p = libc::pollfd {
            fd: alive_r,
            events: libc::POLLIN,
            revents: 0,
        };
        let n = libc::poll(&mut p, 1, 50);
        if n > 0 && p.revents != 0 {
            // EOF (or an error) on the pipe: gpufeed is gone, nobody will stop the job.
            end_tree();
        }
    }
}

/// Reaps every child that has exited; returns the job's wait status when it was among them.
unsafe fn reap(job: libc::pid_t) -> Option<libc::c_int> {
    let mut got = None;
    loop {
        let mut st: libc::c_int = 0;
        let p = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if p <= 0 {
            return got;
        }
        if p == job {
            got = Some(st);
        }
    }
}

/// Exits with the job's status: its code, or death by its signal.
unsafe fn exit_like(st: libc::c_int) -> ! {
    if libc::WIFSIGNALED(st) {
        let sig = libc::WTERMSIG(st);
        // No core file of the watchdog for a job that dumped core.
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &zero);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig);
    }
    libc::_exit(libc::WEXITSTATUS(st))
}

/// Sends `sig` to each of the watchdog's children; returns how many there were.
unsafe fn signal_children(sig: libc::c_int) -> usize {
    let fd = libc::open(
        c"/proc/thread-self/children".as_ptr(),
        libc::O_RDONLY | libc::O_CLOEXEC,
    );
    if fd < 0 {
        return 0;
    }
    let mut buf = [0u8; 8192];
    let mut n_children = 0;
    let mut cur: libc::pid_t = 0;
    let mut in_num = false;
    loop {
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        if n <= 0 {
            break;
        }
        for &b in &buf[..n as usize] {
            if b.is_ascii_digit() {
                cur = cur
                    .saturating_mul(10)
                    .saturating_add((b - b'0') as libc::pid_t);
                in_num = true;
            } else if in_num {
                libc::kill(cur, sig);
                n_children += 1;
                cur = 0;
                in_num = false;
            }
        }
    }
    if in_num {
        libc::kill(cur, sig);
        n_children += 1;
    }
    libc::close(fd);
    n_children
}

/// True while the watchdog has a child (running or not yet reaped).
unsafe fn has_children() -> bool {
    let mut st: libc::c_int = 0;
    loop {
        let p = libc::waitpid(-1, &mut st, libc::WNOHANG);
        if p == 0 {
            return true;
        }
        if p < 0 {
            return false; // ECHILD
        }
    }
}

unsafe fn sleep_ms(ms: i32) {
    libc::poll(std::ptr::null_mut(), 0, ms);
}

/// Ends every process of the job's tree but the watchdog: SIGTERM to the job's process group and
/// to each child, up to [`GRACE_MS`] for them to go, then SIGKILL child by child (a killed
/// parent's children become the watchdog's) until it has none.
unsafe fn end_descendants() {
    let pgid = libc::getpgrp();
    if !has_children() {
        // No child, no descendant: the watchdog is the subreaper of the whole tree.
        return;
    }
    libc::kill(-pgid, libc::SIGTERM);
    signal_children(libc::SIGTERM);
    let mut waited = 0;
    while waited < GRACE_MS && has_children() {
        sleep_ms(50);
        waited += 50;
        // Orphans re-parented meanwhile get their SIGTERM too.
        signal_children(libc::SIGTERM);
    }
    for _ in 0..200 {
        if !has_children() {
            break;
        }
        signal_children(libc::SIGKILL);
        sleep_ms(10);
    }
}

/// Ends every process of the job's tree, then the watchdog itself.
unsafe fn end_tree() -> ! {
    end_descendants();
    // The group last: it includes the watchdog.
    libc::kill(-libc::getpgrp(), libc::SIGKILL);
    libc::_exit(1)
}
