"""``with gpufeed.profile() as p:``: records this very process (a notebook kernel, a script) with
``gpufeed record --pid``, then diagnoses the recording (docs/notebooks.md).

Inside the block the recorder reads this process's Python stacks (under Yama ptrace scope 1 the
process allows its own recorder with ``prctl(PR_SET_PTRACER)``, no root needed), takes step
markers from ``gpufeed.wrap`` and the framework hooks (``GPUFEED_STEP_SOCKET`` is set while the
block runs), and times every torch DataLoader batch as a step, as ``gpufeed run`` does. Afterwards
``p.verdict``, ``p.findings``, ``p.report`` (the JSON report as a dict), ``p.text``, ``p.html()``
and ``p.recording`` (the path) hold the result. Stdlib only; never raises into the block's own
code, and never leaves the recorder running.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from gpufeed_probe import ENV_VAR

PR_SET_PTRACER = 0x59616D61
_READY_TIMEOUT_S = 15.0
_STOP_TIMEOUT_S = 15.0
_DIAGNOSE_TIMEOUT_S = 120.0

# The recorder allowed to read this process, for DataLoader workers forked while it runs (each
# forked child allows it too: Yama's exception is per process, not inherited).
_ptracer = [0]
_fork_hook = [False]
# The profile running in this process now: nested ones are refused (one recorder at a time).
_active = [None]


class _interrupts_held(object):
    """Holds SIGINT (a notebook's Interrupt, Ctrl-C) off for the few statements inside, then
    delivers it: a recorder started and not yet noted, or noted and not yet stopped, is never
    left behind by an interrupt between the two. Outside the main thread (where Python delivers
    signals anyway) it does nothing."""

    def __enter__(self):
        self._got = None
        self._old = None
        if threading.current_thread() is threading.main_thread():
            try:
                self._old = signal.signal(signal.SIGINT, self._hold)
            except (ValueError, OSError, TypeError):
                self._old = None
        return self

    def _hold(self, signum, frame):
        self._got = (signum, frame)

    def __exit__(self, *exc):
        if self._old is None:
            return False
        signal.signal(signal.SIGINT, self._old)
        if self._got is not None:
            if callable(self._old):
                self._old(*self._got)
            elif self._old == signal.SIG_DFL:
                os.kill(os.getpid(), signal.SIGINT)
        return False


def iframe(page):
    """The HTML report in a frame of its own, so that its styles and the notebook's do not mix.
    Sandboxed with no permission at all: the report has no script, so none may run in it."""
    import html

    return ('<iframe class="gpufeed-report" title="gpufeed report" srcdoc="%s" '
            'style="width:100%%;height:900px;border:1px solid #ddd;border-radius:4px" '
            'sandbox=""></iframe>' % html.escape(page, quote=True))


class GpufeedError(RuntimeError):
    """gpufeed could not start or finish recording; the message says what to do. ``usage``: the
    recorder refused an option the caller gave (a bad ``interval`` or ``py_rate``), not the
    machine."""

    usage = False


def find_binary():
    """The ``gpufeed`` executable: ``$GPUFEED_BIN``, else the one installed with this package (as
    ``python -m gpufeed`` finds it), else ``gpufeed`` on the PATH. GpufeedError when none is."""
    given = os.environ.get("GPUFEED_BIN")
    if given:
        if os.path.isfile(given) and os.access(given, os.X_OK):
            return given
        raise GpufeedError("GPUFEED_BIN=%s is not an executable file: point it at the gpufeed "
                           "binary, or unset it" % given)
    from gpufeed._find import find_gpufeed_bin

    try:
        return find_gpufeed_bin()
    except FileNotFoundError as e:
        import shutil

        on_path = shutil.which("gpufeed")
        if on_path:
            return on_path
        raise GpufeedError("%s, or set GPUFEED_BIN=/path/to/gpufeed" % e)


def _libc():
    import ctypes
    import ctypes.util

    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _set_ptracer(pid):
    """Lets process ``pid`` ptrace this one under Yama scope 1 (0: nobody but the default)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return _libc().prctl(PR_SET_PTRACER, ctypes.c_ulong(pid), 0, 0, 0) == 0
    except Exception:
        return False


def _after_fork_in_child():
    if _ptracer[0]:
        _set_ptracer(_ptracer[0])


def _ptrace_scope():
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _can_ptrace():
    """Whether a same-user recorder may read this process: root or CAP_SYS_PTRACE aside, Yama
    scope 0 or 1 (scope 1 with the PR_SET_PTRACER exception set here)."""
    scope = _ptrace_scope()
    if scope is None or scope <= 1:
        return True
    if os.geteuid() == 0:
        return scope < 3
    return False


class Profile(object):
    """See the module's doc. ``output``: the recording's path (default: a new temporary folder);
    ``interval``: the sampling interval (e.g. ``"100ms"``); ``py_stacks``: False to not read
    Python stacks; ``py_rate``: stack samples per second; ``auto_steps``: False to not time torch
    DataLoader batches as steps; ``quiet``: no notes on stderr."""

    def __init__(self, output=None, interval=None, py_stacks=True, py_rate=None, auto_steps=True,
                 quiet=False):
        self.output = output
        self.interval = interval
        self.py_stacks = py_stacks
        self.py_rate = py_rate
        self.auto_steps = auto_steps
        self.quiet = quiet
        self.recording = None
        self.report = None
        self.text = None
        self.notes = []
        self.error = None
        self.nested = False
        self.seconds = None
        self.report_seconds = None
        self._html_path = None
        self._proc = None
        self._dir = None
        self._log = None
        self._env_before = None
        self._env_set = False
        self._steps = None
        self._t0 = None
        self._lock = threading.Lock()

    # -- results ---------------------------------------------------------------------------------
    @property
    def verdict(self):
        """The verdict's kind (``"input_bound"``, ``"gpu_bound"``, ...), or None without a report."""
        v = (self.report or {}).get("verdict")
        if isinstance(v, dict):
            return v.get("id") or v.get("kind")
        return v

    @property
    def findings(self):
        """The report's findings (a list of dicts; empty without a report)."""
        return list((self.report or {}).get("findings") or [])

    def html(self):
        """The self-contained HTML report (as ``gpufeed diagnose --html`` writes it), or None."""
        if not self._html_path:
            return None
        try:
            with open(self._html_path, encoding="utf-8") as f:
                return f.read()
        except OSError:
            return None

    def _repr_html_(self):
        page = self.html()
        return iframe(page) if page else None

    def __repr__(self):
        if self.report is not None:
            return "<gpufeed.profile: %s, %s>" % (self.verdict, self.recording)
        return "<gpufeed.profile: %s>" % (self.error or "not finished")

    # -- the block -------------------------------------------------------------------------------
    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.stop()
        return False  # the block's own exception goes on unchanged

    def _note(self, line):
        self.notes.append(line)
        if not self.quiet:
            sys.stderr.write("gpufeed: note: %s\n" % line)
            sys.stderr.flush()

    def start(self):
        """Starts the recorder on this process; GpufeedError (one line) when it cannot."""
        if _active[0] is not None:
            self.nested = True
            self._note("already recording this process (a profile inside another): this one "
                       "adds nothing; the outer one's report covers it")
            return self
        exe = find_binary()
        if self.output and os.path.lexists(self.output):
            raise GpufeedError("%s already exists: choose another output (gpufeed never replaces "
                               "a recording)" % self.output)
        self._dir = tempfile.mkdtemp(prefix="gpufeed-nb-")
        self.recording = os.path.abspath(self.output) if self.output else os.path.join(
            self._dir, "recording.ndjson")
        sock = os.path.join(self._dir, "steps.sock")
        # No --force: an output the user named that exists is refused, as gpufeed always does.
        argv = [exe, "record", "--pid", str(os.getpid()), "-o", self.recording,
                "--step-socket", sock]
        if self.interval is not None:
            argv += ["--interval", str(self.interval)]
        if not self.py_stacks:
            argv += ["--py-stacks", "off"]
        if self.py_rate is not None:
            argv += ["--py-rate", str(self.py_rate)]
        self._log = os.path.join(self._dir, "recorder.log")
        env = dict(os.environ)
        env.pop(ENV_VAR, None)
        env["NO_COLOR"] = "1"
        try:
            # An interrupt while the recorder is being started would leave it running with
            # nothing holding it (or this process marked as recording with no recorder): held
            # until both are set, then delivered, and the cleanup below undoes the start.
            with _interrupts_held():
                self._spawn(argv, env, exe)
                _active[0] = self
            self._allow_ptrace()
            self._wait_ready(sock)
            with _interrupts_held():
                self._env_before = os.environ.get(ENV_VAR)
                os.environ[ENV_VAR] = sock
                self._env_set = True
            if self.auto_steps:
                try:
                    from gpufeed import _inproc

                    self._steps = _inproc.install(sock)
                except Exception as e:  # never a broken job over step timing
                    self._note("DataLoader batches are not timed as steps (%r)" % (e,))
            self._t0 = time.monotonic()
        except BaseException:
            with _interrupts_held():
                self._undo_start()
            raise
        return self

    def _spawn(self, argv, env, exe):
        with open(self._log, "wb") as log:
            try:
                self._proc = subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                    # Its own session: the kernel's Ctrl-C / Interrupt is not the recorder's.
                    start_new_session=True, close_fds=True)
            except OSError as e:
                raise GpufeedError("cannot start %s (%s): reinstall gpufeed, or set "
                                   "GPUFEED_BIN=/path/to/gpufeed" % (exe, e))

    def _put_back(self):
        """The step hook uninstalled and the environment variable put back as it was."""
        if self._steps is not None:
            try:
                self._steps.uninstall()
            except Exception:
                pass
            self._steps = None
        if self._env_set:
            self._env_set = False
            if self._env_before is None:
                os.environ.pop(ENV_VAR, None)
            else:
                os.environ[ENV_VAR] = self._env_before

    def _undo_start(self):
        """A start that did not finish: the recorder killed, the environment and the step hook
        put back, this process no longer marked as recording."""
        self._put_back()
        self._kill()
        self._proc = None
        if _ptracer[0]:
            _ptracer[0] = 0
            _set_ptracer(0)
        if _active[0] is self:
            _active[0] = None

    def _allow_ptrace(self):
        pid = self._proc.pid
        if not self.py_stacks or not sys.platform.startswith("linux"):
            return
        _ptracer[0] = pid
        _set_ptracer(pid)
        if not _fork_hook[0] and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_after_fork_in_child)
            _fork_hook[0] = True
        if not _can_ptrace():
            self._note("this system forbids reading this process's Python stacks "
                       "(kernel.yama.ptrace_scope = %s): the report has no loop phases or slow "
                       "stages, only CPU, GPU and step times; `gpufeed run -- python train.py` "
                       "from a terminal has them" % _ptrace_scope())

    def _wait_ready(self, sock):
        """Waits until the recorder listens for step markers and samples."""
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                e = GpufeedError("gpufeed record stopped at once: %s" % self._log_tail())
                # Exit status 2 is gpufeed's usage error (src/exit.rs): an option was refused.
                e.usage = self._proc.returncode == 2
                raise e
            if os.path.exists(sock) and b"recording to" in self._log_bytes():
                return
            if time.monotonic() > deadline:
                raise GpufeedError("gpufeed record did not start within %d s: %s"
                                   % (_READY_TIMEOUT_S, self._log_tail()))
            time.sleep(0.01)

    def _log_bytes(self):
        try:
            with open(self._log, "rb") as f:
                return f.read()
        except (OSError, TypeError):
            return b""

    def _log_tail(self):
        lines = [ln.strip() for ln in self._log_bytes().decode("utf-8", "replace").splitlines()
                 if ln.strip()]
        if not lines:
            return "no message (see %s)" % self._log
        # An option the recorder refused ends with clap's "For more information, try '--help'";
        # the line that says what is wrong is its "error:" line.
        errors = [ln for ln in lines if ln.startswith(("error: ", "gpufeed: error: "))]
        last = errors[-1] if errors else lines[-1]
        for prefix in ("gpufeed: error: ", "error: ", "gpufeed: "):
            if last.startswith(prefix):
                return last[len(prefix):]
        return last

    def _kill(self):
        p = self._proc
        if p is None:
            return
        try:
            if p.poll() is None:
                p.kill()
            p.wait()
        except Exception:
            pass

    def _stop_recorder(self):
        """SIGINT (the recording is closed properly), then SIGKILL if it does not end in time."""
        p = self._proc
        if p.poll() is not None:
            how = ("killed by signal %d" % -p.returncode) if p.returncode < 0 else (
                "exit status %d" % p.returncode)
            self._note("the recorder stopped before the cell ended (%s): the report covers what "
                       "it recorded until then" % how)
            return
        try:
            p.send_signal(signal.SIGINT)
            p.wait(timeout=_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._note("the recorder did not stop within %d s of SIGINT: killed"
                       % _STOP_TIMEOUT_S)
            self._kill()

    def stop(self):
        """Stops the recorder and diagnoses the recording. Never raises for a failed report:
        ``p.error`` says what went wrong (the block's own exception matters more)."""
        if self.nested or self._proc is None:
            return self
        with self._lock:
            if self._proc is None:
                return self
            end = time.monotonic()
            self.seconds = end - (self._t0 or end)
            try:
                self._put_back()
                self._stop_recorder()
            finally:
                # However this ends (a second interrupt included): no recorder left behind.
                self._kill()
                self._proc = None
                _ptracer[0] = 0
                _set_ptracer(0)
                _active[0] = None
            if b"Python stacks could not be read" in self._log_bytes():
                self._note("this process's Python stacks could not be read (ptrace refused: "
                           "kernel.yama.ptrace_scope = %s): the report has no loop phases or slow "
                           "stages, only CPU, GPU and step times; `gpufeed run -- python "
                           "train.py` from a terminal has them" % _ptrace_scope())
            self._diagnose()
            self.report_seconds = time.monotonic() - end
        return self

    def _diagnose(self):
        if not self.recording or not os.path.exists(self.recording):
            self.error = "no recording was written (%s)" % self._log_tail()
            self._note(self.error)
            return
        json_path = os.path.join(self._dir, "report.json")
        html_path = os.path.join(self._dir, "report.html")
        env = dict(os.environ, NO_COLOR="1")
        env.pop(ENV_VAR, None)
        try:
            exe = find_binary()
            out = subprocess.run(
                [exe, "diagnose", self.recording, "--export-json", json_path, "--html", html_path,
                 "--color", "never"],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                env=env, timeout=_DIAGNOSE_TIMEOUT_S)
        except (GpufeedError, OSError, subprocess.TimeoutExpired) as e:
            self.error = "gpufeed diagnose failed (%s): run `gpufeed diagnose %s` in a terminal" % (
                e, self.recording)
            self._note(self.error)
            return
        self.text = out.stdout.decode("utf-8", "replace")
        if os.path.exists(html_path):
            self._html_path = html_path
        try:
            with open(json_path, encoding="utf-8") as f:
                self.report = json.load(f)
        except (OSError, ValueError):
            err = out.stderr.decode("utf-8", "replace").strip().splitlines()
            self.error = "gpufeed diagnose gave no report (%s)" % (
                err[-1] if err else "exit status %d" % out.returncode)
            self._note(self.error)


def profile(output=None, interval=None, py_stacks=True, py_rate=None, auto_steps=True,
            quiet=False):
    """``with gpufeed.profile() as p:`` records this process while the block runs; see
    :class:`Profile`."""
    return Profile(output=output, interval=interval, py_stacks=py_stacks, py_rate=py_rate,
                   auto_steps=auto_steps, quiet=quiet)
