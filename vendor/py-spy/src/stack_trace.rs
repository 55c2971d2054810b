use std::sync::Arc;

use anyhow::{Context, Error, Result};

use remoteprocess::{Pid, ProcessMemory};
use serde_derive::Serialize;

use crate::config::{Config, LineNo};
use crate::python_data_access::{copy_bytes, copy_string};
use crate::python_interpreters::{
    CodeObject, FrameObject, InterpreterState, ThreadState, TupleObject,
};

/// Call stack for a single python thread
#[derive(Debug, Clone, Serialize)]
pub struct StackTrace {
    /// The process id than generated this stack trace
    pub pid: Pid,
    /// The python thread id for this stack trace
    pub thread_id: u64,
    // The python thread name for this stack trace
    pub thread_name: Option<String>,
    /// The OS thread id for this stack tracee
    pub os_thread_id: Option<u64>,
    /// Whether or not the thread was active
    pub active: bool,
    /// Whether or not the thread held the GIL
    pub owns_gil: bool,
    /// The frames
    pub frames: Vec<Frame>,
    /// process commandline / parent process info
    pub process_info: Option<Arc<ProcessInfo>>,
}

/// Information about a single function call in a stack trace
#[derive(Debug, Hash, Eq, PartialEq, Ord, PartialOrd, Clone, Serialize)]
pub struct Frame {
    /// The function name
    pub name: String,
    /// The full filename of the file
    pub filename: String,
    /// The module/shared library the
    pub module: Option<String>,
    /// A short, more readable, representation of the filename
    pub short_filename: Option<String>,
    /// The line number inside the file (or 0 for native frames without line information)
    pub line: i32,
    /// Local Variables associated with the frame
    pub locals: Option<Vec<LocalVariable>>,
    /// If this is an entry frame. Each entry frame corresponds to one native frame (Python 3.11)
    pub is_entry: bool,
    /// If the last frame was a shim. This is used in Python 3.12+ to detect entry frames.
    pub is_shim_entry: bool,
    /// gpufeed patch 13: the serial of the frame's code object in the frame cache (unique in
    /// this program's life: never given to another code object), 0 without it. When
    /// `Config::frame_names` is off, `name` and `filename` are empty where this is not 0; the
    /// names are given with the serial by [`crate::PythonSpy::take_new_codes`].
    #[serde(skip)]
    pub code: u64,
}

#[derive(Debug, Hash, Eq, PartialEq, Ord, PartialOrd, Clone, Serialize)]
pub struct LocalVariable {
    pub name: String,
    pub addr: usize,
    pub arg: bool,
    pub repr: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ProcessInfo {
    pub pid: Pid,
    pub command_line: String,
    pub parent: Option<Box<ProcessInfo>>,
}

/// Given an InterpreterState, this function returns a vector of stack traces for each thread
pub fn get_stack_traces<I, P>(
    interpreter_address: usize,
    process: &P,
    threadstate_address: usize,
    config: Option<&Config>,
) -> Result<Vec<StackTrace>, Error>
where
    I: InterpreterState,
    P: ProcessMemory,
{
    let gil_thread_id = get_gil_threadid::<I, P>(threadstate_address, process)?;

    let threadstate_ptr_ptr = I::threadstate_ptr_ptr(interpreter_address);
    let mut threads: *const I::ThreadState = process
        .copy_struct(threadstate_ptr_ptr as usize)
        .context("Failed to copy PyThreadState head pointer")?;

    let mut ret = Vec::new();

    let lineno = config.map(|c| c.lineno).unwrap_or(LineNo::NoLine);
    let dump_locals = config.map(|c| c.dump_locals).unwrap_or(0);

    while !threads.is_null() {
        let thread = process
            .copy_pointer(threads)
            .context("Failed to copy PyThreadState")?;

        let mut trace = get_stack_trace(&thread, process, dump_locals > 0, lineno)?;
        trace.owns_gil = trace.thread_id == gil_thread_id;

        ret.push(trace);
        // This seems to happen occasionally when scanning BSS addresses for valid interpreters
        if ret.len() > 4096 {
            return Err(format_err!("Max thread recursion depth reached"));
        }
        threads = thread.next();
    }
    Ok(ret)
}

/// Gets a stack trace for an individual thread
pub fn get_stack_trace<T, P>(
    thread: &T,
    process: &P,
    copy_locals: bool,
    lineno: LineNo,
) -> Result<StackTrace, Error>
where
    T: ThreadState,
    P: ProcessMemory,
{
    get_stack_trace_cached(thread, &OneByOne(process), copy_locals, lineno, None, 0)
}

/// What is kept of one code object (gpufeed patch, PATCHES.md).
#[derive(Debug, Clone)]
struct CodeEntry {
    filename: String,
    name: String,
    first_lineno: i32,
    /// The line table, read on the first line-number lookup that misses.
    line_table: Option<Vec<u8>>,
    /// What identifies the code object: its name, file name and line table objects' addresses
    /// and its first line. Equal after a re-read: the same code, or one whose cached values are
    /// the same.
    fingerprint: [usize; 5],
    /// The cache's generation when this was last read or checked.
    generation: u64,
    /// gpufeed patch 13: this entry's serial ([`Frame::code`]), from [`next_code_serial`].
    serial: u64,
}

/// Whether a function is one a thread waits in (py-spy's idle heuristic, for threads whose run
/// state the OS does not tell; moved here by gpufeed patch 13 to be applied to cached code).
pub(crate) fn idle_function(name: &str, filename: &str) -> bool {
    (name == "wait" && filename.ends_with("threading.py"))
        || (name == "select" && filename.ends_with("selectors.py"))
        || (name == "poll"
            && (filename.ends_with("asyncore.py")
                || filename.contains("zmq")
                || filename.contains("gevent")
                || filename.contains("tornado")))
}

/// gpufeed patch 13: a serial for a code object read, unique among every spy of this program
/// (a spy opened again for the same process must not give an old serial other names).
fn next_code_serial() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// gpufeed patch 13: what a frame takes from its code object's entry: its serial, first line,
/// whether it is a shim (no file name, or `<shim>`), and (when frames carry them) the names.
type CodeView = (u64, i32, bool, Option<(String, String)>);

impl CodeEntry {
    fn view(&self, names: bool) -> CodeView {
        (
            self.serial,
            self.first_lineno,
            self.filename.is_empty() || self.filename == "<shim>",
            names.then(|| (self.filename.clone(), self.name.clone())),
        )
    }
}

fn fingerprint<C: CodeObject>(code: &C) -> [usize; 5] {
    [
        code.filename() as usize,
        code.name() as usize,
        code.qualname().map_or(0, |p| p as usize),
        code.line_table() as usize,
        code.first_lineno() as usize,
    ]
}

/// Counters of a [`FrameCache`], for tests and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameCacheStats {
    /// Frames whose code object was known (no read of the code object or its strings).
    pub code_hits: u64,
    /// Frames whose code object was read.
    pub code_misses: u64,
    /// Line numbers found by (code address, instruction).
    pub line_hits: u64,
    /// Line numbers computed from a line table.
    pub line_misses: u64,
    /// Times the cache was emptied (size cap, or [`FrameCache::clear`]).
    pub clears: u64,
    /// Times the cache came of age (its entries to be checked again).
    pub expiries: u64,
    /// Frames whose code object was read again after an expiry and found unchanged.
    pub code_checks: u64,
    /// Data-stack chunks (CPython 3.11+) read in one piece.
    pub stack_reads: u64,
    /// Frames taken from those reads instead of read one by one.
    pub stack_frames: u64,
    /// Thread states taken from the read of the previous thread's frames.
    pub threads_read_ahead: u64,
    /// gpufeed patch 11: data-stack chunks taken from the head's read (counted in
    /// `stack_reads` too), and thread states passed over without being read.
    pub stacks_with_head: u64,
    pub threads_left_out: u64,
}

/// gpufeed patch 11: what a thread's last stack read took, to read with the head next time.
#[derive(Debug, Clone, Copy)]
struct NotedWindow {
    /// The thread state's address.
    thread: usize,
    /// Where its frame pointer was read (`cframe->current_frame`, 3.11 and 3.12; 0: none), at
    /// its last reads, the latest first: the `cframe` sits on the thread's C stack, deeper
    /// each time the interpreter is entered again from C, so it takes a few places in turn.
    slots: [usize; 4],
    /// The data-stack range read, and the end of its chunk.
    base: usize,
    end: usize,
    limit: usize,
    /// Visited by the current walk (read or passed over); the others are dropped after it.
    seen: bool,
}

/// gpufeed patch 11: a [`NotedWindow`] as read with the head.
#[derive(Debug, Default)]
struct PreRead {
    thread: usize,
    /// The page(s) of the C stack around its recent frame-pointer places.
    slot_base: usize,
    slot_buf: Vec<u8>,
    slot_ok: bool,
    base: usize,
    buf: Vec<u8>,
    ok: bool,
}

/// Per-process cache of what [`get_stack_trace_cached`] reads from code objects, keyed by the
/// code object's address (gpufeed patch, PATCHES.md).
///
/// The fields read (co_filename, co_name/co_qualname, co_firstlineno, the line table) never
/// change during a code object's life, but a freed code object's address can be reused by
/// another one: when the cache is older than `max_age` (call [`FrameCache::expire`] once per
/// sample) each entry is checked again on its next use, by one read of the code object whose
/// name, file name and line table addresses and first line must be unchanged (else it is read
/// afresh); the cache is emptied when it would grow past its caps, which bounds its memory.
#[derive(Debug)]
pub struct FrameCache {
    // gpufeed patch 12: FxHash (keys are addresses read from the target, looked up for every
    // frame of every sample; SipHash's flood resistance buys nothing here).
    codes: rustc_hash::FxHashMap<usize, CodeEntry>,
    lines: rustc_hash::FxHashMap<(usize, i32), i32>,
    max_age: std::time::Duration,
    max_codes: usize,
    max_lines: usize,
    filled_since: std::time::Instant,
    /// Bumped at each expiry: entries of an older generation are checked before use.
    generation: u64,
    stats: FrameCacheStats,
    /// The last data-stack chunk read (kept to reuse its allocation).
    stack_buf: Vec<u8>,
    /// The thread state read ahead with the last thread's frames, and its address (0: none).
    next_thread: Vec<u8>,
    next_thread_addr: usize,
    /// The head of the thread list at the last sample (its thread state is read with the head).
    last_head: usize,
    /// gpufeed patch 9: the addresses of the thread states after the head's at the last walk
    /// (read with the head, [`threads_head_and_gil_holder`]), the states so read one after
    /// another, and per state its address while it is there to take (0: not read, or taken).
    chain: Vec<usize>,
    chain_states: Vec<u8>,
    chain_ready: Vec<usize>,
    /// Frames room to allocate per stack: the deepest seen, up to `MAX_DEPTH_HINT`.
    depth_hint: usize,
    /// gpufeed patch 13: frames carry their names (upstream) or only their code's serial; in
    /// the latter case, the code objects read since the caller last took them, as (serial,
    /// function name, file name).
    pub(crate) frame_names: bool,
    new_codes: Vec<(u64, String, String)>,
    /// gpufeed patch 13: the serials of the code objects read that are [`idle_function`]s
    /// (a handful; kept across clears: a serial is never reused).
    idle_codes: Vec<u64>,
    /// gpufeed patch 11: the OS ids (0: unknown) of the head's thread state and of `chain`'s
    /// at the last walk; the ids the caller passes over this sample ([`FrameCache::plan_skip`]);
    /// the thread states so left out of the head's read, as (address, OS id, the next address
    /// at the last walk), valid while the head is where it was.
    head_tid: u64,
    chain_tids: Vec<u64>,
    plan_skip: Vec<u64>,
    left_out: Vec<(usize, u64, usize)>,
    /// gpufeed patch 11: each thread's last stack read ([`NotedWindow`]), and the same ranges
    /// read with the head this sample.
    windows: Vec<NotedWindow>,
    pre: Vec<PreRead>,
    /// The address of the thread state the walk took last, when it came with the head's read
    /// (0 otherwise), and whether `next_thread` did.
    with_head: usize,
    next_from_head: bool,
    /// gpufeed patch 12: emptied frame vectors given back ([`FrameCache::recycle_frames`]).
    spare_frames: Vec<Vec<Frame>>,
}

