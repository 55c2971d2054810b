"""The gpufeed end of the step socket, for the tests of what sends to it (the probe, the package)."""
import os
import socket
import tempfile


class Receiver:
    """A datagram socket bound at ``path`` in a temporary folder, as gpufeed binds it; reads
    wait ``timeout`` seconds, or not at all (``None``)."""

    def __init__(self, timeout=None):
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "s.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        if timeout is None:
            self.sock.setblocking(False)
        else:
            self.sock.settimeout(timeout)

    def close(self):
        self.sock.close()
        self.dir.cleanup()
