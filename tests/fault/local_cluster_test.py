#!/usr/bin/python3
"""scripts/local-cluster as README §Replicated cluster uses it, from a temporary working
directory: start 3, status, kill 1, restart 1, stop.

usage: local_cluster_test.py KVATLAS_SERVER_BINARY SOURCE_DIR

Checks that `start` and `restart` return only once the servers they started answer (GET
/healthz answers at once after they return, no retry), that the cluster's directory is
./cluster-data under the working directory and nothing is written into the repository, that
the binary comes from KVATLAS_SERVER_BIN while KVATLAS_SERVER holds an address (the CLI's
variable, which a shell may have exported), and that a server that cannot start (its ports
held by another cluster) fails `start` with its log's tail. Ports: a free base picked by
the test (KVATLAS_CLUSTER_PORT_BASE), below the ephemeral range. Every process started is
stopped and the directory removed.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request

DEADLINE_S = 60.0
SERVERS = 3


def free_port_base(n):
    """A base B whose ports B+100+I, B+200+I, B+300+I (I = 1..n), scripts/local-cluster's
    raft, REST and binary-protocol ports, are free now; below Linux's ephemeral range (32768
    and up), so that no other test's `:0` bind takes one meanwhile."""
    while True:
        base = random.randrange(20000, 32000 - 400, 10)
        socks = []
        try:
            for i in range(1, n + 1):
                for offset in (100, 200, 300):
                    s = socket.socket()
                    socks.append(s)
                    s.bind(("127.0.0.1", base + offset + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()


def get(port, path):
    """One GET with no retry: (status, parsed JSON body)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class LocalCluster:
    def __init__(self, script, binary, cwd, base, cluster_dir=None):
        self.script, self.cwd, self.base = script, cwd, base
        self.env = dict(os.environ, KVATLAS_SERVER_BIN=binary, KVATLAS_SERVER="127.0.0.1:9",
                        KVATLAS_CLUSTER_PORT_BASE=str(base))
        self.env.pop("KVATLAS_CLUSTER_DIR", None)
        if cluster_dir:
            self.env["KVATLAS_CLUSTER_DIR"] = cluster_dir
        self.dir = os.path.join(cwd, cluster_dir or "cluster-data")

    def run(self, *args, expect=0):
        done = subprocess.run([self.script, *args], cwd=self.cwd, env=self.env,
                              capture_output=True, text=True, timeout=DEADLINE_S)
        out = done.stdout + done.stderr
        assert done.returncode == expect, (
            f"local-cluster {' '.join(args)}: exit {done.returncode}, expected {expect}:\n"
            f"{out}")
        return out

    def pid(self, i):
        with open(os.path.join(self.dir, f"n{i}.pid")) as f:
            return int(f.read())

    def rest(self, i):
        return self.base + 200 + i

    def kill_leftovers(self):
        for i in range(1, SERVERS + 1):
            try:
                os.kill(self.pid(i), signal.SIGKILL)
            except (OSError, ValueError):
                pass


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purposes: it is not our child, so look at its state.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def answers_now(cluster, i):
    status, body = get(cluster.rest(i), "/healthz")
    assert status == 200 and body == {"status": "ok"}, (i, status, body)


def repo_entries(source_dir):
    """The repository's top-level names, and the mtime of a cluster-data/ a user left there
    (other builds may touch build/ meanwhile: not compared)."""
    data = os.path.join(source_dir, "cluster-data")
    return set(os.listdir(source_dir)), os.path.getmtime(data) if os.path.exists(data) else None


def main():
    binary, source_dir = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    script = os.path.join(source_dir, "scripts", "local-cluster")
    work = tempfile.mkdtemp(prefix="kvatlas-local-cluster-")
    before = repo_entries(source_dir)
    clusters = []
    try:
        cluster = LocalCluster(script, binary, work, free_port_base(SERVERS))
        clusters.append(cluster)
        usage = cluster.run("--help")
        assert "KVATLAS_SERVER_BIN" in usage and "KVATLAS_CLUSTER_DIR" in usage, usage

        out = cluster.run("start", str(SERVERS))
        for i in range(1, SERVERS + 1):
            answers_now(cluster, i)
            assert f"server {i}: answering, /readyz: " in out, out
        print(f"  start {SERVERS}: every server answered /healthz when it returned", flush=True)

        out = cluster.run("status")
        states = [line.split(":")[1].split(",")[0].strip() for line in out.splitlines()]
        assert len(states) == SERVERS and set(states) <= {"leader", "follower"}, out

        victim = cluster.pid(1)
        cluster.run("kill", "1")
        assert not alive(victim), "kill 1 returned while server 1 still ran"
        assert "server 1: stopped" in cluster.run("status")

        cluster.run("restart", "1")
        answers_now(cluster, 1)
        status, body = get(cluster.rest(1), "/v1/cluster")
        assert status == 200 and body["id"] == 1, body
        print("  kill 1, restart 1: server 1 answered when restart returned", flush=True)

        # Another cluster on the same ports: its server cannot bind, and start says so
        # (rather than taking the first cluster's answer for its own).
        other = LocalCluster(script, binary, work, cluster.base, cluster_dir="other")
        clusters.append(other)
        out = other.run("start", "1", expect=1)
        assert "server 1 (pid" in out and "exited with status" in out and "n1.log" in out, out

        pids = [cluster.pid(i) for i in range(1, SERVERS + 1)]
        cluster.run("stop")
        assert not any(alive(p) for p in pids), "stop returned while a server ran"
        for i in range(1, SERVERS + 1):
            assert os.path.isdir(os.path.join(work, "cluster-data", f"n{i}", "db")), i
        after = repo_entries(source_dir)
        assert after == before, f"local-cluster wrote into the repository: {before} -> {after}"
        print("PASS local_cluster_test", flush=True)
    finally:
        for c in clusters:
            subprocess.run([script, "stop"], cwd=c.cwd, env=c.env, capture_output=True,
                           timeout=DEADLINE_S, check=False)
            c.kill_leftovers()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
