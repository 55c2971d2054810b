use std::collections::HashMap;
#[cfg(all(target_os = "linux", feature = "unwind"))]
use std::collections::HashSet;
#[cfg(all(target_os = "linux", feature = "unwind"))]
use std::iter::FromIterator;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Error, Result};
use remoteprocess::{Pid, Process, ProcessMemory, Tid};

use crate::config::{Config, LockingStrategy};
#[cfg(feature = "unwind")]
use crate::native_stack_trace::NativeStack;
use crate::python_bindings::{
    v2_7_15, v3_10_0, v3_11_0, v3_12_0, v3_13_0, v3_14_0, v3_15_0, v3_3_7, v3_5_5, v3_6_6, v3_7_0,
    v3_8_0, v3_9_5,
};
use crate::python_data_access::format_variable;
use crate::python_interpreters::{InterpreterState, ThreadState};
use crate::python_process_info::{get_python_version, PythonProcessInfo, PythonProcessLayout};
use crate::python_threading::thread_name_lookup;
use crate::stack_trace::{
    get_gil_threadid, get_stack_trace_cached, threads_head_and_gil_holder, FrameCache,
    FrameCacheStats, StackTrace,
};
use crate::version::Version;

/// Lets you retrieve stack traces of a running python program
pub struct PythonSpy {
    pub pid: Pid,
    pub process: Process,
    pub version: Version,
    pub addresses: PythonProcessLayout,
    pub config: Config,
    #[cfg(feature = "unwind")]
    pub native: Option<NativeStack>,
    pub short_filenames: HashMap<String, Option<String>>,
    pub python_thread_ids: HashMap<u64, Tid>,
    pub python_thread_names: HashMap<u64, Option<String>>,
    thread_name_lookup_time: Instant,
    #[cfg(target_os = "linux")]
    pub dockerized: bool,
    /// gpufeed patch (PATCHES.md): what was read from code objects, when `config.frame_cache`.
    frame_cache: Option<FrameCache>,
    /// gpufeed patch (PATCHES.md): the Python threads, from the last full scan of the
    /// process's threads (empty: scan them all next sample), with their stat files kept open.
    python_threads: Vec<ThreadStat>,
    /// gpufeed patch 9 (PATCHES.md): the OS ids of the threads not to read in this call of
    /// [`PythonSpy::get_stack_traces_skipping`], and those it passed over.
    skip: Vec<u64>,
    skipped: Vec<u64>,
    chain: Vec<usize>,
    /// gpufeed patch 11: the OS ids of `chain`'s thread states (0: unknown), and the ids
    /// passed over this sample that are known Python threads.
    chain_tids: Vec<u64>,
    plan: Vec<u64>,
    /// gpufeed patch 10: whether the threads' run state is read from `wchan`.
    wchan: Wchan,
}

/// gpufeed patch (PATCHES.md): a Python thread's `/proc/PID/task/TID/stat`, opened once and
/// read again from offset 0 on every sample (procfs makes each read from offset 0 afresh), so
/// a sample costs one `pread` per thread instead of open, read and close. The open file stays
/// bound to that very thread: once it has exited the read fails, even if its id is reused.
struct ThreadStat {
    tid: Tid,
    #[cfg(target_os = "linux")]
    file: Option<std::fs::File>,
    /// gpufeed patch 10: `/proc/PID/task/TID/wchan`, kept open likewise.
    #[cfg(target_os = "linux")]
    wchan: Option<std::fs::File>,
}

/// gpufeed patch 10 (PATCHES.md): whether a thread's run state may be read from its `wchan`
/// file (`0` while it is running or runnable, else the kernel function it sleeps in), which
/// the kernel makes 2-3 times faster than `stat`. Trusted once a sleeping thread (S or D in
/// `stat`) showed a function name there; never, once sleeping threads showed `0` three times
/// (no kernel symbols, or no access: the kernel then writes `0` for every thread; once could be
/// a thread woken between the two reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wchan {
    /// Not decided; how many sleeping threads showed `0` so far.
    Unknown(u8),
    Trusted,
    Refused,
}

impl ThreadStat {
    fn new(tid: Tid) -> ThreadStat {
        ThreadStat {
            tid,
            #[cfg(target_os = "linux")]
            file: None,
            #[cfg(target_os = "linux")]
            wchan: None,
        }
    }

