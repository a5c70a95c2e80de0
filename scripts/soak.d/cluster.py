"""The soak's cluster: three kvatlas-server processes on free loopback ports, and a small
keep-alive HTTP client each driver thread owns.

Servers are started as tests/fault/cluster_fault_test.py starts them (its free_ports and
make_auth): raft ports picked free below the ephemeral range, REST and binary protocol on port 0 (the bound addresses are
read from DATA/http.addr and DATA/rpc.addr once the server listens), a cluster secret made
here (docs/security.md §Peers).
"""

import http.client
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..",
                                "tests", "fault"))
from cluster_fault_test import free_ports, make_auth  # noqa: E402

START_DEADLINE_S = 60.0


class Http:
    """One keep-alive connection per server, for one thread. request() never raises: it
    answers (status, body, seconds); status 0 = no answer (the body names the error)."""

    def __init__(self, timeout=15.0):
        self.timeout = timeout
        self.conns = {}

    def _conn(self, hostport):
        conn = self.conns.get(hostport)
        if conn is None:
            host, port = hostport.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
            self.conns[hostport] = conn
        return conn

    def drop(self, hostport):
        conn = self.conns.pop(hostport, None)
        if conn is not None:
            conn.close()

    def request(self, hostport, method, path, body=None, retry_stale=True):
        """retry_stale: a request sent on a kept-alive connection that the server had
        already closed (its idle timeout) is sent again once on a fresh one. Writes pass
        False when a resend is not safe; the soak's writes are idempotent, so they pass True
        too."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if data is not None else {}
        for attempt in range(2):
            reused = hostport in self.conns
            conn = self._conn(hostport)
            t0 = time.monotonic()
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                dt = time.monotonic() - t0
                if resp.getheader("Connection", "").lower() == "close":
                    self.drop(hostport)
                try:
                    parsed = json.loads(raw) if raw else None
                except ValueError:
                    parsed = {"code": "bad_json", "message": raw[:200].decode(errors="replace")}
                return resp.status, parsed, dt
            except (OSError, http.client.HTTPException) as e:
                dt = time.monotonic() - t0
                self.drop(hostport)
                stale = isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError,
                                       ConnectionResetError))
                if reused and stale and retry_stale and attempt == 0:
                    continue
                return 0, {"code": "no_answer", "message": "%s: %s" % (type(e).__name__, e)}, dt
        raise AssertionError("unreachable")

    def text(self, hostport, path):
        """GET returning text (for /metrics); (status, text)."""
        for attempt in range(2):
            reused = hostport in self.conns
            conn = self._conn(hostport)
            try:
                conn.request("GET", path)
                resp = conn.getresponse()
                return resp.status, resp.read().decode(errors="replace")
            except (OSError, http.client.HTTPException) as e:
                self.drop(hostport)
                if reused and attempt == 0:
                    continue
                return 0, str(e)
        raise AssertionError("unreachable")

    def close(self):
        for hostport in list(self.conns):
            self.drop(hostport)


class Node:
    def __init__(self, binary, node_id, peers, data_dir, log_path, auth):
        self.binary, self.id, self.peers = binary, node_id, peers
        self.data_dir, self.log_path, self.auth = data_dir, log_path, auth
        self.proc = None
        self.http = None  # "127.0.0.1:PORT" of REST
        self.rpc = None   # "127.0.0.1:PORT" of the binary protocol

    def start(self):
        for name in ("http.addr", "rpc.addr"):
            path = os.path.join(self.data_dir, name)
            if os.path.exists(path):
                os.remove(path)
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--data-dir", self.data_dir, "--id", str(self.id),
             "--peers", self.peers, "--http-listen", "127.0.0.1:0",
             "--rpc-listen", "127.0.0.1:0", "--cluster-id", self.auth[0],
             "--cluster-secret-file", self.auth[1]],
            stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        deadline = time.time() + START_DEADLINE_S
        files = [os.path.join(self.data_dir, n) for n in ("http.addr", "rpc.addr")]
        # Each file is written whole (a rename) once its listener is bound.
        while not all(os.path.exists(f) and os.path.getsize(f) > 0 for f in files):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("server %d did not start (exit status %s); the end of %s:\n%s"
                                   % (self.id, self.proc.poll(), self.log_path, self.log_tail()))
            time.sleep(0.05)
        with open(files[0]) as f:
            self.http = f.read().strip()
        with open(files[1]) as f:
            self.rpc = f.read().strip()

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout=30.0):
        """SIGTERM and wait; the exit status (None if it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.log.close()
                return None
        self.log.close()
        return self.proc.returncode


class Cluster:
    def __init__(self, binary, root, log_dir, n=3):
        self.root = root
        ports = free_ports(n)
        peers = ",".join("%d@127.0.0.1:%d" % (i + 1, p) for i, p in enumerate(ports))
        auth = make_auth(root, "soak-" + os.urandom(4).hex())
        self.nodes = []
        for i in range(n):
            d = os.path.join(root, "n%d" % (i + 1))
            os.makedirs(d)
            self.nodes.append(Node(binary, i + 1, peers, d,
                                   os.path.join(log_dir, "server-%d.log" % (i + 1)), auth))

    def start(self):
        for node in self.nodes:
            node.start()

    def leader(self, http, deadline_s=60.0):
        """The node that says it leads and that every other node names (bounded wait)."""
        deadline = time.time() + deadline_s
        while time.time() < deadline:
            views = {}
            for node in self.nodes:
                status, body, _ = http.request(node.http, "GET", "/v1/cluster")
                if status == 200:
                    views[node.id] = body
            leaders = {b["leader_id"] for b in views.values()}
            if len(views) == len(self.nodes) and len(leaders) == 1:
                lid = leaders.pop()
                if lid and views[lid]["state"] == "leader":
                    return self.nodes[lid - 1]
            time.sleep(0.1)
        raise RuntimeError("no leader every server agrees on within %.0f s" % deadline_s)

    def wait_ready(self, http, deadline_s=60.0):
        deadline = time.time() + deadline_s
        for node in self.nodes:
            while True:
                status, body, _ = http.request(node.http, "GET", "/readyz")
                if status == 200:
                    break
                if time.time() > deadline:
                    raise RuntimeError("server %d not ready within %.0f s: %s"
                                       % (node.id, deadline_s, body))
                time.sleep(0.1)