impl Default for FrameCache {
    fn default() -> Self {
        FrameCache::new(
            FrameCache::MAX_AGE,
            FrameCache::MAX_CODES,
            FrameCache::MAX_LINES,
        )
    }
}

impl FrameCache {
    /// How long an entry may be trusted: the longest a reused code address can give a wrong
    /// name or line. Refilling costs about 6 reads per code object in use, once per period.
    pub const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3);
    /// Code objects kept (each: two strings and a line table, a few hundred bytes).
    pub const MAX_CODES: usize = 4096;
    /// (code, instruction) -> line entries kept.
    pub const MAX_LINES: usize = 65536;
    /// Most frames room allocated ahead per stack.
    pub const MAX_DEPTH_HINT: usize = 256;
    /// Most thread states read with the head besides the head's (gpufeed patch 9).
    pub const MAX_CHAIN: usize = 63;
    /// Most frame vectors kept for reuse (gpufeed patch 12).
    pub const MAX_SPARE_FRAMES: usize = 64;

    pub fn new(max_age: std::time::Duration, max_codes: usize, max_lines: usize) -> FrameCache {
        FrameCache {
            codes: Default::default(),
            lines: Default::default(),
            max_age,
            max_codes: max_codes.max(1),
            max_lines: max_lines.max(1),
            filled_since: std::time::Instant::now(),
            generation: 0,
            stats: FrameCacheStats::default(),
            stack_buf: Vec::new(),
            next_thread: Vec::new(),
            next_thread_addr: 0,
            last_head: 0,
            chain: Vec::new(),
            chain_states: Vec::new(),
            chain_ready: Vec::new(),
            depth_hint: 0,
            frame_names: true,
            new_codes: Vec::new(),
            idle_codes: Vec::new(),
            head_tid: 0,
            chain_tids: Vec::new(),
            plan_skip: Vec::new(),
            left_out: Vec::new(),
            windows: Vec::new(),
            pre: Vec::new(),
            with_head: 0,
            next_from_head: false,
            spare_frames: Vec::new(),
        }
    }

    /// Once the cache is older than its maximum age at `now`, its entries are checked again
    /// (one read of the code object each) before their next use.
    pub fn expire(&mut self, now: std::time::Instant) {
        if now.saturating_duration_since(self.filled_since) >= self.max_age {
            self.generation += 1;
            self.filled_since = now;
            self.stats.expiries += 1;
        }
    }

    /// Empties the cache.
    /// gpufeed patch 13: moves the code objects read since the last call (when frames carry
    /// only their serial, `Config::frame_names` off) to `out`, as (serial, function name, file
    /// name). Kept across failed samples: a serial is never given without its names.
    pub fn take_new_codes(&mut self, out: &mut Vec<(u64, String, String)>) {
        out.append(&mut self.new_codes);
    }

    /// gpufeed patch 13: whether the code object of this serial is an [`idle_function`].
    pub(crate) fn idle_code(&self, serial: u64) -> bool {
        self.idle_codes.contains(&serial)
    }

    pub fn clear(&mut self) {
        self.clear_at(std::time::Instant::now());
    }

    fn clear_at(&mut self, now: std::time::Instant) {
        self.codes.clear();
        self.lines.clear();
        self.filled_since = now;
        self.stats.clears += 1;
    }

    /// The thread state at `addr` if it was read ahead with the previous thread's frames
    /// (in this walk: the read-ahead is dropped by the next [`get_stack_trace_cached`] and by
    /// [`FrameCache::forget_read_ahead`]).
    pub fn take_read_ahead<T: Copy>(&mut self, addr: usize) -> Option<T> {
        let ok = addr != 0
            && self.next_thread_addr == addr
            && self.next_thread.len() == std::mem::size_of::<T>();
        self.next_thread_addr = 0;
        if !ok {
            return self.take_from_chain(addr);
        }
        self.with_head = if self.next_from_head { addr } else { 0 };
        self.stats.threads_read_ahead += 1;
        // SAFETY: T is a plain C struct of integers and pointers, read from bytes of its size.
        Some(unsafe { std::ptr::read_unaligned(self.next_thread.as_ptr() as *const T) })
    }

    /// gpufeed patch 9: the thread state at `addr` if it was read with the head, once.
    fn take_from_chain<T: Copy>(&mut self, addr: usize) -> Option<T> {
        self.with_head = 0;
        let size = std::mem::size_of::<T>();
        let i = self.chain_ready.iter().position(|&a| a == addr && a != 0)?;
        let bytes = self.chain_states.get(i * size..(i + 1) * size)?;
        self.chain_ready[i] = 0;
        self.with_head = addr;
        self.stats.threads_read_ahead += 1;
        // SAFETY: T is a plain C struct of integers and pointers, read from bytes of its size.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr() as *const T) })
    }

    /// gpufeed patch 9: the addresses of the thread states a walk visited after the head's,
    /// to read with the head at the next sample (at most [`FrameCache::MAX_CHAIN`]).
    pub fn note_chain(&mut self, after_head: &[usize]) {
        self.chain.clear();
        self.chain
            .extend(after_head.iter().take(Self::MAX_CHAIN).copied());
    }

    /// Drops a thread state read ahead (call before a new walk of the thread list).
    pub fn forget_read_ahead(&mut self) {
        self.next_thread_addr = 0;
        self.chain_ready.clear();
        self.left_out.clear();
        self.with_head = 0;
    }

    /// gpufeed patch 12: a stack's frame vector, once its frames were taken: the next stack
    /// is read into it instead of a new one (an allocation of `depth_hint` frames each).
    pub fn recycle_frames(&mut self, mut frames: Vec<Frame>) {
        frames.clear();
        if self.spare_frames.len() < Self::MAX_SPARE_FRAMES && frames.capacity() > 0 {
            self.spare_frames.push(frames);
        }
    }

    /// gpufeed patch 11: the OS ids of the thread states a walk visited (the head's first, as
    /// [`FrameCache::note_chain`]'s addresses after it; 0 where unknown).
    pub fn note_tids(&mut self, head: u64, after_head: &[u64]) {
        self.head_tid = head;
        self.chain_tids.clear();
        self.chain_tids
            .extend(after_head.iter().take(Self::MAX_CHAIN).copied());
    }

    /// gpufeed patch 11: the OS ids of the threads the caller passes over at this sample
    /// (known Python threads that did not run): the head's read leaves their thread states out
    /// while the head is where it was, see [`FrameCache::left_out`]. Call before
    /// [`threads_head_and_gil_holder`].
    pub fn plan_skip(&mut self, tids: &[u64]) {
        self.plan_skip.clear();
        self.plan_skip.extend_from_slice(tids);
    }

    /// gpufeed patch 11: a thread state the head's read left out (its thread did not run, and
    /// the head is where it was, so the list is as it was): its OS id and the next address.
    pub fn left_out(&self, addr: usize) -> Option<(u64, usize)> {
        self.left_out
            .iter()
            .find(|l| l.0 == addr && addr != 0)
            .map(|l| (l.1, l.2))
    }

    /// gpufeed patch 11: starts a walk: the windows of the threads it does not visit are
    /// dropped at [`FrameCache::end_walk`].
    pub fn begin_walk(&mut self) {
        for w in &mut self.windows {
            w.seen = false;
        }
    }

    /// gpufeed patch 11: a thread passed over keeps its window.
    pub fn keep_window(&mut self, thread: usize) {
        if let Some(w) = self.windows.iter_mut().find(|w| w.thread == thread) {
            w.seen = true;
        }
    }

    pub fn end_walk(&mut self) {
        self.windows.retain(|w| w.seen);
    }

    fn note_window(&mut self, mut w: NotedWindow) {
        if w.thread == 0 {
            return;
        }
        if let Some(x) = self.windows.iter_mut().find(|x| x.thread == w.thread) {
            // The latest place first, then the others seen lately.
            let mut k = 1;
            for &a in &x.slots {
                if k < w.slots.len() && a != 0 && a != w.slots[0] {
                    w.slots[k] = a;
                    k += 1;
                }
            }
            *x = w;
        } else if self.windows.len() <= Self::MAX_CHAIN {
            self.windows.push(w);
        }
    }

    pub fn stats(&self) -> FrameCacheStats {
        self.stats
    }

    /// Code objects and line entries held.
    pub fn len(&self) -> (usize, usize) {
        (self.codes.len(), self.lines.len())
    }

    pub fn is_empty(&self) -> bool {
        self.codes.is_empty() && self.lines.is_empty()
    }

    /// The entry of the code object at `addr`: `Ok(Some)` when known and current, `Ok(None)`
    /// when unknown, `Err(())` when known but to be checked ([`FrameCache::check`]).
    fn code(&mut self, addr: usize) -> Result<Option<&CodeEntry>, ()> {
        match self.codes.get(&addr) {
            Some(entry) if entry.generation == self.generation => {
                self.stats.code_hits += 1;
                Ok(Some(entry))
            }
            Some(_) => Err(()),
            None => {
                self.stats.code_misses += 1;
                Ok(None)
            }
        }
    }

    /// Checks the entry at `addr` against the code object read there again: kept (and current)
    /// when its fingerprint is unchanged, else dropped with its lines (read it afresh).
    fn check(&mut self, addr: usize, fingerprint: [usize; 5]) -> Option<&CodeEntry> {
        let generation = self.generation;
        let same = self
            .codes
            .get(&addr)
            .is_some_and(|e| e.fingerprint == fingerprint);
        if !same {
            self.stats.code_misses += 1;
            self.codes.remove(&addr);
            self.lines.retain(|(a, _), _| *a != addr);
            return None;
        }
        self.stats.code_checks += 1;
        let entry = self.codes.get_mut(&addr)?;
        entry.generation = generation;
        Some(entry)
    }

    fn insert_code(&mut self, addr: usize, entry: CodeEntry) {
        if self.codes.len() >= self.max_codes {
            self.clear();
        }
        self.codes.insert(addr, entry);
    }

    fn line(&mut self, addr: usize, lasti: i32) -> Option<i32> {
        let line = self.lines.get(&(addr, lasti)).copied();
        if line.is_some() {
            self.stats.line_hits += 1;
        } else {
            self.stats.line_misses += 1;
        }
        line
    }

    fn insert_line(&mut self, addr: usize, lasti: i32, line: i32) {
        if self.lines.len() >= self.max_lines {
            self.clear();
        }
        self.lines.insert((addr, lasti), line);
    }

    fn line_table(&self, addr: usize) -> Option<&[u8]> {
        self.codes.get(&addr)?.line_table.as_deref()
    }

    fn set_line_table(&mut self, addr: usize, table: &[u8]) {
        if let Some(entry) = self.codes.get_mut(&addr) {
            entry.line_table = Some(table.to_vec());
        }
    }
}