    /// Whether the thread is running (state R); `None` when it cannot be read (gone).
    #[cfg(target_os = "linux")]
    fn active(&mut self, pid: Pid, wchan: &mut Wchan) -> Option<bool> {
        use std::os::unix::fs::FileExt;
        if *wchan == Wchan::Trusted {
            if self.wchan.is_none() {
                self.wchan =
                    std::fs::File::open(format!("/proc/{}/task/{}/wchan", pid, self.tid)).ok();
            }
            let mut buf = [0u8; 128];
            match self.wchan.as_ref()?.read_at(&mut buf, 0) {
                Ok(n) if n > 0 => return Some(&buf[..n] == b"0"),
                _ => {
                    self.wchan = None;
                    return None;
                }
            }
        }
        if self.file.is_none() {
            self.file = std::fs::File::open(format!("/proc/{}/task/{}/stat", pid, self.tid)).ok();
        }
        let mut buf = [0u8; 512];
        let read = self.file.as_ref()?.read_at(&mut buf, 0);
        match read.ok().and_then(|n| stat_state(&buf[..n])) {
            Some(state) => {
                if let (Wchan::Unknown(zeros), b'S' | b'D') = (*wchan, state) {
                    // A sleeping thread: does its wchan name where it sleeps?
                    let mut w = [0u8; 128];
                    let name = std::fs::File::open(format!(
                        "/proc/{}/task/{}/wchan",
                        pid, self.tid
                    ))
                    .and_then(|f| f.read_at(&mut w, 0))
                    .map(|n| &w[..n]);
                    match name {
                        Ok(b"0") if zeros >= 2 => *wchan = Wchan::Refused,
                        Ok(b"0") => *wchan = Wchan::Unknown(zeros + 1),
                        Ok(n) if !n.is_empty() => *wchan = Wchan::Trusted,
                        _ => {}
                    }
                }
                Some(state == b'R')
            }
            None => {
                self.file = None;
                None
            }
        }
    }

    #[cfg(not(target_os = "linux"))]
    fn active(&mut self, _pid: Pid, _wchan: &mut Wchan) -> Option<bool> {
        remoteprocess::Thread::new(self.tid)
            .and_then(|t| t.active())
            .ok()
    }
}

/// The state letter of a `/proc/PID/stat` line: the field after the command name, which is in
/// parentheses and may itself hold `)` (so the last one ends it).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn stat_state(stat: &[u8]) -> Option<u8> {
    let close = stat.iter().rposition(|&b| b == b')')?;
    match stat.get(close + 1..close + 3)? {
        [b' ', state] if state.is_ascii_alphabetic() => Some(*state),
        _ => None,
    }
}

impl PythonSpy {
    /// Constructs a new PythonSpy object.
    pub fn new(pid: Pid, config: &Config) -> Result<PythonSpy, Error> {
        let process = remoteprocess::Process::new(pid)
            .context("Failed to open process - check if it is running.")?;

        // get basic process information (memory maps/symbols etc)
        let python_info = PythonProcessInfo::new(&process)?;

        // lock the process when loading up on freebsd (rather than locking
        // on every memory read). Needs done after getting python process info
        // because procmaps also tries to attach w/ ptrace on freebsd
        #[cfg(target_os = "freebsd")]
        let _lock = process.lock();

        let version = get_python_version(&python_info, &process)?;
        info!("python version {} detected", version);

        let addresses = PythonProcessLayout::new(&python_info, &process, &version, config)?;
        info!(
            "Found interpreter at 0x{:016x}",
            addresses.interpreter_address
        );

        #[cfg(feature = "unwind")]
        let native = if config.native {
            Some(NativeStack::new(
                pid,
                python_info.python_binary,
                python_info.libpython_binary,
            )?)
        } else {
            None
        };

        Ok(PythonSpy {
            pid,
            process,
            version,
            addresses,
            #[cfg(feature = "unwind")]
            native,
            #[cfg(target_os = "linux")]
            dockerized: python_info.dockerized,
            config: config.clone(),
            short_filenames: HashMap::new(),
            python_thread_ids: HashMap::new(),
            python_thread_names: HashMap::new(),
            thread_name_lookup_time: Instant::now(),
            frame_cache: config.frame_cache.then(|| {
                let mut c = FrameCache::default();
                c.frame_names = config.frame_names;
                c
            }),
            python_threads: Vec::new(),
            skip: Vec::new(),
            skipped: Vec::new(),
            chain: Vec::new(),
            chain_tids: Vec::new(),
            plan: Vec::new(),
            wchan: Wchan::Unknown(0),
        })
    }

