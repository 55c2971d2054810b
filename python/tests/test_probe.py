import os
import socket
import sys
import tempfile
import time
import unittest

if not os.environ.get("GPUFEED_TEST_INSTALLED"):  # else: the installed wheel's module
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpufeed_probe as probe  # noqa: E402


class Receiver:
    def __init__(self):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "s.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.sock.settimeout(2.0)

    def recv(self):
        return self.sock.recv(4096).decode("ascii")

    def pending(self):
        self.sock.setblocking(False)
        out = []
        try:
            while True:
                out.append(self.sock.recv(4096).decode("ascii"))
        except BlockingIOError:
            pass
        self.sock.settimeout(2.0)
        return out

    def close(self):
        self.sock.close()
        self.dir.cleanup()


class ProbeTest(unittest.TestCase):
    def setUp(self):
        self.old = os.environ.pop(probe.ENV_VAR, None)
        self.rx = Receiver()

    def tearDown(self):
        os.environ.pop(probe.ENV_VAR, None)
        if self.old is not None:
            os.environ[probe.ENV_VAR] = self.old
        probe._probe.close()
        probe._probe.pending_wait_ns = None
        self.rx.close()

    def test_noop_without_socket(self):
        self.assertFalse(probe.enabled())
        self.assertFalse(probe.step())
        loader = [1, 2, 3]
        self.assertIs(probe.wrap(loader), loader)

    def test_step_format(self):
        os.environ[probe.ENV_VAR] = self.rx.path
        before = time.monotonic_ns()
        self.assertTrue(probe.step(items=32, wait_ns=1500))
        words = self.rx.recv().split()
        self.assertEqual(words[0], "step")
        self.assertGreaterEqual(int(words[1]), before)
        self.assertLessEqual(int(words[1]), time.monotonic_ns())
        # The sender's rank: RANK, else LOCAL_RANK, else its pid.
        self.assertEqual(words[2:], ["1500", "32", str(os.getpid())])
        probe.step()
        self.assertEqual(self.rx.recv().split()[2:], ["-", "-", str(os.getpid())])
        old = os.environ.get("RANK")
        os.environ["RANK"] = "3"
        try:
            probe.step()
            self.assertEqual(self.rx.recv().split()[4], "3")
        finally:
            if old is None:
                del os.environ["RANK"]
            else:
                os.environ["RANK"] = old

    def test_wrap_times_the_loader(self):
        os.environ[probe.ENV_VAR] = self.rx.path

        def slow_loader():
            for i in range(4):
                time.sleep(0.05)
                yield [i] * 8

        got = []
        for batch in probe.wrap(slow_loader(), items=len):
            got.append(batch)
            time.sleep(0.01)
        self.assertEqual(len(got), 4)
        marks = [m.split() for m in self.rx.pending()]
        # A marker when the loop asks for batches 2, 3, 4 and for the end: 4 steps.
        self.assertEqual(len(marks), 4)
        for m in marks:
            self.assertEqual(m[0], "step")
            self.assertGreaterEqual(int(m[2]), 40_000_000)  # waited ~50 ms for data
            self.assertEqual(m[3], "8")

    def test_wrap_without_steps_feeds_step(self):
        os.environ[probe.ENV_VAR] = self.rx.path

        def loader():
            for i in range(2):
                time.sleep(0.03)
                yield i

        for _ in probe.wrap(loader(), steps=False):
            probe.step(items=1)
        marks = [m.split() for m in self.rx.pending()]
        self.assertEqual(len(marks), 2)
        self.assertGreaterEqual(int(marks[0][2]), 20_000_000)

    def test_gone_receiver_never_raises(self):
        os.environ[probe.ENV_VAR] = os.path.join(self.rx.dir.name, "missing.sock")
        self.assertFalse(probe.step())
        for _ in probe.wrap(range(3)):
            pass


if __name__ == "__main__":
    unittest.main()