/// Several ranges of remote memory in one go (gpufeed patch, PATCHES.md): on Linux one
/// `process_vm_readv` with one iovec per range instead of one call per range.
pub trait ReadParts {
    /// Reads the `(address, buffer)` parts in order and stops at the first that cannot be read
    /// whole; returns how many were read whole (the buffers after them hold anything).
    fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize;
}

/// [`ReadParts`] by one [`ProcessMemory::read`] per part.
pub fn read_parts_one_by_one<P: ProcessMemory>(
    process: &P,
    parts: &mut [(usize, &mut [u8])],
) -> usize {
    let mut done = 0;
    for (addr, buf) in parts.iter_mut() {
        if process.read(*addr, buf).is_err() {
            break;
        }
        done += 1;
    }
    done
}

impl ReadParts for remoteprocess::Process {
    #[cfg(target_os = "linux")]
    fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
        let mut local = Vec::with_capacity(parts.len());
        let mut remote = Vec::with_capacity(parts.len());
        for (addr, buf) in parts.iter_mut() {
            local.push(libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            });
            remote.push(libc::iovec {
                iov_base: *addr as *mut libc::c_void,
                iov_len: buf.len(),
            });
        }
        // SAFETY: each local iovec is a live, exclusively borrowed buffer of its length; the
        // remote ones are only read by the kernel from the other process.
        let got = unsafe {
            libc::process_vm_readv(
                self.pid as libc::pid_t,
                local.as_ptr(),
                local.len() as libc::c_ulong,
                remote.as_ptr(),
                remote.len() as libc::c_ulong,
                0,
            )
        };
        if got < 0 {
            // Whatever ProcessMemory::read falls back to (/proc/PID/mem without
            // process_vm_readv), part by part.
            return read_parts_one_by_one(self, parts);
        }
        // A partial read stops at the first range that fails.
        let mut left = got as usize;
        let mut done = 0;
        for (_, buf) in parts.iter() {
            if left < buf.len() {
                break;
            }
            left -= buf.len();
            done += 1;
        }
        done
    }

    #[cfg(not(target_os = "linux"))]
    fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
        read_parts_one_by_one(self, parts)
    }
}

impl ReadParts for remoteprocess::LocalProcess {
    fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
        read_parts_one_by_one(self, parts)
    }
}

/// Reads through `P` one part at a time: for callers whose memory has no [`ReadParts`].
struct OneByOne<'a, P>(&'a P);

impl<P: ProcessMemory> ProcessMemory for OneByOne<'_, P> {
    fn read(&self, addr: usize, buf: &mut [u8]) -> Result<(), remoteprocess::Error> {
        self.0.read(addr, buf)
    }
}

impl<P: ProcessMemory> ReadParts for OneByOne<'_, P> {
    fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
        read_parts_one_by_one(self.0, parts)
    }
}

/// Most bytes of a thread's data-stack chunk read in one piece (gpufeed patch, PATCHES.md):
/// CPython's chunks are 16 KiB unless one frame needs more.
pub const MAX_STACK_READ: usize = 64 * 1024;
/// gpufeed patch 11: a data stack read with the head goes this far past where the thread's
/// last read ended (frames pushed since), rounded up to the end of a page (pinning a page
/// costs the kernel the same whatever is read of it); all such reads of one sample together
/// at most `PRE_READ_MAX` bytes.
const PRE_READ_SLACK: usize = 512;
const PRE_READ_PAGE: usize = 4096;
const PRE_READ_MAX: usize = 256 * 1024;

/// The live part of a thread's current data-stack chunk (CPython 3.11+), copied with one read
/// (gpufeed patch, PATCHES.md): `[chunk, top)` and one frame's size more (a frame pushed since
/// `top` was read), at most the last [`MAX_STACK_READ`] bytes. The frames of one thread sit
/// there one after another, so a walk takes them from this copy instead of one
/// `process_vm_readv` per frame; a frame outside it (a generator's frame, one in an older
/// chunk, a C-stack entry frame, one pushed further) is read on its own as before.
struct StackWindow {
    base: usize,
    buf: Vec<u8>,
}

impl StackWindow {
    /// The `F` at remote address `addr`, if it lies wholly in the copy.
    fn get<F: Copy>(&self, addr: usize) -> Option<F> {
        let off = addr.checked_sub(self.base)?;
        if off.checked_add(std::mem::size_of::<F>())? > self.buf.len() {
            return None;
        }
        // SAFETY: the bytes are in bounds; F is a plain C struct of integers and raw pointers
        // (what `ProcessMemory::copy_struct` also builds from bytes), read unaligned.
        Some(unsafe { std::ptr::read_unaligned(self.buf.as_ptr().add(off) as *const F) })
    }
}

