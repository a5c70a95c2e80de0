"""Fixtures of the kvatlas Python suite: real kvatlas-server processes.

ctest runs this suite with /usr/bin/python3 -m pytest, PYTHONPATH at the build tree's
package (client/python/kvatlas in the build directory) and KVATLAS_SERVER_BIN naming the
server binary (KVATLAS_SERVER is the CLI's server address, never a binary). Each server
binds loopback port 0 (or a given port, to restart on it) in a temporary data directory and
is stopped at the end of its test; every wait is bounded.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

DEADLINE_S = 10.0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A kvatlas-server on a temporary data directory; restart() keeps its directory and
    its rpc port."""

    def __init__(self, binary, rpc_port=0, extra=()):
        self.binary = binary
        self.extra = list(extra)
        self.rpc_port = rpc_port
        self.data_dir = tempfile.mkdtemp(prefix="kvatlas-py-")
        self.log_path = os.path.join(self.data_dir, "server.log")
        self.proc = None
        self.start()

    def start(self):
        addr_files = [os.path.join(self.data_dir, f) for f in ("rpc.addr", "http.addr")]
        for f in addr_files:
            if os.path.exists(f):
                os.remove(f)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--data-dir", self.data_dir, "--http-listen", "127.0.0.1:0",
             "--rpc-listen", f"127.0.0.1:{self.rpc_port}", "--storage-sync", "false",
             *self.extra],
            stdout=log, stderr=log)
        log.close()
        deadline = time.time() + DEADLINE_S
        while not all(os.path.exists(f) for f in addr_files):
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError("server did not start:\n" + self.log_tail())
            time.sleep(0.02)
        with open(addr_files[0]) as f:
            self.rpc = f.read().strip()
        with open(os.path.join(self.data_dir, "http.addr")) as f:
            self.http = f.read().strip()
        self.rpc_port = int(self.rpc.rsplit(":", 1)[1])

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=DEADLINE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def restart(self):
        self.stop()
        self.start()

    def log_tail(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-3000:].decode(errors="replace")
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)


@pytest.fixture
def server_binary():
    binary = os.environ.get("KVATLAS_SERVER_BIN")
    if not binary:
        pytest.fail("KVATLAS_SERVER_BIN must name the kvatlas-server binary "
                    "(KVATLAS_SERVER is the CLI's server address)")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"KVATLAS_SERVER_BIN={binary}: not an executable kvatlas-server")
    return binary


@pytest.fixture
def make_server(server_binary):
    servers = []

    def make(**kwargs):
        s = Server(server_binary, **kwargs)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.cleanup()


@pytest.fixture
def server(make_server):
    return make_server()


@pytest.fixture
def client(server):
    import kvatlas
    with kvatlas.Client([server.rpc]) as c:
        yield c