    /// Creates a PythonSpy object, retrying up to max_retries times.
    /// Mainly useful for the case where the process is just started and
    /// symbols or the python interpreter might not be loaded yet.
    pub fn retry_new(pid: Pid, config: &Config, max_retries: u64) -> Result<PythonSpy, Error> {
        let mut retries = 0;
        loop {
            let err = match PythonSpy::new(pid, config) {
                Ok(mut process) => {
                    // verify that we can load a stack trace before returning success
                    match process.get_stack_traces() {
                        Ok(_) => return Ok(process),
                        Err(err) => err,
                    }
                }
                Err(err) => err,
            };

            // If we failed, retry a couple times before returning the last error
            retries += 1;
            if retries >= max_retries {
                return Err(err);
            }
            info!("Failed to connect to process, retrying. Error: {}", err);
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Gets a StackTrace for each thread in the current process
    pub fn get_stack_traces(&mut self) -> Result<Vec<StackTrace>, Error> {
        match self.version {
            // ABI for 2.3/2.4/2.5/2.6/2.7 is compatible for our purpose
            Version {
                major: 2,
                minor: 3..=7,
                ..
            } => self._get_stack_traces::<v2_7_15::_is>(),
            Version {
                major: 3, minor: 3, ..
            } => self._get_stack_traces::<v3_3_7::_is>(),
            // ABI for 3.4 and 3.5 is the same for our purposes
            Version {
                major: 3, minor: 4, ..
            } => self._get_stack_traces::<v3_5_5::_is>(),
            Version {
                major: 3, minor: 5, ..
            } => self._get_stack_traces::<v3_5_5::_is>(),
            Version {
                major: 3, minor: 6, ..
            } => self._get_stack_traces::<v3_6_6::_is>(),
            Version {
                major: 3, minor: 7, ..
            } => self._get_stack_traces::<v3_7_0::_is>(),
            Version {
                major: 3, minor: 8, ..
            } => self._get_stack_traces::<v3_8_0::_is>(),
            Version {
                major: 3, minor: 9, ..
            } => self._get_stack_traces::<v3_9_5::_is>(),
            Version {
                major: 3,
                minor: 10,
                ..
            } => self._get_stack_traces::<v3_10_0::_is>(),
            Version {
                major: 3,
                minor: 11,
                ..
            } => self._get_stack_traces::<v3_11_0::_is>(),
            Version {
                major: 3,
                minor: 12,
                ..
            } => self._get_stack_traces::<v3_12_0::_is>(),
            Version {
                major: 3,
                minor: 13,
                ..
            } => self._get_stack_traces::<v3_13_0::_is>(),
            Version {
                major: 3,
                minor: 14,
                ..
            } => self._get_stack_traces::<v3_14_0::_is>(),
            Version {
                major: 3,
                minor: 15,
                ..
            } => self._get_stack_traces::<v3_15_0::_is>(),
            _ => Err(format_err!(
                "Unsupported version of Python: {}",
                self.version
            )),
        }
    }

    /// gpufeed patch 9 (PATCHES.md): as [`PythonSpy::get_stack_traces`], but the Python threads
    /// whose OS id is in `skip` (the caller knows they did not run since it last read them, so
    /// their stacks cannot have moved) are not read: neither their run state nor their frames.
    /// They are left out of the result and listed by [`PythonSpy::skipped`]. Only threads whose
    /// OS id is in their thread state (CPython 3.11+) and that are known Python threads can be
    /// passed over; any other thread is read as usual.
    pub fn get_stack_traces_skipping(&mut self, skip: &[u64]) -> Result<Vec<StackTrace>, Error> {
        self.skip.clear();
        self.skip.extend_from_slice(skip);
        let traces = self.get_stack_traces();
        self.skip.clear();
        traces
    }

    /// gpufeed patch 9: the OS ids of the threads the last call passed over (see
    /// [`PythonSpy::get_stack_traces_skipping`]).
    pub fn skipped(&self) -> &[u64] {
        &self.skipped
    }

    /// gpufeed patch 12: gives back a stack's frame vector once its frames were taken; the
    /// next stacks are read into it (without the frame cache it is dropped).
    pub fn recycle_frames(&mut self, frames: Vec<crate::stack_trace::Frame>) {
        if let Some(c) = self.frame_cache.as_mut() {
            c.recycle_frames(frames);
        }
    }

    /// gpufeed patch 13: with `config.frame_names` off, moves the code objects read since the
    /// last call to `out` as (serial, function name, file name): the names of the frames that
    /// carry that serial ([`crate::stack_trace::Frame::code`]). Each is given once.
    pub fn take_new_codes(&mut self, out: &mut Vec<(u64, String, String)>) {
        if let Some(c) = self.frame_cache.as_mut() {
            c.take_new_codes(out);
        }
    }

    /// Counters of the frame cache (gpufeed patch), `None` when `config.frame_cache` is off.
    pub fn frame_cache_stats(&self) -> Option<FrameCacheStats> {
        self.frame_cache.as_ref().map(|c| c.stats())
    }

    // implementation of get_stack_traces, where we have a type for the InterpreterState
    fn _get_stack_traces<I: InterpreterState>(&mut self) -> Result<Vec<StackTrace>, Error> {
        // Query the OS to get if each thread in the process is running or not
        let mut thread_activity = HashMap::new();
        self.skipped.clear();
        // gpufeed patch: only the known Python threads' run state is read, unless a full scan
        // is due (see `scan_python_threads_only`).
        let mut full_scan = false;
        if self.config.gil_only {
            // Don't need to collect thread activity if we're only getting the
            // GIL thread: If we're holding the GIL we're by definition active.
        } else if self.config.scan_python_threads_only && !self.python_threads.is_empty() {
            for thread in &mut self.python_threads {
                // gpufeed patch 9: a thread to pass over did not run: not running now.
                if self.skip.contains(&(thread.tid as u64)) {
                    thread_activity.insert(thread.tid, false);
                    continue;
                }
                // A thread that is gone is missed below and makes the next sample scan all.
                if let Some(active) = thread.active(self.pid, &mut self.wchan) {
                    thread_activity.insert(thread.tid, active);
                }
            }
        } else {
            full_scan = true;
            for thread in self.process.threads()?.iter() {
                let threadid: Tid = thread.id()?;
                let Ok(active) = thread.active() else {
                    // Do not fail all sampling if a single thread died between entering the loop
                    // and reading its status.
                    continue;
                };
                thread_activity.insert(threadid, active);
            }
        }

        // Lock the process if appropriate. Note we have to lock AFTER getting the thread
        // activity status from the OS (otherwise each thread would report being inactive always).
        // This has the potential for race conditions (in that the thread activity could change
        // between getting the status and locking the thread, but seems unavoidable right now
        let _lock = if self.config.blocking == LockingStrategy::Lock {
            Some(self.process.lock().context("Failed to suspend process")?)
        } else {
            None
        };

        // Find PyThreadState, and loop over all the python threads
        if let Some(cache) = self.frame_cache.as_mut() {
            cache.expire(Instant::now());
            cache.forget_read_ahead();
            // gpufeed patch 11: the known Python threads passed over are left out of the
            // head's read.
            if !self.config.gil_only {
                self.plan.clear();
                self.plan.extend(
                    self.skip
                        .iter()
                        .filter(|&&t| thread_activity.contains_key(&(t as Tid))),
                );
                cache.plan_skip(&self.plan);
            }
            cache.begin_walk();
        }
        // gpufeed patch (PATCHES.md): with the frame cache on, the head, the GIL holder's
        // address and the first thread state (at the head's last address) come in one read,
        // and a thread owns the GIL when it is at the holder's address.
        let (threads_head, gil_holder, gil_thread_id) = if self.config.frame_cache {
            let (head, holder) = threads_head_and_gil_holder::<I, Process>(
                self.addresses.interpreter_address,
                self.addresses.threadstate_address,
                &self.process,
                self.frame_cache.as_mut(),
            )?;
            (head, Some(holder), 0)
        } else {
            let threadstate_ptr_ptr = I::threadstate_ptr_ptr(self.addresses.interpreter_address);
            let threads_head = self
                .process
                .copy_pointer(threadstate_ptr_ptr)
                .context("Failed to copy PyThreadState head pointer")?;

            // get the threadid of the gil if appropriate
            let gil_thread_id =
                get_gil_threadid::<I, Process>(self.addresses.threadstate_address, &self.process)
                    .context("failed to get gil_thread_id")?;
            (threads_head, None, gil_thread_id)
        };

        let mut did_thread_name_lookup = false;


        // The OS ids of the Python threads seen in this sample, if all are known from their
        // thread states and appeared in the thread scan.
        let mut seen_tids: Option<Vec<Tid>> = Some(Vec::new());

        let mut traces = Vec::new();
        let mut threads = threads_head;
        let mut visited = 0;
        // gpufeed patch 9: the thread states' addresses, read with the head next time.
        let mut chain = std::mem::take(&mut self.chain);
        chain.clear();
        let mut chain_tids = std::mem::take(&mut self.chain_tids);
        chain_tids.clear();
        while !threads.is_null() {
            visited += 1;
            // This seems to happen occasionally when scanning BSS addresses for valid interpreters
            if visited > 4096 {
                return Err(format_err!("Max thread recursion depth reached"));
            }

            // Get the stack trace of the python thread
            let thread_addr = threads as usize;
            chain.push(thread_addr);
            // gpufeed patch 11: a thread state the head's read left out (a thread passed over,
            // the list as it was): stepped over by the last walk's next address.
            if let Some((tid, next)) = self
                .frame_cache
                .as_ref()
                .and_then(|c| c.left_out(thread_addr))
            {
                if let Some(seen) = seen_tids.as_mut() {
                    seen.push(tid as Tid);
                }
                chain_tids.push(tid);
                self.skipped.push(tid);
                if let Some(c) = self.frame_cache.as_mut() {
                    c.keep_window(thread_addr);
                }
                threads = next as *const I::ThreadState;
                continue;
            }
            // gpufeed patch (PATCHES.md): read ahead with the previous thread's frames.
            let ahead = self
                .frame_cache
                .as_mut()
                .and_then(|c| c.take_read_ahead::<I::ThreadState>(thread_addr));
            let thread = match ahead {
                Some(thread) => thread,
                None => self
                    .process
                    .copy_pointer(threads)
                    .context("Failed to copy PyThreadState")?,
            };
            threads = thread.next();
            chain_tids.push(thread.native_thread_id().unwrap_or(0));

            let python_thread_id = thread.thread_id();
            let owns_gil = match gil_holder {
                Some(holder) => holder != 0 && holder == thread_addr,
                None => python_thread_id == gil_thread_id,
            };

            if self.config.gil_only && !owns_gil {
                continue;
            }

            // gpufeed patch 9: a known Python thread the caller says did not run is passed
            // over (its frames are where they were); it still counts as seen.
            if !self.skip.is_empty() && !self.config.gil_only {
                if let Some(id) = thread.native_thread_id() {
                    if self.skip.contains(&id) && thread_activity.contains_key(&(id as Tid)) {
                        if let Some(seen) = seen_tids.as_mut() {
                            seen.push(id as Tid);
                        }
                        self.skipped.push(id);
                        if let Some(c) = self.frame_cache.as_mut() {
                            c.keep_window(thread_addr);
                        }
                        continue;
                    }
                }
            }

            let mut trace = get_stack_trace_cached(
                &thread,
                &self.process,
                self.config.dump_locals > 0,
                self.config.lineno,
                self.frame_cache.as_mut(),
                thread_addr,
            )
            .with_context(|| {
                format!(
                    "Failed to call get_stack_trace for thread {}",
                    python_thread_id
                )
            })?;

            // gpufeed patch: remember the Python threads' OS ids (3.11+ has them in the
            // thread state) to read only their run state next time.
            match (seen_tids.as_mut(), trace.os_thread_id) {
                (Some(seen), Some(id)) if thread_activity.contains_key(&(id as Tid)) => {
                    seen.push(id as Tid)
                }
                _ => seen_tids = None,
            }

            // Try getting the native thread id

            // python 3.11+ has the native thread id directly on the PyThreadState object,
            // for older versions of python, try using OS specific code to get the native
            // thread id (doesn't work on freebsd, or on arm/i686 processors on linux)
            if trace.os_thread_id.is_none() {
                let mut os_thread_id =
                    self._get_os_thread_id::<I>(python_thread_id, threads_head)?;

                // linux can see issues where pthread_ids get recycled for new OS threads,
                // which totally breaks the caching we were doing here. Detect this and retry
                if let Some(tid) = os_thread_id {
                    if !thread_activity.is_empty() && !thread_activity.contains_key(&tid) {
                        info!("clearing away thread id caches, thread {} has exited", tid);
                        self.python_thread_ids.clear();
                        self.python_thread_names.clear();
                        os_thread_id =
                            self._get_os_thread_id::<I>(python_thread_id, threads_head)?;
                    }
                }

                trace.os_thread_id = os_thread_id.map(|id| id as u64);
            }

            trace.thread_name = if self.config.collect_thread_names {
                self._get_python_thread_name(&mut did_thread_name_lookup, python_thread_id)
            } else {
                None
            };
            trace.owns_gil = owns_gil;
            trace.pid = self.process.pid;

            // Figure out if the thread is sleeping from the OS if possible
            trace.active = true;
            if let Some(id) = trace.os_thread_id {
                let id = id as Tid;
                if let Some(active) = thread_activity.get(&id as _) {
                    trace.active = *active;
                }
            }

            // fallback to using a heuristic if we think the thread is still active
            // Note that on linux the OS thread activity can only be gotten on x86_64
            // processors and even then seems to be wrong occasionally in thinking 'select'
            // calls are active (which seems related to the thread locking code,
            // this problem doesn't seem to happen with the --nonblocking option)
            // Note: this should be done before the native merging for correct results
            if trace.active {
                trace.active = !self._heuristic_is_thread_idle(&trace);
            }

            // Merge in the native stack frames if necessary
            #[cfg(feature = "unwind")]
            {
                if self.config.native {
                    if let Some(native) = self.native.as_mut() {
                        let thread_id = trace
                            .os_thread_id
                            .ok_or_else(|| format_err!("failed to get os threadid"))?;
                        let os_thread = remoteprocess::Thread::new(thread_id as Tid)?;
                        trace.frames = native.merge_native_thread(&trace.frames, &os_thread)?
                    }
                }
            }

            for frame in &mut trace.frames {
                // gpufeed patch (PATCHES.md): a caller that never shows short names skips them.
                if self.config.short_filenames {
                    frame.short_filename = self.shorten_filename(&frame.filename);
                }
                if let Some(locals) = frame.locals.as_mut() {
                    let max_length = (128 * self.config.dump_locals) as isize;
                    for local in locals {
                        let repr = format_variable::<I, Process>(
                            &self.process,
                            &self.version,
                            local.addr,
                            max_length,
                        );
                        local.repr = Some(repr.unwrap_or_else(|_| "?".to_owned()));
                    }
                }
            }

            traces.push(trace);

            if self.config.gil_only {
                // There's only one GIL thread and we've captured it, so we can
                // stop now
                break;
            }
        }
        if let Some(cache) = self.frame_cache.as_mut() {
            if !self.config.gil_only {
                cache.note_chain(chain.get(1..).unwrap_or_default());
                cache.note_tids(
                    chain_tids.first().copied().unwrap_or(0),
                    chain_tids.get(1..).unwrap_or_default(),
                );
            }
            cache.end_walk();
        }
        self.chain = chain;
        self.chain_tids = chain_tids;
        // gpufeed patch: a full scan learns the Python threads; a thread that was not among
        // them (a new one), or one that is gone, makes the next sample scan them all.
        if self.config.scan_python_threads_only && !self.config.gil_only {
            match seen_tids {
                Some(seen) if full_scan => {
                    self.python_threads = seen.into_iter().map(ThreadStat::new).collect()
                }
                Some(seen) if seen.len() == self.python_threads.len() => {}
                _ => self.python_threads.clear(),
            }
        }
        Ok(traces)
    }

    // heuristic fallback for determining if a thread is active, used
    // when we don't have the ability to get the thread information from the OS
    fn _heuristic_is_thread_idle(&self, trace: &StackTrace) -> bool {
        let frames = &trace.frames;
        if frames.is_empty() {
            // we could have 0 python frames, but still be active running native
            // code.
            false
        } else {
            let frame = &frames[0];
            // gpufeed patch 13: a frame that carries only its code's serial is looked up.
            if frame.code != 0 && frame.filename.is_empty() {
                return self
                    .frame_cache
                    .as_ref()
                    .is_some_and(|c| c.idle_code(frame.code));
            }
            crate::stack_trace::idle_function(&frame.name, &frame.filename)
        }
    }

    #[cfg(windows)]
    fn _get_os_thread_id<I: InterpreterState>(
        &mut self,
        python_thread_id: u64,
        _interp_head: *const I::ThreadState,
    ) -> Result<Option<Tid>, Error> {
        Ok(Some(python_thread_id as Tid))
    }

    #[cfg(target_os = "macos")]
    fn _get_os_thread_id<I: InterpreterState>(
        &mut self,
        python_thread_id: u64,
        _interp_head: *const I::ThreadState,
    ) -> Result<Option<Tid>, Error> {
        // If we've already know this threadid, we're good
        if let Some(thread_id) = self.python_thread_ids.get(&python_thread_id) {
            return Ok(Some(*thread_id));
        }

        for thread in self.process.threads()?.iter() {
            // ok, this is crazy pants. is this 224 constant right?  Is this right for all versions of OSX? how is this determined?
            // is this correct for all versions of python? Why does this even work?
            let current_handle = thread.thread_handle()? - 224;
            self.python_thread_ids.insert(current_handle, thread.id()?);
        }

        if let Some(thread_id) = self.python_thread_ids.get(&python_thread_id) {
            return Ok(Some(*thread_id));
        }
        Ok(None)
    }

    #[cfg(all(target_os = "linux", not(feature = "unwind")))]
    fn _get_os_thread_id<I: InterpreterState>(
        &mut self,
        _python_thread_id: u64,
        _interp_head: *const I::ThreadState,
    ) -> Result<Option<Tid>, Error> {
        Ok(None)
    }

    #[cfg(all(target_os = "linux", feature = "unwind"))]
    fn _get_os_thread_id<I: InterpreterState>(
        &mut self,
        python_thread_id: u64,
        interp_head: *const I::ThreadState,
    ) -> Result<Option<Tid>, Error> {
        // in nonblocking mode, we can't get the threadid reliably (method here requires reading the RBX
        // register which requires a ptrace attach). fallback to heuristic thread activity here
        if self.config.blocking == LockingStrategy::NonBlocking {
            return Ok(None);
        }

        // likewise this doesn't yet work for profiling processes running inside docker containers from the host os
        if self.dockerized {
            return Ok(None);
        }

        // If we've already know this threadid, we're good
        if let Some(thread_id) = self.python_thread_ids.get(&python_thread_id) {
            return Ok(Some(*thread_id));
        }

        // Get a list of all the python thread ids
        let mut all_python_threads = HashSet::new();
        let mut threads = interp_head;
        while !threads.is_null() {
            let thread = self
                .process
                .copy_pointer(threads)
                .context("Failed to copy PyThreadState")?;
            let current = thread.thread_id();
            all_python_threads.insert(current);
            threads = thread.next();
        }

        let processed_os_threads: HashSet<Tid> =
            HashSet::from_iter(self.python_thread_ids.values().copied());

        let unwinder = self.process.unwinder()?;

        // Try getting the pthread_id from the native stack registers for threads we haven't looked up yet
        for thread in self.process.threads()?.iter() {
            let threadid = thread.id()?;
            if processed_os_threads.contains(&threadid) {
                continue;
            }

            match self._get_pthread_id(&unwinder, thread, &all_python_threads) {
                Ok(pthread_id) => {
                    if pthread_id != 0 {
                        self.python_thread_ids.insert(pthread_id, threadid);
                    }
                }
                Err(e) => {
                    warn!("Failed to get get_pthread_id for {}: {}", threadid, e);
                }
            };
        }

        // we can't get the python threadid for the main thread from registers,
        // so instead assign the main threadid (pid) to the missing python thread
        if !processed_os_threads.contains(&self.pid) {
            let mut unknown_python_threadids = HashSet::new();
            for python_thread_id in all_python_threads.iter() {
                if !self.python_thread_ids.contains_key(python_thread_id) {
                    unknown_python_threadids.insert(*python_thread_id);
                }
            }

            if unknown_python_threadids.len() == 1 {
                let python_thread_id = *unknown_python_threadids.iter().next().unwrap();
                self.python_thread_ids.insert(python_thread_id, self.pid);
            } else {
                warn!("failed to get python threadid for main thread!");
            }
        }

        if let Some(thread_id) = self.python_thread_ids.get(&python_thread_id) {
            return Ok(Some(*thread_id));
        }
        info!("failed looking up python threadid for {}. known python_thread_ids {:?}. all_python_threads {:?}",
            python_thread_id, self.python_thread_ids, all_python_threads);
        Ok(None)
    }

    #[cfg(all(target_os = "linux", feature = "unwind"))]
    pub fn _get_pthread_id(
        &self,
        unwinder: &remoteprocess::Unwinder,
        thread: &remoteprocess::Thread,
        threadids: &HashSet<u64>,
    ) -> Result<u64, Error> {
        let mut pthread_id = 0;

        let mut cursor = unwinder.cursor(thread)?;
        while let Some(_) = cursor.next() {
            // the pthread_id is usually a register (rbx on x86-64, r5 on ARM) in the top-level
            // frame of the thread, but on some configs can be 2nd level. Handle this by taking the
            // top-most value that is one of the pthread_ids we're looking for
            #[cfg(target_arch = "x86_64")]
            let possible_threadid = cursor.bx();
            #[cfg(target_arch = "arm")]
            let possible_threadid = cursor.r5();
            #[cfg(target_arch = "aarch64")]
            let possible_threadid = unsafe { cursor.register(19) };
            if let Ok(reg) = possible_threadid {
                if reg != 0 && threadids.contains(&reg) {
                    pthread_id = reg;
                }
            }
        }

        Ok(pthread_id)
    }

    #[cfg(target_os = "freebsd")]
    fn _get_os_thread_id<I: InterpreterState>(
        &mut self,
        _python_thread_id: u64,
        _interp_head: *const I::ThreadState,
    ) -> Result<Option<Tid>, Error> {
        Ok(None)
    }

    fn _get_python_thread_name(
        &mut self,
        did_thread_name_lookup: &mut bool,
        python_thread_id: u64,
    ) -> Option<String> {
        // a thread can get a name after the lookup, for instance when the threading module
        // is imported later, so look up threads without a name again once the lookup is this old
        const THREAD_NAME_RETRY_INTERVAL: Duration = Duration::from_secs(1);

        match self.python_thread_names.get(&python_thread_id) {
            Some(Some(thread_name)) => Some(thread_name.clone()),
            Some(None) if self.thread_name_lookup_time.elapsed() < THREAD_NAME_RETRY_INTERVAL => {
                None
            }
            _ => {
                // avoid triggering a lookup if we already did one during this sample
                if !*did_thread_name_lookup {
                    info!("looking up thread names");
                    self.python_thread_names = thread_name_lookup(self)
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, Some(v)))
                        .collect();
                    self.thread_name_lookup_time = Instant::now();
                    *did_thread_name_lookup = true;
                }
                // avoid triggering a lookup next time if the thread has no name
                self.python_thread_names
                    .entry(python_thread_id)
                    .or_insert(None)
                    .clone()
            }
        }
    }