/// [`get_stack_trace`] with an optional [`FrameCache`] (gpufeed patch, PATCHES.md): with a
/// cache, a frame whose code object and (code, instruction) line are known costs one read.
/// The cache is not used when locals are copied (they need the code object).
pub fn get_stack_trace_cached<T, P>(
    thread: &T,
    process: &P,
    copy_locals: bool,
    lineno: LineNo,
    cache: Option<&mut FrameCache>,
    thread_addr: usize,
) -> Result<StackTrace, Error>
where
    T: ThreadState,
    P: ProcessMemory + ReadParts,
{
    let mut cache = if copy_locals { None } else { cache };
    // TODO: just return frames here? everything else probably should be returned out of scope
    // gpufeed patch (PATCHES.md): room for the deepest stack seen so far (no regrowth), in a
    // vector given back by the caller when there is one (patch 12).
    let mut frames = match cache.as_deref_mut().and_then(|c| c.spare_frames.pop()) {
        Some(v) => v,
        None => Vec::with_capacity(cache.as_ref().map_or(0, |c| c.depth_hint)),
    };

    // python 3.11+ has an extra level of indirection to get the Frame from the threadstate
    let mut frame_address = thread.frame_address();

    // gpufeed patch (PATCHES.md): with a cache, one read brings the frame pointer (3.11, 3.12),
    // the live part of the thread's data-stack chunk (3.11+: the frames are taken from the copy)
    // and the next thread state of the interpreter's list (taken by the caller's walk).
    let mut window = None;
    // gpufeed patch 11: the window taken from the head's read (its buffer goes back there).
    let mut window_pre = None;
    let mut resolved = frame_address.is_none();
    if let Some(c) = cache.as_deref_mut() {
        let chunk = thread
            .datastack()
            .filter(|&(chunk, top, limit)| chunk != 0 && chunk < top && top <= limit);
        let stack = chunk.map(|(chunk, top, limit)| {
            let end = limit.min(top.saturating_add(std::mem::size_of::<T::FrameObject>()));
            (chunk.max(end.saturating_sub(MAX_STACK_READ)), end)
        });
        let next = thread.next() as usize;
        // gpufeed patch 11: what came with the head's read (this thread state did too, so
        // they are one snapshot): the frame pointer, where it was read at the same address,
        // and the data stack, where the range read covers the one needed now.
        let slot_addr = frame_address.unwrap_or(0);
        let pre = if thread_addr != 0 && c.with_head == thread_addr {
            c.pre.iter().position(|p| p.thread == thread_addr)
        } else {
            None
        };
        if let Some(i) = pre {
            let p = &mut c.pre[i];
            const W: usize = std::mem::size_of::<usize>();
            let at = slot_addr.wrapping_sub(p.slot_base);
            if p.slot_ok && slot_addr != 0 && slot_addr >= p.slot_base && at + W <= p.slot_buf.len()
            {
                let mut bytes = [0u8; W];
                bytes.copy_from_slice(&p.slot_buf[at..at + W]);
                frame_address = Some(usize::from_ne_bytes(bytes));
                resolved = true;
            }
            if let Some((base, end)) = stack {
                if p.ok && p.base <= base && end <= p.base + p.buf.len() {
                    c.stats.stack_reads += 1;
                    c.stats.stacks_with_head += 1;
                    window = Some(StackWindow {
                        base: p.base,
                        buf: std::mem::take(&mut p.buf),
                    });
                    window_pre = Some(i);
                }
            }
        }
        if let (Some((base, end)), Some((_, _, limit))) = (stack, chunk) {
            c.note_window(NotedWindow {
                thread: thread_addr,
                slots: [slot_addr, 0, 0, 0],
                base,
                end,
                limit,
                seen: true,
            });
        }
        let mut slot = [0u8; std::mem::size_of::<usize>()];
        let mut buf = std::mem::take(&mut c.stack_buf);
        let mut next_buf = std::mem::take(&mut c.next_thread);
        c.next_thread_addr = 0;
        // (what, address, bytes) in read order: 0 frame pointer, 1 stack, 2 next thread.
        let mut parts: [(usize, &mut [u8]); 3] = [(0, &mut []), (0, &mut []), (0, &mut [])];
        let mut kinds = [0u8; 3];
        let mut n = 0;
        if let (Some(addr), false) = (frame_address, resolved) {
            parts[n] = (addr, &mut slot[..]);
            kinds[n] = 0;
            n += 1;
        }
        let stack_to_read = stack.filter(|_| window.is_none());
        if let Some((base, end)) = stack_to_read {
            buf.resize(end - base, 0);
            parts[n] = (base, &mut buf[..]);
            kinds[n] = 1;
            n += 1;
        }
        // gpufeed patch 11: not when the head's read brought it or left it out.
        if next != 0 && !c.chain_ready.contains(&next) && c.left_out(next).is_none() {
            next_buf.resize(std::mem::size_of::<T>(), 0);
            parts[n] = (next, &mut next_buf[..]);
            kinds[n] = 2;
            n += 1;
        }
        let whole = if n > 0 {
            process.read_parts(&mut parts[..n])
        } else {
            0
        };
        let read = |kind: u8| kinds[..whole].contains(&kind);
        if read(0) {
            frame_address = Some(usize::from_ne_bytes(slot));
            resolved = true;
        }
        match stack_to_read {
            Some((base, _)) if read(1) => {
                c.stats.stack_reads += 1;
                window = Some(StackWindow { base, buf });
            }
            _ => c.stack_buf = buf,
        }
        if read(2) {
            c.next_thread_addr = next;
            c.next_from_head = false;
        }
        c.next_thread = next_buf;
    }
    if !resolved {
        if let Some(addr) = frame_address {
            frame_address = Some(process.copy_struct(addr)?);
        }
    }

    let mut frame_ptr = thread.frame(frame_address);

    // We are iterating in reverse, i.e. from last call to first call.
    // Since Python 3.12, there are shim frames inserted before a block
    // of Python frames. When we encounter one, update the last frame.
    let set_last_frame_as_shim_entry = &mut |frames: &mut Vec<Frame>| {
        if let Some(frame) = frames.last_mut() {
            frame.is_shim_entry = true;
        }
    };

    let mut visited = 0;
    while !frame_ptr.is_null() {
        visited += 1;
        if visited > 4096 {
            return Err(format_err!("Max frame recursion depth reached"));
        }

        let frame = match window.as_ref().and_then(|w| w.get(frame_ptr as usize)) {
            Some(frame) => {
                if let Some(c) = cache.as_deref_mut() {
                    c.stats.stack_frames += 1;
                }
                frame
            }
            None => process
                .copy_pointer(frame_ptr)
                .context("Failed to copy PyFrameObject")?,
        };

        if !frame.is_python_frame() {
            frame_ptr = frame.back();
            set_last_frame_as_shim_entry(&mut frames);
            continue;
        }

        let code_addr = frame.code() as usize;
        // The code object, when read for this frame.
        let mut code_read = None;
        let known = match cache.as_deref_mut() {
            None => None,
            Some(c) => {
                let names = c.frame_names;
                match c.code(code_addr) {
                    Ok(entry) => entry.map(|e| e.view(names)),
                    // Older than MAX_AGE: one read of the code object checks it (a read that
                    // fails is retried below, with upstream's error).
                    Err(()) => match process.copy_pointer(frame.code()) {
                        Ok(read) => {
                            code_read = Some(read);
                            c.check(code_addr, fingerprint(&read))
                                .map(|e| e.view(names))
                        }
                        Err(_) => None,
                    },
                }
            }
        };

        let (serial, filename, name, first_lineno, shim, mut code) = match known {
            Some((serial, first_lineno, shim, names)) => {
                let (filename, name) = names.unwrap_or_default();
                (serial, filename, name, first_lineno, shim, code_read)
            }
            None => {
                let code = match code_read {
                    Some(code) => code,
                    None => process
                        .copy_pointer(frame.code())
                        .context("Failed to copy PyCodeObject")?,
                };

                let filename =
                    copy_string(code.filename(), process).context("Failed to copy filename");

                // Try to get qualname first (available in Python 3.11+), fall back to name
                let name = match code.qualname() {
                    Some(qualname_ptr) => copy_string(qualname_ptr, process)
                        .or_else(|_| copy_string(code.name(), process)),
                    None => copy_string(code.name(), process),
                }
                .context("Failed to copy function name");

                // Guards against torn reads while sampling without pausing the process.
                // Nothing is cached from a torn read.
                if filename.is_err() || name.is_err() {
                    frame_ptr = frame.back();
                    set_last_frame_as_shim_entry(&mut frames);
                    continue;
                }
                let mut filename = filename?;
                let mut name = name?;
                let shim = filename.is_empty() || filename == "<shim>";
                let mut serial = 0;
                if let Some(c) = cache.as_deref_mut() {
                    serial = next_code_serial();
                    c.insert_code(
                        code_addr,
                        CodeEntry {
                            filename: filename.clone(),
                            name: name.clone(),
                            first_lineno: code.first_lineno(),
                            line_table: None,
                            fingerprint: fingerprint(&code),
                            generation: c.generation,
                            serial,
                        },
                    );
                    if idle_function(&name, &filename) && c.idle_codes.len() < 4096 {
                        c.idle_codes.push(serial);
                    }
                    if !c.frame_names && !shim {
                        // Given once, with the serial; the frame carries only the serial.
                        c.new_codes.push((
                            serial,
                            std::mem::take(&mut name),
                            std::mem::take(&mut filename),
                        ));
                    }
                }
                (
                    serial,
                    filename,
                    name,
                    code.first_lineno(),
                    shim,
                    Some(code),
                )
            }
        };

        // skip <shim> entries in python 3.13+
        // Unset file/function name in py3.13 means this is a shim.
        // gpufeed patch 13: told before the names may have left the frame (`shim`).
        if shim {
            frame_ptr = frame.back();
            set_last_frame_as_shim_entry(&mut frames);
            continue;
        }

        let line = match lineno {
            LineNo::NoLine => 0,
            LineNo::First => first_lineno,
            LineNo::LastInstruction => {
                let lasti = frame.lasti();
                let cached = cache.as_deref_mut().and_then(|c| c.line(code_addr, lasti));
                match cached {
                    Some(line) => line,
                    None => {
                        let line = line_number_cached(
                            &mut code,
                            frame.code(),
                            lasti,
                            process,
                            cache.as_deref_mut(),
                        );
                        match line {
                            Ok(line) => {
                                if let Some(c) = cache.as_deref_mut() {
                                    c.insert_line(code_addr, lasti, line);
                                }
                                line
                            }
                            Err(e) => {
                                // Failling to get the line number really shouldn't be fatal here, but
                                // can happen in extreme cases (https://github.com/benfred/py-spy/issues/164)
                                // Rather than fail set the linenumber to 0. This is used by the native extensions
                                // to indicate that we can't load a line number and it should be handled gracefully
                                warn!(
                                    "Failed to get line number from {}.{} (code {}): {}",
                                    filename, name, serial, e
                                );
                                0
                            }
                        }
                    }
                }
            }
        };

        let locals = if copy_locals {
            // Without a cache (copy_locals turns it off) the code object was read above.
            let code = match code {
                Some(code) => code,
                None => process
                    .copy_pointer(frame.code())
                    .context("Failed to copy PyCodeObject")?,
            };
            Some(
                get_locals(&code, frame_ptr, &frame, process)
                    .context("Failed to get local variables")?,
            )
        } else {
            None
        };

        let is_entry = frame.is_entry();

        frames.push(Frame {
            name,
            filename,
            line,
            short_filename: None,
            module: None,
            locals,
            is_entry,
            is_shim_entry: false,
            code: serial,
        });

        frame_ptr = frame.back();
    }

    // First frame is always a shim
    set_last_frame_as_shim_entry(&mut frames);

    if let Some(c) = cache {
        c.depth_hint = c.depth_hint.max(frames.len()).min(FrameCache::MAX_DEPTH_HINT);
        if let Some(w) = window {
            match window_pre.and_then(|i| c.pre.get_mut(i)) {
                Some(p) => p.buf = w.buf,
                None => c.stack_buf = w.buf,
            }
        }
    }

    Ok(StackTrace {
        pid: 0,
        frames,
        thread_id: thread.thread_id(),
        thread_name: None,
        owns_gil: false,
        active: true,
        os_thread_id: thread.native_thread_id(),
        process_info: None,
    })
}

/// The line of instruction `lasti` of the code object at `code_ptr`: reads the code object
/// unless it was read already (`code`), and its line table unless the cache has it.
fn line_number_cached<C: CodeObject, P: ProcessMemory>(
    code: &mut Option<C>,
    code_ptr: *const C,
    lasti: i32,
    process: &P,
    cache: Option<&mut FrameCache>,
) -> Result<i32, Error> {
    let code = match code {
        Some(code) => *code,
        None => {
            let read = process
                .copy_pointer(code_ptr)
                .context("Failed to copy PyCodeObject")?;
            *code = Some(read);
            read
        }
    };
    let Some(cache) = cache else {
        return get_line_number(&code, lasti, process);
    };
    let addr = code_ptr as usize;
    if let Some(table) = cache.line_table(addr) {
        return Ok(code.get_line_number(lasti, table));
    }
    let table =
        copy_bytes(code.line_table(), process).context("Failed to copy line number table")?;
    cache.set_line_table(addr, &table);
    Ok(code.get_line_number(lasti, &table))
}

impl StackTrace {
    pub fn status_str(&self) -> &str {
        match (self.owns_gil, self.active) {
            (_, false) => "idle",
            (true, true) => "active+gil",
            (false, true) => "active",
        }
    }

    pub fn format_threadid(&self) -> String {
        // native threadids in osx are kinda useless, use the pthread id instead
        #[cfg(target_os = "macos")]
        return format!("{:#X}", self.thread_id);

        // otherwise use the native threadid if given
        #[cfg(not(target_os = "macos"))]
        match self.os_thread_id {
            Some(tid) => format!("{}", tid),
            None => format!("{:#X}", self.thread_id),
        }
    }
}

/// Returns the line number from a PyCodeObject (given the lasti index from a PyFrameObject)
fn get_line_number<C: CodeObject, P: ProcessMemory>(
    code: &C,
    lasti: i32,
    process: &P,
) -> Result<i32, Error> {
    let table =
        copy_bytes(code.line_table(), process).context("Failed to copy line number table")?;
    Ok(code.get_line_number(lasti, &table))
}

fn get_locals<C: CodeObject, F: FrameObject, P: ProcessMemory>(
    code: &C,
    frameptr: *const F,
    frame: &F,
    process: &P,
) -> Result<Vec<LocalVariable>, Error> {
    let local_count = code.nlocals() as usize;
    let argcount = code.argcount() as usize;
    let varnames = process
        .copy_pointer(code.varnames())
        .context("Failed to get varnames from PyCodeObject")?;

    let ptr_size = std::mem::size_of::<*const i32>();
    let locals_addr = frameptr as usize + std::mem::size_of_val(frame) - ptr_size;

    let mut ret = Vec::new();

    for i in 0..local_count {
        let nameptr: *const C::StringObject =
            process.copy_struct(varnames.address(code.varnames() as usize, i))?;

        let name = copy_string(nameptr, process).context("Failed to copy local variable name")?;
        let addr: usize = process.copy_struct(locals_addr + i * ptr_size)?;

        // hack: handle things like None, True, False, small integer constants etc on Python 3.14
        let addr = if addr & 1 == 1 { addr - 1 } else { addr };

        if addr == 0 {
            continue;
        }
        ret.push(LocalVariable {
            name,
            addr,
            arg: i < argcount,
            repr: None,
        });
    }
    Ok(ret)
}

