import json
import os
import socket
import sys
import threading
import time
import unittest

if not os.environ.get("GPUFEED_TEST_INSTALLED"):  # else: the installed wheel's module
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gpufeed_probe as probe  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stepsock  # noqa: E402


class Receiver(stepsock.Receiver):
    def __init__(self):
        super().__init__(timeout=2.0)

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


class Answerer(Receiver):
    """A stand-in gpufeed that answers each `figures` query (from its own thread) with ``reply``
    plus the query's nonce, ``delay`` seconds late; ``stale``: first a reply with a wrong nonce."""

    def __init__(self, reply, delay=0.0, stale=False):
        super().__init__()
        self.reply, self.delay, self.stale = reply, delay, stale
        self.queries = []
        self.sock.settimeout(0.1)
        self.stop = False
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self):
        while not self.stop:
            try:
                data, sender = self.sock.recvfrom(4096)
            except (socket.timeout, OSError):
                continue
            words = data.decode("ascii").split()
            if words[:1] != ["figures"]:
                continue
            self.queries.append(words)
            time.sleep(self.delay)
            if self.stale:
                self.sock.sendto(json.dumps({"q": -1, "steps_per_s": 1.0}).encode(), sender)
            body = dict(self.reply, q=int(words[3]))
            self.sock.sendto((json.dumps(body) + "\n").encode(), sender)

    def close(self):
        self.stop = True
        self.thread.join()
        super().close()


class FiguresQueryTest(unittest.TestCase):
    """gpufeed_probe.figures(): the reply direction of the step socket."""

    def setUp(self):
        self.old = os.environ.pop(probe.ENV_VAR, None)
        probe._probe.close()

    def tearDown(self):
        os.environ.pop(probe.ENV_VAR, None)
        if self.old is not None:
            os.environ[probe.ENV_VAR] = self.old
        probe._probe.close()

    def test_not_under_gpufeed_asks_nothing(self):
        self.assertIsNone(probe.figures())
        self.assertIsNone(probe._probe.ask)

    def test_the_answer_to_this_query_is_returned(self):
        a = Answerer({"steps_per_s": 12.5, "gpus": {"0": 40.0}}, stale=True)
        try:
            os.environ[probe.ENV_VAR] = a.path
            got = probe.figures(timeout=2.0)
            self.assertEqual(got["steps_per_s"], 12.5)  # not the stale answer before it
            self.assertEqual(got["gpus"], {"0": 40.0})
            q = a.queries[0]
            self.assertEqual(q[1:3], [str(probe._rank()), str(os.getpid())])
            self.assertIsNotNone(probe.figures(timeout=2.0))
            self.assertEqual(len(a.queries), 2)
        finally:
            a.close()

    def test_an_old_gpufeed_costs_two_bounded_waits_then_nothing(self):
        rx = Receiver()  # binds the socket, never answers: a gpufeed without the reply direction
        try:
            os.environ[probe.ENV_VAR] = rx.path
            t0 = time.monotonic()
            for _ in range(5):
                self.assertIsNone(probe.figures(timeout=0.05))
            took = time.monotonic() - t0
            self.assertLess(took, 0.5)
            self.assertGreaterEqual(took, 0.09)
            self.assertEqual([m.split()[0] for m in rx.pending()], ["figures", "figures"])
            # Markers still go out as before.
            self.assertTrue(probe.step())
        finally:
            rx.close()

    def test_a_late_answer_is_not_waited_for_and_not_taken_later(self):
        a = Answerer({"steps_per_s": 1.0}, delay=0.3)
        try:
            os.environ[probe.ENV_VAR] = a.path
            t0 = time.monotonic()
            self.assertIsNone(probe.figures(timeout=0.05))
            self.assertLess(time.monotonic() - t0, 0.25)
            time.sleep(0.4)  # the late answer (q=1) is now waiting in the socket
            a.delay = 0.0
            got = probe.figures(timeout=2.0)
            late, asked = (int(q[3]) for q in a.queries)
            self.assertEqual(got["q"], asked)
            self.assertNotEqual(asked, late)
        finally:
            a.close()

    def test_an_answer_from_another_socket_is_ignored(self):
        rx = Receiver()  # reads the query; the answer comes from another socket, right nonce

        def spoof():
            words = rx.recv().split()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            s.sendto(json.dumps({"q": int(words[3]), "steps_per_s": 99.0}).encode(),
                     probe._probe.ask.getsockname())
            s.close()

        try:
            os.environ[probe.ENV_VAR] = rx.path
            t = threading.Thread(target=spoof)
            t.start()
            self.assertIsNone(probe.figures(timeout=0.5))
            t.join()
        finally:
            rx.close()

    def test_a_job_with_many_open_files_is_answered(self):
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard != resource.RLIM_INFINITY and hard < 1200:
            return sys.stderr.write("\nSKIPPED: RLIMIT_NOFILE under 1200: the many-files test did not run\n")
        resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
        fds = []
        a = Answerer({"steps_per_s": 3.0})
        try:
            fds.append(os.open(os.devnull, os.O_RDONLY))
            while fds[-1] < 1100:  # the asking socket gets a descriptor over 1024
                fds.append(os.dup(fds[0]))
            os.environ[probe.ENV_VAR] = a.path
            self.assertEqual(probe.figures(timeout=2.0)["steps_per_s"], 3.0)
            self.assertGreater(probe._probe.ask.fileno(), 1024)
        finally:
            probe._probe.close()
            for fd in fds:
                os.close(fd)
            a.close()
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    def test_gone_gpufeed_never_raises(self):
        os.environ[probe.ENV_VAR] = "/nonexistent/gpufeed/s.sock"
        self.assertIsNone(probe.figures(timeout=0.01))


if __name__ == "__main__":
    unittest.main()