    /// We want to display filenames without the boilerplate of the python installation
    /// directory etc. This function looks only includes paths inside a python
    /// package or subpackage, and not the path the package is installed at
    fn shorten_filename(&mut self, filename: &str) -> Option<String> {
        // if the user requested full filenames, skip shortening
        if self.config.full_filenames {
            return Some(filename.to_string());
        }

        // if we have figured out the short filename already, use it
        if let Some(short) = self.short_filenames.get(filename) {
            return short.clone();
        }

        // on linux the process could be running in docker, access the filename through procfs
        #[cfg(target_os = "linux")]
        let filename_storage;

        #[cfg(target_os = "linux")]
        let filename = if self.dockerized {
            filename_storage = format!("/proc/{}/root{}", self.pid, filename);
            if Path::new(&filename_storage).exists() {
                &filename_storage
            } else {
                filename
            }
        } else {
            filename
        };

        // only include paths that include an __init__.py
        let mut path = Path::new(filename);
        while let Some(parent) = path.parent() {
            path = parent;
            if !parent.join("__init__.py").exists() {
                break;
            }
        }

        // remove the parent prefix and convert to an optional string
        let shortened = Path::new(filename)
            .strip_prefix(path)
            .ok()
            .map(|p| p.to_string_lossy().to_string());

        self.short_filenames
            .insert(filename.to_owned(), shortened.clone());
        shortened
    }
}