/// The head of the interpreter's thread list and the address of the thread state holding the
/// GIL (0: none), in one read (gpufeed patch, PATCHES.md). [`get_gil_threadid`] reads the
/// holder's whole thread state for its id, which a caller walking the thread list can instead
/// compare by address. With a cache, the same read brings the thread state at the head's last
/// address (the head changes only when a thread starts or ends): when the head is still there,
/// the walk takes it with [`FrameCache::take_read_ahead`].
pub fn threads_head_and_gil_holder<I: InterpreterState, P: ProcessMemory + ReadParts>(
    interpreter_address: usize,
    threadstate_address: usize,
    process: &P,
    cache: Option<&mut FrameCache>,
) -> Result<(*const I::ThreadState, usize), Error> {
    type GilState = crate::python_bindings::v3_13_0::_gil_runtime_state;
    let head_addr = I::threadstate_ptr_ptr(interpreter_address) as usize;
    let mut head = [0u8; std::mem::size_of::<usize>()];
    // The GIL's state (3.12+: identical in 3.12 to 3.15), or the current thread state pointer.
    let mut gil = [0u8; std::mem::size_of::<GilState>()];
    let gil_len = if I::HAS_GIL_RUNTIME_STATE {
        gil.len()
    } else {
        std::mem::size_of::<usize>()
    };
    let size = std::mem::size_of::<I::ThreadState>();
    let mut cache = cache;
    let guess = cache.as_ref().map_or(0, |c| c.last_head);
    let head_tid = cache.as_ref().map_or(0, |c| c.head_tid);
    let complete = cache
        .as_ref()
        .is_some_and(|c| c.chain_tids.len() == c.chain.len());
    type Taken = (Vec<u8>, Vec<usize>, Vec<u8>, Vec<u64>, Vec<u64>, Vec<NotedWindow>, Vec<PreRead>);
    let (mut first, chain, mut states, chain_tids, plan, windows, mut pre): Taken =
        match cache.as_mut() {
            Some(c) => (
                std::mem::take(&mut c.next_thread),
                std::mem::take(&mut c.chain),
                std::mem::take(&mut c.chain_states),
                std::mem::take(&mut c.chain_tids),
                std::mem::take(&mut c.plan_skip),
                std::mem::take(&mut c.windows),
                std::mem::take(&mut c.pre),
            ),
            None => Default::default(),
        };
    for p in &mut pre {
        p.ok = false;
        p.slot_ok = false;
    }
    // gpufeed patch 11: a thread the caller passes over is left out of the read, when the
    // last walk is known whole (its OS ids with it) -- the walk steps over it by the last
    // walk's next address while the head is where it was.
    let complete = complete && chain.len() < FrameCache::MAX_CHAIN;
    let passed_over = |tid: u64| complete && tid != 0 && plan.contains(&tid);
    const NOT_READ: usize = usize::MAX;
    let mut first_at = NOT_READ;
    // Whether the head's own thread state was left out (passed over), not merely not read.
    let mut head_left_out = false;
    let mut chain_at: Vec<usize> = Vec::new();
    let mut pre_at: Vec<(usize, usize)> = Vec::new();
    // During initialization (no threadstate address yet) nobody holds the GIL.
    let whole = if threadstate_address == 0 {
        process.read_parts(&mut [(head_addr, &mut head[..])]) + 1
    } else if guess != 0 {
        first.resize(size, 0);
        // gpufeed patch 9: the other thread states of the last walk in the same read.
        states.resize(size * chain.len(), 0);
        let head_read = !passed_over(head_tid);
        head_left_out = !head_read;
        let chain_read: Vec<bool> = (0..chain.len())
            .map(|i| !passed_over(chain_tids.get(i).copied().unwrap_or(0)))
            .collect();
        // gpufeed patch 11: the frame pointer and data stack of each thread read, where its
        // last read took them (to the end of that page and a little more, for frames pushed
        // since; never past its chunk).
        let mut n_pre = 0;
        let mut total = 0;
        for w in &windows {
            let read = (w.thread == guess && head_read)
                || chain
                    .iter()
                    .zip(&chain_read)
                    .any(|(&a, &r)| r && a == w.thread);
            let end = w
                .limit
                .min((w.end + PRE_READ_SLACK).next_multiple_of(PRE_READ_PAGE))
                .max(w.end);
            let len = end - w.base;
            if !read || total + len > PRE_READ_MAX {
                continue;
            }
            total += len;
            if pre.len() <= n_pre {
                pre.push(PreRead::default());
            }
            let p = &mut pre[n_pre];
            p.thread = w.thread;
            p.base = w.base;
            p.buf.resize(len, 0);
            // The page(s) of its recent frame-pointer places (one thread's C stack, mapped
            // whole between them), or only the latest's page when they lie far apart.
            let (lo, hi) = if w.slots[0] == 0 {
                (0, 0)
            } else {
                let placed = w.slots.iter().filter(|&&a| a != 0);
                let lo = placed.clone().min().copied().unwrap_or(0) / PRE_READ_PAGE;
                let hi = placed.max().copied().unwrap_or(0) / PRE_READ_PAGE + 1;
                if hi - lo <= 2 {
                    (lo * PRE_READ_PAGE, hi * PRE_READ_PAGE)
                } else {
                    let at = w.slots[0] / PRE_READ_PAGE * PRE_READ_PAGE;
                    (at, at + PRE_READ_PAGE)
                }
            };
            p.slot_base = lo;
            p.slot_buf.resize(hi - lo, 0);
            n_pre += 1;
        }
        pre.truncate(n_pre);
        let mut parts: Vec<(usize, &mut [u8])> =
            Vec::with_capacity(3 + chain.len() + 2 * pre.len());
        parts.push((head_addr, &mut head[..]));
        parts.push((threadstate_address, &mut gil[..gil_len]));
        if head_read {
            first_at = parts.len();
            parts.push((guess, &mut first[..]));
        }
        for ((addr, buf), read) in chain
            .iter()
            .zip(states.chunks_mut(size.max(1)))
            .zip(&chain_read)
        {
            if *read {
                chain_at.push(parts.len());
                parts.push((*addr, buf));
            } else {
                chain_at.push(NOT_READ);
            }
        }
        for p in pre.iter_mut() {
            let PreRead {
                slot_base,
                slot_buf,
                base,
                buf,
                ..
            } = p;
            let slot_at = if *slot_base != 0 {
                parts.push((*slot_base, &mut slot_buf[..]));
                parts.len() - 1
            } else {
                NOT_READ
            };
            parts.push((*base, &mut buf[..]));
            pre_at.push((slot_at, parts.len() - 1));
        }
        process.read_parts(&mut parts)
    } else {
        process.read_parts(&mut [
            (head_addr, &mut head[..]),
            (threadstate_address, &mut gil[..gil_len]),
        ])
    };
    for (p, &(slot_at, buf_at)) in pre.iter_mut().zip(&pre_at) {
        p.slot_ok = slot_at != NOT_READ && slot_at < whole;
        p.ok = buf_at < whole;
    }
    if let Some(c) = cache {
        let head = usize::from_ne_bytes(head);
        let same = head == guess && guess != 0;
        c.next_thread = first;
        c.next_thread_addr = if same && first_at < whole { guess } else { 0 };
        c.next_from_head = true;
        c.last_head = if whole >= 1 { head } else { 0 };
        c.chain_ready.clear();
        c.left_out.clear();
        if same {
            c.chain_ready.extend(
                chain
                    .iter()
                    .zip(&chain_at)
                    .map(|(&a, &at)| if at < whole { a } else { 0 }),
            );
            // gpufeed patch 11: the thread states left out, with where the walk goes on.
            if head_left_out {
                c.left_out
                    .push((guess, head_tid, chain.first().copied().unwrap_or(0)));
            }
            for (i, (&a, &at)) in chain.iter().zip(&chain_at).enumerate() {
                if at == NOT_READ {
                    let next = chain.get(i + 1).copied().unwrap_or(0);
                    c.left_out.push((a, chain_tids[i], next));
                }
            }
            c.stats.threads_left_out += c.left_out.len() as u64;
        }
        c.chain = chain;
        c.chain_states = states;
        c.chain_tids = chain_tids;
        c.plan_skip = plan;
        c.plan_skip.clear();
        c.windows = windows;
        c.pre = pre;
    }
    if whole < 1 {
        return Err(format_err!("Failed to copy PyThreadState head pointer"));
    }
    if whole < 2 {
        return Err(format_err!("failed to get gil_thread_id"));
    }
    let head = usize::from_ne_bytes(head) as *const I::ThreadState;
    let holder = if threadstate_address == 0 {
        0
    } else if I::HAS_GIL_RUNTIME_STATE {
        // SAFETY: a plain C struct of integers and pointers, read from bytes of its size.
        let state: GilState = unsafe { std::ptr::read_unaligned(gil.as_ptr() as *const GilState) };
        if state.locked != 0 {
            state.last_holder as usize
        } else {
            0
        }
    } else {
        let mut ptr = [0u8; std::mem::size_of::<usize>()];
        ptr.copy_from_slice(&gil[..std::mem::size_of::<usize>()]);
        usize::from_ne_bytes(ptr)
    };
    Ok((head, holder))
}

pub fn get_gil_threadid<I: InterpreterState, P: ProcessMemory>(
    threadstate_address: usize,
    process: &P,
) -> Result<u64, Error> {
    // happens during initialization when checking to see if we have a valid interpreter (before we've figured out the threadstate_address)
    if threadstate_address == 0 {
        return Ok(0);
    }

    let addr = if I::HAS_GIL_RUNTIME_STATE {
        // get the gilruntimestate - note that this struct is identical between 3.12/3.13/3.14
        let gil_state: crate::python_bindings::v3_13_0::_gil_runtime_state =
            process.copy_struct(threadstate_address)?;
        // check to see if the GIL is locked already
        if gil_state.locked != 0 {
            gil_state.last_holder as usize
        } else {
            0
        }
    } else {
        process.copy_struct::<usize>(threadstate_address)?
    };

    // if the addr is 0, no thread is currently holding the GIL
    let threadid = if addr != 0 {
        let threadstate: I::ThreadState = process.copy_struct(addr)?;
        threadstate.thread_id()
    } else {
        0
    };

    Ok(threadid)
}

