"""``%%gpufeed`` under a real IPython shell (issue 47; SKIPPED on stderr without IPython): a bad
option raises before the cell runs (so "Run All" stops), a bad value says what is wrong in one
line, a top-level ``await`` runs as it does without the magic, a trailing ``;`` hides the Out, and
an interrupt at any moment of the recorder's start leaves no recorder and no kernel marked as
recording. crates/gpufeed/tests/it/notebook.rs runs this file with GPUFEED_TEST_PYTHON."""

import contextlib
import io
import os
import signal
import sys
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_profile import Env, binary, children_named, skipped  # noqa: E402

from gpufeed import _ipython, _profile  # noqa: E402

try:
    from IPython.core.error import UsageError
    from IPython.core.interactiveshell import InteractiveShell
except ImportError:
    InteractiveShell = None

NO_NVML = "/nonexistent/libnvidia-ml.so.1"


def shell():
    sh = InteractiveShell.instance()
    sh.extension_manager.load_extension("gpufeed")
    return sh


def run_quietly(sh, cell):
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        res = sh.run_cell(cell)
    return res, out.getvalue()


class Magic(unittest.TestCase):
    def setUp(self):
        if InteractiveShell is None:
            skipped("no IPython: the %%gpufeed magic not tested")
            self.skipTest("no IPython")
        self.sh = shell()
        self.sh.user_ns["RAN"] = []
        self.bin = binary()

    def tearDown(self):
        self.assertIsNone(_profile._active[0], "the kernel is left marked as recording")
        self.assertEqual(children_named("gpufeed"), [], "a recorder is left running")

    def modes(self):
        """Without a binary (the cell runs without gpufeed) and, when there is one, recorded."""
        yield Env(GPUFEED_BIN="/nonexistent/gpufeed")
        if self.bin is None:
            skipped("no gpufeed binary: %%gpufeed cells run only without a recorder")
        else:
            yield Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB=NO_NVML)

    def test_an_unknown_option_raises_before_the_cell_runs(self):
        for cell in ("%%gpufeed --bogus\nRAN.append(1)\n", "%%gpufeed --interval\nRAN.append(1)\n"):
            res, out = run_quietly(self.sh, cell)
            self.assertIsInstance(res.error_in_exec, UsageError, out)
            self.assertIn("usage: %%gpufeed", str(res.error_in_exec))
            self.assertEqual(self.sh.user_ns["RAN"], [], "the cell body must not run")
        res, out = run_quietly(self.sh, "%gpufeed start --bogus\n")
        self.assertIsInstance(res.error_in_exec, UsageError, out)

    def test_a_bad_value_says_what_is_wrong_in_one_line(self):
        if self.bin is None:
            skipped("no gpufeed binary: bad option values not tested")
            return
        with Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB=NO_NVML):
            for opt, bad in (("--interval", "1ns"), ("--py-rate", "abc")):
                res, out = run_quietly(self.sh, "%%%%gpufeed %s %s\nRAN.append(1)\n" % (opt, bad))
                err = res.error_in_exec
                self.assertIsInstance(err, UsageError, out)
                msg = str(err)
                self.assertNotIn("\n", msg)
                self.assertIn(bad, msg)
                self.assertIn(opt, msg)
                self.assertNotIn("--help", msg)
                self.assertEqual(self.sh.user_ns["RAN"], [])

    def test_top_level_await_runs_as_without_the_magic(self):
        cell = ("%%gpufeed --interval 50ms\nimport asyncio\nawait asyncio.sleep(0.05)\n"
                "RAN.append(1)\nawait asyncio.sleep(0, result=41) + 1\n")
        for env in self.modes():
            with env:
                self.sh.user_ns["RAN"] = []
                res, out = run_quietly(self.sh, cell)
                self.assertIsNone(res.error_before_exec, out)
                self.assertIsNone(res.error_in_exec, out)
                self.assertEqual(self.sh.user_ns["RAN"], [1], out)
                self.assertEqual(res.result, 42, out)

    def test_a_trailing_semicolon_hides_the_out(self):
        for env in self.modes():
            with env:
                res, out = run_quietly(self.sh, "%%gpufeed\nx = 20\nx + 1;\n")
                self.assertIsNone(res.error_in_exec, out)
                self.assertIsNone(res.result, out)
                res, out = run_quietly(self.sh, "%%gpufeed\nx = 20\nx + 2  # a comment; here\n")
                self.assertEqual(res.result, 22, out)

    def test_an_interrupt_while_the_recorder_starts_leaves_nothing_behind(self):
        if self.bin is None:
            skipped("no gpufeed binary: an interrupt during the recorder's start not tested")
            return
        cell = "import time\ntime.sleep(0.4)\n"
        with Env(GPUFEED_BIN=self.bin, GPUFEED_NVML_LIB=NO_NVML):
            # Every few milliseconds of the start: spawning, waiting for the recorder, the step
            # hook, the first statements of the cell.
            for ms in range(0, 60, 2):
                timer = threading.Timer(ms / 1000.0, os.kill, (os.getpid(), signal.SIGINT))
                out = io.StringIO()
                interrupted = False
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                    try:
                        timer.start()
                        _ipython._magic("--interval 50ms --no-py-stacks", cell)
                    except KeyboardInterrupt:
                        interrupted = True
                    timer.join()
                self.assertTrue(interrupted, "at %d ms: %s" % (ms, out.getvalue()))
                self.assertIsNone(_profile._active[0], "at %d ms: marked as recording" % ms)
                self.assertEqual(children_named("gpufeed"), [], "at %d ms: orphan recorder" % ms)
                self.assertNotIn("GPUFEED_STEP_SOCKET", os.environ, "at %d ms" % ms)
                res, text = run_quietly(self.sh, "%gpufeed status\n")
                self.assertIn("not recording", text, "at %d ms" % ms)



class Frame(unittest.TestCase):
    def test_the_report_frame_allows_no_script(self):
        frame = _profile.iframe("<html><body>report</body></html>")
        self.assertIn('sandbox=""', frame)
        self.assertNotIn("allow-scripts", frame)


if __name__ == "__main__":
    unittest.main()
