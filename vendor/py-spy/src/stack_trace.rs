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
    get_stack_trace_cached(thread, process, copy_locals, lineno, None)
}

/// What is kept of one code object (gpufeed patch, PATCHES.md).
#[derive(Debug, Clone)]
struct CodeEntry {
    filename: String,
    name: String,
    first_lineno: i32,
    /// The line table, read on the first line-number lookup that misses.
    line_table: Option<Vec<u8>>,
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
    /// Times the cache was emptied (age or size cap).
    pub clears: u64,
}

/// Per-process cache of what [`get_stack_trace_cached`] reads from code objects, keyed by the
/// code object's address (gpufeed patch, PATCHES.md).
///
/// The fields read (co_filename, co_name/co_qualname, co_firstlineno, the line table) never
/// change during a code object's life, but a freed code object's address can be reused by
/// another one: the cache is emptied when it is older than `max_age` (call [`FrameCache::expire`]
/// once per sample) and when it would grow past its caps, which also bounds its memory.
#[derive(Debug)]
pub struct FrameCache {
    codes: std::collections::HashMap<usize, CodeEntry>,
    lines: std::collections::HashMap<(usize, i32), i32>,
    max_age: std::time::Duration,
    max_codes: usize,
    max_lines: usize,
    filled_since: std::time::Instant,
    stats: FrameCacheStats,
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

    pub fn new(max_age: std::time::Duration, max_codes: usize, max_lines: usize) -> FrameCache {
        FrameCache {
            codes: std::collections::HashMap::new(),
            lines: std::collections::HashMap::new(),
            max_age,
            max_codes: max_codes.max(1),
            max_lines: max_lines.max(1),
            filled_since: std::time::Instant::now(),
            stats: FrameCacheStats::default(),
        }
    }

    /// Empties the cache if it is older than its maximum age at `now`.
    pub fn expire(&mut self, now: std::time::Instant) {
        if now.saturating_duration_since(self.filled_since) >= self.max_age {
            self.clear_at(now);
        }
    }

    /// Empties the cache.
    pub fn clear(&mut self) {
        self.clear_at(std::time::Instant::now());
    }

    fn clear_at(&mut self, now: std::time::Instant) {
        self.codes.clear();
        self.lines.clear();
        self.filled_since = now;
        self.stats.clears += 1;
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

    fn code(&mut self, addr: usize) -> Option<&CodeEntry> {
        match self.codes.get(&addr) {
            Some(entry) => {
                self.stats.code_hits += 1;
                Some(entry)
            }
            None => {
                self.stats.code_misses += 1;
                None
            }
        }
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

/// [`get_stack_trace`] with an optional [`FrameCache`] (gpufeed patch, PATCHES.md): with a
/// cache, a frame whose code object and (code, instruction) line are known costs one read.
/// The cache is not used when locals are copied (they need the code object).
pub fn get_stack_trace_cached<T, P>(
    thread: &T,
    process: &P,
    copy_locals: bool,
    lineno: LineNo,
    cache: Option<&mut FrameCache>,
) -> Result<StackTrace, Error>
where
    T: ThreadState,
    P: ProcessMemory,
{
    let mut cache = if copy_locals { None } else { cache };
    // TODO: just return frames here? everything else probably should be returned out of scope
    let mut frames = Vec::new();

    // python 3.11+ has an extra level of indirection to get the Frame from the threadstate
    let mut frame_address = thread.frame_address();
    if let Some(addr) = frame_address {
        frame_address = Some(process.copy_struct(addr)?);
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

        let frame = process
            .copy_pointer(frame_ptr)
            .context("Failed to copy PyFrameObject")?;

        if !frame.is_python_frame() {
            frame_ptr = frame.back();
            set_last_frame_as_shim_entry(&mut frames);
            continue;
        }

        let code_addr = frame.code() as usize;
        let known = cache
            .as_deref_mut()
            .and_then(|c| c.code(code_addr))
            .map(|e| (e.filename.clone(), e.name.clone(), e.first_lineno));

        let (filename, name, first_lineno, mut code) = match known {
            Some((filename, name, first_lineno)) => (filename, name, first_lineno, None),
            None => {
                let code = process
                    .copy_pointer(frame.code())
                    .context("Failed to copy PyCodeObject")?;

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
                let filename = filename?;
                let name = name?;
                if let Some(c) = cache.as_deref_mut() {
                    c.insert_code(
                        code_addr,
                        CodeEntry {
                            filename: filename.clone(),
                            name: name.clone(),
                            first_lineno: code.first_lineno(),
                            line_table: None,
                        },
                    );
                }
                (filename, name, code.first_lineno(), Some(code))
            }
        };

        // skip <shim> entries in python 3.13+
        // Unset file/function name in py3.13 means this is a shim.
        if filename.is_empty() || filename == "<shim>" {
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
                                    "Failed to get line number from {}.{}: {}",
                                    filename, name, e
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
        });

        frame_ptr = frame.back();
    }

    // First frame is always a shim
    set_last_frame_as_shim_entry(&mut frames);

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
                get_stack_trace_cached(&t.thread, &mem, false, LineNo::LastInstruction, cache)
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
        fn clear_and_age_empty_the_cache() {
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
            assert!(cache.is_empty());
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), cold));
            cache.clear();
            assert!(cache.is_empty());
            assert_eq!(sample(&t, Some(&mut cache)), (expected(), cold));
            assert_eq!(cache.stats().clears, 2);
        }

        #[test]
        fn a_reused_address_is_stale_until_the_cache_is_emptied() {
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
}