impl ProcessInfo {
    pub fn to_frame(&self) -> Frame {
        Frame {
            name: format!("process {}:\"{}\"", self.pid, self.command_line),
            filename: String::from(""),
            module: None,
            short_filename: None,
            line: 0,
            locals: None,
            is_entry: true,
            is_shim_entry: true,
            code: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::python_bindings::v3_7_0::PyCodeObject;
    use crate::python_data_access::tests::to_byteobject;
    use remoteprocess::LocalProcess;

    #[test]
    fn test_get_line_number() {
        let mut lnotab = to_byteobject(&[0u8, 1, 10, 1, 8, 1, 4, 1]);
        let code = PyCodeObject {
            co_firstlineno: 3,
            co_lnotab: &mut lnotab.base.ob_base.ob_base,
            ..Default::default()
        };
        let lineno = get_line_number(&code, 30, &LocalProcess).unwrap();
        assert_eq!(lineno, 7);
    }

    // gpufeed patch (PATCHES.md): the frame cache, on CPython 3.7 structures built in this
    // process and read back through a ProcessMemory that counts its reads.
    mod frame_cache {
        use super::super::*;
        use crate::python_bindings::v3_7_0::{
            PyCodeObject, PyFrameObject, PyObject, PyThreadState,
        };
        use crate::python_data_access::tests::{
            to_asciiobject, to_byteobject, AllocatedPyASCIIObject, AllocatedPyByteObject,
        };
        use remoteprocess::LocalProcess;
        use std::cell::Cell;
        use std::time::{Duration, Instant};

        struct Counting {
            reads: Cell<usize>,
        }

        impl ProcessMemory for Counting {
            fn read(&self, addr: usize, buf: &mut [u8]) -> Result<(), remoteprocess::Error> {
                self.reads.set(self.reads.get() + 1);
                LocalProcess.read(addr, buf)
            }
        }

        impl ReadParts for Counting {
            fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
                // One call, as one process_vm_readv.
                self.reads.set(self.reads.get() + 1);
                read_parts_one_by_one(&LocalProcess, parts)
            }
        }

        #[allow(dead_code)] // the boxes keep what the raw pointers point at alive
        struct FakeCode {
            filename: Box<AllocatedPyASCIIObject>,
            name: Box<AllocatedPyASCIIObject>,
            lnotab: Box<AllocatedPyByteObject>,
            code: Box<PyCodeObject>,
        }

        fn fake_code(filename: &str, name: &str) -> FakeCode {
            let mut filename = Box::new(to_asciiobject(filename));
            let mut name = Box::new(to_asciiobject(name));
            let mut lnotab = Box::new(to_byteobject(&[0u8, 1, 10, 1, 8, 1, 4, 1]));
            let code = Box::new(PyCodeObject {
                co_firstlineno: 3,
                co_filename: &mut filename.base.ob_base as *mut PyObject,
                co_name: &mut name.base.ob_base as *mut PyObject,
                co_lnotab: &mut lnotab.base.ob_base.ob_base as *mut PyObject,
                ..Default::default()
            });
            FakeCode {
                filename,
                name,
                lnotab,
                code,
            }
        }

        /// Two frames (inner `step` at lasti 30 -> line 7, outer `main` at lasti 0 -> line 4)
        /// of two code objects, and a thread state pointing at the inner one.
        struct FakeThread {
            codes: Vec<FakeCode>,
            #[allow(dead_code)]
            frames: Vec<Box<PyFrameObject>>,
            thread: PyThreadState,
        }

        fn fake_thread() -> FakeThread {
            let mut codes = vec![fake_code("train.py", "main"), fake_code("train.py", "step")];
            let mut outer = Box::new(PyFrameObject {
                f_code: &mut *codes[0].code as *mut PyCodeObject,
                f_lasti: 0,
                ..Default::default()
            });
            let mut inner = Box::new(PyFrameObject {
                f_code: &mut *codes[1].code as *mut PyCodeObject,
                f_back: &mut *outer as *mut PyFrameObject,
                f_lasti: 30,
                ..Default::default()
            });
            let thread = PyThreadState {
                frame: &mut *inner as *mut PyFrameObject,
                thread_id: 1,
                ..Default::default()
            };
            FakeThread {
                codes,
                frames: vec![inner, outer],
                thread,
            }
        }

        fn sample(t: &FakeThread, cache: Option<&mut FrameCache>) -> (Vec<(String, i32)>, usize) {
            let mem = Counting {
                reads: Cell::new(0),
            };
            let trace =
                get_stack_trace_cached(&t.thread, &mem, false, LineNo::LastInstruction, cache, 0)
                    .unwrap();
            let frames = trace
                .frames
                .iter()
                .map(|f| (format!("{}:{}", f.filename, f.name), f.line))
                .collect();
            (frames, mem.reads.get())
        }

        fn expected() -> Vec<(String, i32)> {
            vec![
                ("train.py:step".to_string(), 7),
                ("train.py:main".to_string(), 4),
            ]
        }

        #[test]
        fn a_known_frame_costs_one_read() {
            let t = fake_thread();
            let (uncached, uncached_reads) = sample(&t, None);
            assert_eq!(uncached, expected());
            // frame, code, filename (2), name (2), line table (2): 8 per frame
            assert!(uncached_reads >= 12, "{uncached_reads} reads");

            let mut cache = FrameCache::default();
            let (first, first_reads) = sample(&t, Some(&mut cache));
            assert_eq!(first, expected());
            assert_eq!(
                first_reads, uncached_reads,
                "a cold cache reads what py-spy reads"
            );
            for _ in 0..3 {
                let (again, reads) = sample(&t, Some(&mut cache));
                assert_eq!(again, expected());
                assert_eq!(
                    reads, 2,
                    "one read per frame once the code objects are known"
                );
            }
            let stats = cache.stats();
            assert_eq!((stats.code_misses, stats.code_hits), (2, 6));
            assert_eq!((stats.line_misses, stats.line_hits), (2, 6));
            assert_eq!(cache.len(), (2, 2));
        }

        #[test]
        fn a_new_instruction_reads_the_code_object_but_not_its_line_table() {
            let mut t = fake_thread();
            let mut cache = FrameCache::default();
            sample(&t, Some(&mut cache));
            t.frames[0].f_lasti = 10; // the inner frame moved on
            let (frames, reads) = sample(&t, Some(&mut cache));
            assert_eq!(frames[0], ("train.py:step".to_string(), 5));
            assert_eq!(frames, sample(&t, None).0);
            assert_eq!(
                reads, 3,
                "two frames and the code object, the line table is kept"
            );
        }

        #[test]
        fn age_checks_each_code_object_with_one_read_and_clear_empties() {
            let t = fake_thread();
            let (_, cold) = sample(&t, None);
            let mut cache = FrameCache::default();
            sample(&t, Some(&mut cache));
            cache.expire(Instant::now());
            assert_eq!(
                sample(&t, Some(&mut cache)).1,
                2,
                "younger than MAX_AGE: kept"
            );
            cache.expire(Instant::now() + FrameCache::MAX_AGE);
            assert_eq!(cache.len(), (2, 2), "kept, to be checked");
            assert_eq!(
                sample(&t, Some(&mut cache)),
                (expected(), 4),
                "two frames and each code object once"
            );
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 2), "checked");
            let stats = cache.stats();
            assert_eq!((stats.expiries, stats.code_checks, stats.clears), (1, 2, 0));
            cache.clear();
            assert!(cache.is_empty());
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), cold));
            assert_eq!(cache.stats().clears, 1);
        }

        #[test]
        fn a_reused_address_is_stale_until_the_cache_is_checked() {
            let mut t = fake_thread();
            let mut cache = FrameCache::default();
            sample(&t, Some(&mut cache));
            // Another code object at the same address: a new name.
            let mut other = Box::new(to_asciiobject("evaluate"));
            t.codes[1].code.co_name = &mut other.base.ob_base as *mut PyObject;
            assert_eq!(sample(&t, None).0[0].0, "train.py:evaluate");
            assert_eq!(sample(&t, Some(&mut cache)).0[0].0, "train.py:step");
            cache.expire(Instant::now() + FrameCache::MAX_AGE);
            assert_eq!(sample(&t, Some(&mut cache)).0[0].0, "train.py:evaluate");
            // A new first line, or a new line table, is another code object too.
            t.codes[1].code.co_firstlineno = 30;
            cache.expire(Instant::now() + FrameCache::MAX_AGE * 2);
            let (frames, _) = sample(&t, Some(&mut cache));
            assert_eq!(frames, sample(&t, None).0);
            assert_eq!(frames[0].1, 34, "its line from the new first line");
            assert_eq!(
                cache.stats().code_checks,
                2,
                "only `main` was unchanged, at both checks"
            );
        }

        /// gpufeed patch 13: with `frame_names` off, what the frames carry (serial, line) and
        /// the names given with the serials.
        fn sample_lean(t: &FakeThread, cache: &mut FrameCache) -> Vec<(u64, String, i32)> {
            let trace = get_stack_trace_cached(
                &t.thread,
                &LocalProcess,
                false,
                LineNo::LastInstruction,
                Some(cache),
                0,
            )
            .unwrap();
            trace
                .frames
                .iter()
                .map(|f| (f.code, format!("{}{}", f.filename, f.name), f.line))
                .collect()
        }

        #[test]
        fn lean_frames_carry_their_code_serial_and_the_names_come_once() {
            let mut t = fake_thread();
            let mut cache = FrameCache::default();
            cache.frame_names = false;
            let first = sample_lean(&t, &mut cache);
            let mut codes = Vec::new();
            cache.take_new_codes(&mut codes);
            let (step, main) = (first[0].0, first[1].0);
            assert!(step != 0 && main != 0 && step != main);
            assert_eq!(
                first,
                vec![(step, String::new(), 7), (main, String::new(), 4)],
                "no names in the frames, the same lines"
            );
            assert_eq!(
                codes,
                vec![
                    (step, "step".to_string(), "train.py".to_string()),
                    (main, "main".to_string(), "train.py".to_string())
                ]
            );
            assert_eq!(sample_lean(&t, &mut cache), first);
            cache.take_new_codes(&mut codes);
            assert_eq!(codes.len(), 2, "known code objects are not given again");
            // A new code object at a known address (seen at the check): a new serial, its
            // names given; the unchanged one keeps its serial.
            let mut other = Box::new(to_asciiobject("wait"));
            let mut file = Box::new(to_asciiobject("/usr/lib/python3.12/threading.py"));
            t.codes[1].code.co_name = &mut other.base.ob_base as *mut PyObject;
            t.codes[1].code.co_filename = &mut file.base.ob_base as *mut PyObject;
            cache.expire(Instant::now() + FrameCache::MAX_AGE);
            let again = sample_lean(&t, &mut cache);
            assert!(again[0].0 > main, "a serial never given before");
            assert_eq!(again[1].0, main);
            codes.clear();
            cache.take_new_codes(&mut codes);
            assert_eq!(codes.len(), 1);
            assert_eq!(codes[0].1, "wait");
            assert!(
                cache.idle_code(again[0].0),
                "py-spy's idle heuristic still applies"
            );
            assert!(!cache.idle_code(main));
            // Another cache (a spy opened again) never gives the same serials.
            let mut other_cache = FrameCache::default();
            other_cache.frame_names = false;
            let fresh = sample_lean(&t, &mut other_cache);
            assert!(fresh.iter().all(|f| f.0 > again[0].0));
        }

        #[test]
        fn the_caps_bound_its_size() {
            let t = fake_thread();
            let (_, cold) = sample(&t, None);
            // One code object at most: the two frames evict each other, every sample is cold.
            let mut cache = FrameCache::new(Duration::from_secs(60), 1, 100);
            for _ in 0..3 {
                assert_eq!(sample(&t, Some(&mut cache)), (expected(), cold));
                assert!(cache.len().0 <= 1);
            }
            assert!(cache.stats().clears >= 3);
            // Room for the codes but one line: the line entries evict each other (and the
            // codes with them).
            let mut cache = FrameCache::new(Duration::from_secs(60), 100, 1);
            for _ in 0..3 {
                assert_eq!(sample(&t, Some(&mut cache)).0, expected());
                assert!(cache.len().1 <= 1);
            }
        }
    }

    // gpufeed patch (PATCHES.md): several ranges in one process_vm_readv.
    #[test]
    fn read_parts_reads_each_part_and_stops_at_the_first_that_fails() {
        let a = [1u8, 2, 3, 4];
        let b = [9u8; 100];
        let process = remoteprocess::Process::new(std::process::id() as Pid).unwrap();
        let (mut x, mut y, mut z) = ([0u8; 4], [0u8; 100], [0u8; 8]);
        let got = process.read_parts(&mut [
            (a.as_ptr() as usize, &mut x[..]),
            (b.as_ptr() as usize, &mut y[..]),
        ]);
        assert_eq!((got, x, y), (2, a, b));
        // An unmapped range (the first page) stops the read there.
        let (mut x, mut y) = ([0u8; 4], [0u8; 100]);
        let got = process.read_parts(&mut [
            (a.as_ptr() as usize, &mut x[..]),
            (8, &mut z[..]),
            (b.as_ptr() as usize, &mut y[..]),
        ]);
        assert_eq!((got, x), (1, a));
        let (mut x, mut z) = ([0u8; 4], [0u8; 8]);
        assert_eq!(
            process.read_parts(&mut [(8, &mut z[..]), (a.as_ptr() as usize, &mut x[..])]),
            0
        );
        assert_eq!(
            LocalProcess.read_parts(&mut [(a.as_ptr() as usize, &mut x[..])]),
            1
        );
        assert_eq!(x, a);
    }

    // gpufeed patch (PATCHES.md): the data-stack read, the frame pointer in the same read and
    // the next thread state read ahead, on CPython 3.11 structures built in this process.
    mod data_stack {
        use super::super::*;
        use crate::python_bindings::v3_11_0::{
            PyCodeObject, PyObject, PyThreadState, _PyCFrame, _PyInterpreterFrame,
        };
        use crate::python_data_access::tests::{to_asciiobject, AllocatedPyASCIIObject};
        use remoteprocess::LocalProcess;
        use std::cell::Cell;

        struct Counting {
            reads: Cell<usize>,
        }

        impl ProcessMemory for Counting {
            fn read(&self, addr: usize, buf: &mut [u8]) -> Result<(), remoteprocess::Error> {
                self.reads.set(self.reads.get() + 1);
                LocalProcess.read(addr, buf)
            }
        }

        impl ReadParts for Counting {
            fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
                self.reads.set(self.reads.get() + 1);
                read_parts_one_by_one(&LocalProcess, parts)
            }
        }

        #[allow(dead_code)] // the boxes keep what the raw pointers point at alive
        struct FakeCode {
            filename: Box<AllocatedPyASCIIObject>,
            name: Box<AllocatedPyASCIIObject>,
            code: Box<PyCodeObject>,
        }

        fn fake_code(filename: &str, name: &str, line: i32) -> FakeCode {
            let mut filename = Box::new(to_asciiobject(filename));
            let mut name = Box::new(to_asciiobject(name));
            let name_ptr = &mut name.base.ob_base as *mut _ as *mut PyObject;
            let code = Box::new(PyCodeObject {
                co_firstlineno: line,
                co_filename: &mut filename.base.ob_base as *mut _ as *mut PyObject,
                co_name: name_ptr,
                co_qualname: name_ptr,
                ..Default::default()
            });
            FakeCode {
                filename,
                name,
                code,
            }
        }

        const FRAME: usize = std::mem::size_of::<_PyInterpreterFrame>();
        /// Where the frames start in a chunk (after previous, size, top) and each one's room.
        const HEADER: usize = 3 * 8;
        const SLOT: usize = FRAME + 16;

        /// A thread whose frames `main` (outer) and `step` (inner) are in a data-stack chunk,
        /// or `main` outside it (`outer_outside`: a generator's frame, an older chunk), and a
        /// second thread state after it in the list.
        #[allow(dead_code)]
        struct FakeThread {
            codes: Vec<FakeCode>,
            chunk: Vec<u64>,
            outside: Box<_PyInterpreterFrame>,
            cframe: Box<_PyCFrame>,
            next: Box<PyThreadState>,
            thread: PyThreadState,
        }

        fn fake_thread(outer_outside: bool) -> FakeThread {
            let mut codes = vec![fake_code("train.py", "main", 3), fake_code("train.py", "step", 9)];
            let mut chunk = vec![0u64; 512];
            let base = chunk.as_mut_ptr() as usize;
            let mut outside = Box::new(_PyInterpreterFrame {
                f_code: &mut *codes[0].code as *mut PyCodeObject,
                ..Default::default()
            });
            let outer_addr = if outer_outside {
                &mut *outside as *mut _PyInterpreterFrame as usize
            } else {
                base + HEADER
            };
            let inner_addr = base + HEADER + SLOT;
            let outer = _PyInterpreterFrame {
                f_code: &mut *codes[0].code as *mut PyCodeObject,
                ..Default::default()
            };
            let inner = _PyInterpreterFrame {
                f_code: &mut *codes[1].code as *mut PyCodeObject,
                previous: outer_addr as *mut _PyInterpreterFrame,
                ..Default::default()
            };
            // SAFETY: both slots lie inside `chunk` (4 KiB).
            unsafe {
                if !outer_outside {
                    std::ptr::write_unaligned(outer_addr as *mut _PyInterpreterFrame, outer);
                }
                std::ptr::write_unaligned(inner_addr as *mut _PyInterpreterFrame, inner);
            }
            let cframe = Box::new(_PyCFrame {
                current_frame: inner_addr as *mut _PyInterpreterFrame,
                ..Default::default()
            });
            let mut next = Box::new(PyThreadState {
                thread_id: 2,
                ..Default::default()
            });
            let thread = PyThreadState {
                thread_id: 1,
                native_thread_id: 11,
                cframe: &*cframe as *const _PyCFrame as *mut _PyCFrame,
                datastack_chunk: base as *mut _,
                datastack_top: (inner_addr + SLOT) as *mut _,
                datastack_limit: (base + 512 * 8) as *mut _,
                next: &mut *next as *mut PyThreadState,
                ..Default::default()
            };
            FakeThread {
                codes,
                chunk,
                outside,
                cframe,
                next,
                thread,
            }
        }

        fn sample(t: &FakeThread, cache: Option<&mut FrameCache>) -> (Vec<(String, i32)>, usize) {
            let mem = Counting {
                reads: Cell::new(0),
            };
            let trace =
                get_stack_trace_cached(&t.thread, &mem, false, LineNo::First, cache, 0).unwrap();
            let frames = trace
                .frames
                .iter()
                .map(|f| (format!("{}:{}", f.filename, f.name), f.line))
                .collect();
            (frames, mem.reads.get())
        }

        fn expected() -> Vec<(String, i32)> {
            vec![
                ("train.py:step".to_string(), 9),
                ("train.py:main".to_string(), 3),
            ]
        }

        #[test]
        fn a_known_stack_costs_one_read_for_all_its_frames() {
            let t = fake_thread(false);
            let (uncached, uncached_reads) = sample(&t, None);
            assert_eq!(uncached, expected());
            // frame pointer, 2 frames, per code: code, filename (2), qualname (2)
            assert_eq!(uncached_reads, 13);
            let mut cache = FrameCache::default();
            let (first, first_reads) = sample(&t, Some(&mut cache));
            assert_eq!(first, expected());
            assert_eq!(first_reads, 11, "one read for the stack, then the two code objects");
            for _ in 0..3 {
                assert_eq!(sample(&t, Some(&mut cache)), (expected(), 1));
            }
            let stats = cache.stats();
            assert_eq!((stats.stack_reads, stats.stack_frames), (4, 8));
        }

        /// gpufeed patch 11: once a walk is known, a sample is one read: the head, the thread
        /// states of the threads read and their frame pointers and data stacks; a thread the
        /// caller passes over is left out of it (stepped over by the last walk's next address)
        /// while the head is where it was.
        #[test]
        fn a_known_walk_is_one_read_and_a_thread_passed_over_is_left_out() {
            use crate::python_bindings::v3_11_0::PyInterpreterState;
            let t = Box::new(fake_thread(false));
            let first_addr = &t.thread as *const PyThreadState as usize;
            let second_addr = &*t.next as *const PyThreadState as usize;
            // SAFETY: the test owns the second thread state; nothing else reads it now.
            unsafe { (*(second_addr as *mut PyThreadState)).native_thread_id = 22 };
            let mut interp = Box::<PyInterpreterState>::default();
            interp.threads.head = first_addr as *mut PyThreadState;
            let current: usize = 0;
            let mem = Counting {
                reads: Cell::new(0),
            };
            let mut cache = FrameCache::default();
            // One sample as python_spy's walk takes it, the second thread passed over when
            // `skip`: (frames of the first thread, reads, the second left out).
            let walk = |cache: &mut FrameCache, interp: &PyInterpreterState, skip: &[u64]| {
                mem.reads.set(0);
                cache.forget_read_ahead();
                cache.plan_skip(skip);
                cache.begin_walk();
                threads_head_and_gil_holder::<PyInterpreterState, _>(
                    interp as *const _ as usize,
                    &current as *const usize as usize,
                    &mem,
                    Some(cache),
                )
                .unwrap();
                let head = interp.threads.head as usize;
                let thread = cache
                    .take_read_ahead::<PyThreadState>(head)
                    .unwrap_or_else(|| LocalProcess.copy_struct(head).unwrap());
                let trace = get_stack_trace_cached(
                    &thread,
                    &mem,
                    false,
                    LineNo::First,
                    Some(cache),
                    head,
                )
                .unwrap();
                let left = cache.left_out(thread.next as usize);
                if left.is_none() {
                    // Read (its stack is not: it has no frames to walk in this fake).
                    let next = cache.take_read_ahead::<PyThreadState>(thread.next as usize);
                    assert!(next.is_none_or(|n| n.native_thread_id == 22));
                } else {
                    cache.keep_window(thread.next as usize);
                }
                cache.note_chain(&[second_addr]);
                cache.note_tids(11, &[22]);
                cache.end_walk();
                let frames: Vec<(String, i32)> = trace
                    .frames
                    .iter()
                    .map(|f| (format!("{}:{}", f.filename, f.name), f.line))
                    .collect();
                (frames, mem.reads.get(), left)
            };
            let (frames, _, left) = walk(&mut cache, &interp, &[]);
            assert_eq!((frames, left), (expected(), None), "the first walk learns");
            let (frames, reads, left) = walk(&mut cache, &interp, &[]);
            assert_eq!((frames, reads, left), (expected(), 1, None), "one read in all");
            let (frames, reads, left) = walk(&mut cache, &interp, &[22]);
            assert_eq!(frames, expected());
            assert_eq!(reads, 1);
            assert_eq!(left, Some((22, 0)), "the second thread state was not read");
            let stats = cache.stats();
            assert_eq!((stats.stacks_with_head, stats.threads_left_out), (2, 1));
            // The head moved (a thread started): nothing is left out, the stack is read apart.
            interp.threads.head = second_addr as *mut PyThreadState;
            cache.forget_read_ahead();
            cache.plan_skip(&[22]);
            threads_head_and_gil_holder::<PyInterpreterState, _>(
                &*interp as *const _ as usize,
                &current as *const usize as usize,
                &mem,
                Some(&mut cache),
            )
            .unwrap();
            assert_eq!(cache.left_out(second_addr), None);
            assert!(cache.take_read_ahead::<PyThreadState>(first_addr).is_none());
            // Interpreter starting (no thread state address yet): nothing is left out, even
            // a thread the caller passes over, and the head stays where it is.
            interp.threads.head = first_addr as *mut PyThreadState;
            cache.forget_read_ahead();
            cache.note_chain(&[second_addr]);
            cache.note_tids(11, &[22]);
            for _ in 0..2 {
                cache.forget_read_ahead();
                cache.plan_skip(&[11, 22]);
                threads_head_and_gil_holder::<PyInterpreterState, _>(
                    &*interp as *const _ as usize,
                    0,
                    &mem,
                    Some(&mut cache),
                )
                .unwrap();
                assert_eq!(cache.left_out(first_addr), None);
                assert_eq!(cache.left_out(second_addr), None);
            }
            drop(t);
        }

        #[test]
        fn a_frame_outside_the_chunk_is_read_on_its_own() {
            let t = fake_thread(true);
            let mut cache = FrameCache::default();
            assert_eq!(sample(&t, None).0, expected());
            sample(&t, Some(&mut cache));
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 2));
            assert_eq!(cache.stats().stack_frames, 2, "the inner frame, twice");
        }

        #[test]
        fn a_chunk_that_looks_wrong_is_not_read() {
            let mut t = fake_thread(false);
            let mut cache = FrameCache::default();
            sample(&t, Some(&mut cache));
            // top below the chunk: read frame by frame, as without the patch
            t.thread.datastack_top = (t.thread.datastack_chunk as usize - 8) as *mut _;
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 3));
            // top past the limit, or no chunk at all
            t.thread.datastack_top = (t.thread.datastack_limit as usize + 8) as *mut _;
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 3));
            t.thread.datastack_chunk = std::ptr::null_mut();
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 3));
            assert_eq!(cache.stats().stack_reads, 1);
        }

        #[test]
        fn a_frame_pushed_past_the_top_read_is_read_on_its_own() {
            let mut t = fake_thread(false);
            let mut cache = FrameCache::default();
            sample(&t, Some(&mut cache));
            // top as read before `step` was pushed: the copy ends one frame's size past it,
            // which covers the frame's fixed part only when it starts at the old top.
            t.thread.datastack_top = (t.chunk.as_ptr() as usize + HEADER + SLOT - 8) as *mut _;
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), 2));
        }

        #[test]
        fn the_next_thread_state_is_read_ahead_once() {
            let t = fake_thread(false);
            let mut cache = FrameCache::default();
            let next_addr = t.thread.next as usize;
            sample(&t, Some(&mut cache));
            assert!(cache.take_read_ahead::<PyThreadState>(next_addr + 8).is_none());
            sample(&t, Some(&mut cache));
            let next: PyThreadState = cache.take_read_ahead(next_addr).unwrap();
            assert_eq!(next.thread_id, 2);
            assert!(cache.take_read_ahead::<PyThreadState>(next_addr).is_none(), "once");
            sample(&t, Some(&mut cache));
            cache.forget_read_ahead();
            assert!(cache.take_read_ahead::<PyThreadState>(next_addr).is_none());
            assert_eq!(cache.stats().threads_read_ahead, 1);
            // Without a cache nothing is read ahead.
            assert_eq!(sample(&t, None).1, 13);
        }
    }

    // gpufeed patch (PATCHES.md): the thread list's head and the GIL holder's address in one
    // read, before 3.12 (a pointer to the current thread state) and from 3.12 (the GIL state).
    #[test]
    fn threads_head_and_gil_holder_in_one_read() {
        use crate::python_bindings::{v3_11_0, v3_12_0, v3_13_0};
        use std::cell::Cell;
        struct Counting(Cell<usize>);
        impl ProcessMemory for Counting {
            fn read(&self, addr: usize, buf: &mut [u8]) -> Result<(), remoteprocess::Error> {
                self.0.set(self.0.get() + 1);
                LocalProcess.read(addr, buf)
            }
        }
        impl ReadParts for Counting {
            fn read_parts(&self, parts: &mut [(usize, &mut [u8])]) -> usize {
                self.0.set(self.0.get() + 1);
                read_parts_one_by_one(&LocalProcess, parts)
            }
        }
        let mem = Counting(Cell::new(0));
        let mut interp = Box::<v3_11_0::PyInterpreterState>::default();
        interp.threads.head = 0x1000 as *mut _;
        let current: usize = 0x2000;
        let (head, holder) = threads_head_and_gil_holder::<v3_11_0::PyInterpreterState, _>(
            &*interp as *const _ as usize,
            &current as *const usize as usize,
            &mem,
            None,
        )
        .unwrap();
        assert_eq!((head as usize, holder, mem.0.get()), (0x1000, 0x2000, 1));
        // No thread state address yet (initialization): nobody holds it.
        let (_, holder) = threads_head_and_gil_holder::<v3_11_0::PyInterpreterState, _>(
            &*interp as *const _ as usize,
            0,
            &mem,
            None,
        )
        .unwrap();
        assert_eq!(holder, 0);

        let mut interp = Box::<v3_12_0::PyInterpreterState>::default();
        interp.threads.head = 0x3000 as *mut _;
        let mut gil = Box::<v3_13_0::_gil_runtime_state>::default();
        gil.last_holder = 0x4000 as *mut _;
        gil.locked = 1;
        let at = |gil: &v3_13_0::_gil_runtime_state| {
            threads_head_and_gil_holder::<v3_12_0::PyInterpreterState, _>(
                &*interp as *const _ as usize,
                gil as *const _ as usize,
                &LocalProcess,
                None,
            )
            .unwrap()
        };
        assert_eq!(at(&gil).1, 0x4000);
        gil.locked = 0;
        assert_eq!(at(&gil), (0x3000 as *const _, 0), "not locked: nobody holds it");
        // A head that cannot be read is an error, as upstream.
        let process = remoteprocess::Process::new(std::process::id() as Pid).unwrap();
        assert_eq!(at(&gil).0, threads_head_and_gil_holder::<v3_12_0::PyInterpreterState, _>(
            &*interp as *const _ as usize,
            &*gil as *const _ as usize,
            &process,
            None,
        )
        .unwrap().0);
        assert!(threads_head_and_gil_holder::<v3_12_0::PyInterpreterState, _>(
            8,
            &*gil as *const _ as usize,
            &process,
            None
        )
        .is_err());
    }

    // gpufeed patch (PATCHES.md): the first thread state read with the head, at the head's
    // last address.
    #[test]
    fn the_first_thread_state_comes_with_the_head_while_the_head_stays() {
        use crate::python_bindings::v3_11_0::{PyInterpreterState, PyThreadState};
        let mut first = Box::new(PyThreadState {
            thread_id: 7,
            ..Default::default()
        });
        let mut other = Box::new(PyThreadState {
            thread_id: 8,
            ..Default::default()
        });
        let mut interp = Box::<PyInterpreterState>::default();
        interp.threads.head = &mut *first as *mut PyThreadState;
        let current: usize = 0;
        let mut cache = FrameCache::default();
        let sample = |interp: &PyInterpreterState, cache: &mut FrameCache| {
            let (head, _) = threads_head_and_gil_holder::<PyInterpreterState, _>(
                interp as *const _ as usize,
                &current as *const usize as usize,
                &LocalProcess,
                Some(cache),
            )
            .unwrap();
            cache
                .take_read_ahead::<PyThreadState>(head as usize)
                .map(|t| t.thread_id)
        };
        assert_eq!(sample(&interp, &mut cache), None, "no head known yet");
        assert_eq!(sample(&interp, &mut cache), Some(7));
        assert_eq!(sample(&interp, &mut cache), Some(7));
        // A new thread at the head: read by the walk, then known.
        interp.threads.head = &mut *other as *mut PyThreadState;
        assert_eq!(sample(&interp, &mut cache), None);
        assert_eq!(sample(&interp, &mut cache), Some(8));
        assert_eq!(cache.stats().threads_read_ahead, 3);
    }

    /// gpufeed patch 9: the thread states after the head's at the last walk come in the same
    /// read, each taken once, and only while the head is where it was.
    #[test]
    fn the_last_walks_thread_states_come_with_the_head() {
        use crate::python_bindings::v3_11_0::{PyInterpreterState, PyThreadState};
        let mut third = Box::new(PyThreadState {
            thread_id: 9,
            ..Default::default()
        });
        let mut second = Box::new(PyThreadState {
            thread_id: 8,
            next: &mut *third as *mut PyThreadState,
            ..Default::default()
        });
        let first = Box::new(PyThreadState {
            thread_id: 7,
            next: &mut *second as *mut PyThreadState,
            ..Default::default()
        });
        let (a1, a2, a3) = (
            &*first as *const PyThreadState as usize,
            &*second as *const PyThreadState as usize,
            &*third as *const PyThreadState as usize,
        );
        let mut interp = Box::<PyInterpreterState>::default();
        interp.threads.head = a1 as *mut PyThreadState;
        let current: usize = 0;
        let mut cache = FrameCache::default();
        let head_read = |interp: &PyInterpreterState, cache: &mut FrameCache| {
            cache.forget_read_ahead();
            threads_head_and_gil_holder::<PyInterpreterState, _>(
                interp as *const _ as usize,
                &current as *const usize as usize,
                &LocalProcess,
                Some(cache),
            )
            .unwrap();
        };
        head_read(&interp, &mut cache);
        cache.note_chain(&[a2, a3]);
        assert!(cache.take_read_ahead::<PyThreadState>(a2).is_none(), "not read yet");
        second.thread_id = 80;
        head_read(&interp, &mut cache);
        assert_eq!(cache.take_read_ahead::<PyThreadState>(a1).map(|t| t.thread_id), Some(7));
        // Any order, each once, as they are now.
        let t3 = cache.take_read_ahead::<PyThreadState>(a3).unwrap();
        assert_eq!(t3.thread_id, 9);
        let t2 = cache.take_read_ahead::<PyThreadState>(a2).unwrap();
        assert_eq!((t2.thread_id, t2.next as usize), (80, a3));
        assert!(cache.take_read_ahead::<PyThreadState>(a2).is_none(), "once");
        // A new walk forgets what was not taken.
        head_read(&interp, &mut cache);
        cache.forget_read_ahead();
        assert!(cache.take_read_ahead::<PyThreadState>(a3).is_none());
        // The head moved: the chain read with it is not offered.
        interp.threads.head = a2 as *mut PyThreadState;
        head_read(&interp, &mut cache);
        assert!(cache.take_read_ahead::<PyThreadState>(a3).is_none());
        assert!(cache.take_read_ahead::<PyThreadState>(a2).is_none());
        drop(first);
    }
}