// gpufeed patch (PATCHES.md): the run state from a stat file kept open.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_state_is_the_field_after_the_last_parenthesis() {
        assert_eq!(stat_state(b"1234 (bash) S 1233"), Some(b'S'));
        assert_eq!(stat_state(b"1234 (with space) R 1233"), Some(b'R'));
        assert_eq!(stat_state(b"83 (Thread.(<lambda>)) S 1 19"), Some(b'S'));
        assert_eq!(stat_state(b"83 (a) b) R 1 19"), Some(b'R'));
        assert_eq!(stat_state(b"1234"), None);
        assert_eq!(stat_state(b"1234 (bash)"), None);
        assert_eq!(stat_state(b"1234 (bash)S"), None);
        assert_eq!(stat_state(b"1234 (bash) 7"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_kept_stat_file_reads_the_state_afresh_until_the_thread_is_gone() {
        use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
        use std::sync::Arc;
        let spin = Arc::new(AtomicBool::new(true));
        let tid = Arc::new(AtomicI32::new(0));
        let (spin2, tid2) = (spin.clone(), tid.clone());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            tid2.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::SeqCst);
            while spin2.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            let _ = rx.recv(); // blocked until the sender is dropped
        });
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let pid = std::process::id() as Pid;
        let mut stat = ThreadStat::new(tid.load(Ordering::SeqCst));
        let mut wchan = Wchan::Refused; // stat only
        // Spinning: running or runnable, R.
        assert_eq!(stat.active(pid, &mut wchan), Some(true));
        assert!(stat.file.is_some(), "kept open");
        spin.store(false, Ordering::SeqCst);
        // Blocked in recv: S, through the same open file.
        let mut asleep = false;
        for _ in 0..500 {
            if stat.active(pid, &mut wchan) == Some(false) {
                asleep = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(asleep, "the kept file shows the new state");
        drop(tx);
        handle.join().unwrap();
        assert!(gone_soon(&mut stat, pid, &mut wchan), "gone");
        assert!(stat.file.is_none());
    }

    /// A joined thread has cleared its tid, but the kernel may not have removed its task yet
    /// (it can still read as exiting, or as running through `wchan`): wait up to 2 s for it.
    #[cfg(target_os = "linux")]
    fn gone_soon(stat: &mut ThreadStat, pid: Pid, wchan: &mut Wchan) -> bool {
        for _ in 0..1000 {
            if stat.active(pid, wchan).is_none() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        false
    }

    /// gpufeed patch 10: the run state from `wchan`, once a sleeping thread showed a name there.
    #[cfg(target_os = "linux")]
    #[test]
    fn wchan_is_trusted_once_a_sleeping_thread_names_its_function() {
        use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
        use std::sync::Arc;
        let spin = Arc::new(AtomicBool::new(true));
        let tid = Arc::new(AtomicI32::new(0));
        let (spin2, tid2) = (spin.clone(), tid.clone());
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            // SAFETY: gettid has no arguments and cannot fail.
            tid2.store(unsafe { libc::syscall(libc::SYS_gettid) } as i32, Ordering::SeqCst);
            while spin2.load(Ordering::SeqCst) {
                std::hint::spin_loop();
            }
            let _ = rx.recv();
        });
        while tid.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        let pid = std::process::id() as Pid;
        let mut stat = ThreadStat::new(tid.load(Ordering::SeqCst));
        let mut wchan = Wchan::Unknown(0);
        assert_eq!(stat.active(pid, &mut wchan), Some(true));
        assert_eq!(wchan, Wchan::Unknown(0), "a running thread proves nothing");
        spin.store(false, Ordering::SeqCst);
        let mut asleep = false;
        for _ in 0..500 {
            if stat.active(pid, &mut wchan) == Some(false) {
                asleep = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        assert!(asleep);
        let named = std::fs::read_to_string(format!("/proc/{}/task/{}/wchan", pid, stat.tid))
            .map(|w| w != "0")
            .unwrap_or(false);
        if !named {
            // A kernel that names no function (no symbols, or no access): stat stays.
            for _ in 0..3 {
                stat.active(pid, &mut wchan);
            }
            assert_eq!(wchan, Wchan::Refused);
            drop(tx);
            handle.join().unwrap();
            return;
        }
        assert_eq!(wchan, Wchan::Trusted);
        assert_eq!(stat.active(pid, &mut wchan), Some(false), "asleep, from wchan");
        assert!(stat.wchan.is_some(), "kept open");
        drop(tx);
        handle.join().unwrap();
        assert!(gone_soon(&mut stat, pid, &mut wchan), "gone");
    }
}
