#!/usr/bin/python3
"""Replication under faults: a 3-server kvatlas cluster on loopback, real processes.

usage: cluster_fault_test.py KVATLAS_SERVER_BINARY [CASE...]

Writers record every acknowledged write (a unique prompt per write) and the checker asks
every server for every acknowledged prompt afterwards: acked ⊆ applied on every survivor and
on restarted servers (the Jepsen "set" check), and the servers agree on the index size.
Bounded in time; only 127.0.0.1 ports picked free by the test; every process and directory
it creates is removed at the end.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

DEADLINE_S = 20.0
BS = 4


def free_ports(n):
    socks, ports = [], []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


class Node:
    def __init__(self, binary, node_id, peers, data_dir, raft_listen=None):
        self.binary, self.id, self.peers, self.data_dir = binary, node_id, peers, data_dir
        self.raft_listen = raft_listen
        self.extra = []
        self.proc = None
        self.base = None

    def start(self):
        addr_file = os.path.join(self.data_dir, "http.addr")
        if os.path.exists(addr_file):
            os.remove(addr_file)
        self.log = open(os.path.join(self.data_dir, "server.log"), "ab")
        self.proc = subprocess.Popen(
            [self.binary, "--data-dir", self.data_dir, "--id", str(self.id), "--peers", self.peers,
             "--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0",
             "--raft-election-timeout-ms", "500", "--apply-timeout-ms", "3000",
             *(["--raft-listen", self.raft_listen] if self.raft_listen else []), *self.extra],
            stdout=self.log, stderr=self.log)
        deadline = time.time() + DEADLINE_S
        while not os.path.exists(addr_file):
            if self.proc.poll() is not None or time.time() > deadline:
                raise AssertionError(f"server {self.id} did not start:\n" + self.log_tail())
            time.sleep(0.02)
        with open(addr_file) as f:
            self.base = "http://" + f.read().strip()

    def log_tail(self):
        with open(os.path.join(self.data_dir, "server.log"), "rb") as f:
            return f.read()[-2500:].decode(errors="replace")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig=signal.SIGKILL):
        if self.alive():
            self.proc.send_signal(sig)
            self.proc.wait(timeout=DEADLINE_S)
        self.log.close()

    def request(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status, json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError) as e:
            return 0, {"message": str(e)}


class Cluster:
    def __init__(self, binary, n=3):
        self.root = tempfile.mkdtemp(prefix="kvatlas-cluster-")
        ports = free_ports(n)
        peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        self.nodes = []
        for i in range(n):
            d = os.path.join(self.root, f"n{i + 1}")
            os.makedirs(d)
            self.nodes.append(Node(binary, i + 1, peers, d))
        for node in self.nodes:
            node.start()

    def leader(self, exclude=()):
        """The node every live node agrees leads, once there is one (bounded wait)."""
        deadline = time.time() + DEADLINE_S
        while time.time() < deadline:
            for node in self.nodes:
                if not node.alive() or node.id in exclude:
                    continue
                status, body = node.request("GET", "/v1/cluster")
                if status == 200 and body["state"] == "leader" and body["id"] == node.id:
                    return node
            time.sleep(0.05)
        raise AssertionError("no leader elected:\n" + "\n".join(n.log_tail() for n in self.nodes))

    def cleanup(self):
        for node in self.nodes:
            try:
                node.kill(signal.SIGKILL)
            except Exception:  # noqa: BLE001 - best effort
                pass
        shutil.rmtree(self.root, ignore_errors=True)


def prompt(i):
    return [1_000_000 + i * 16 + k for k in range(2 * BS)]


def write(node, i):
    """One write (a unique 2-block prompt held by holder 'w'); the revision if acked."""
    event = {"event_type": "stored", "model_name": "m", "block_size": BS, "backend_id": "w",
             "token_ids": prompt(i)}
    status, body = node.request("POST", "/v1/events", {"events": [event]})
    return body["revision"] if status == 200 else None


def holds(node, i):
    status, body = node.request("POST", "/query", {"model": "m", "token_ids": prompt(i),
                                                   "block_size": BS})
    return status == 200 and body.get("default", {}).get("w", {}).get("GPU") == 2 * BS


def wait_applied(node, revision):
    deadline = time.time() + DEADLINE_S
    while time.time() < deadline:
        status, body = node.request("GET", "/v1/cluster")
        if status == 200 and body["revision"] >= revision:
            return
        time.sleep(0.02)
    raise AssertionError(f"server {node.id} did not reach revision {revision}")


def check_acked(cluster, acked, nodes):
    last = max(rev for _, rev in acked)
    for node in nodes:
        wait_applied(node, last)
        missing = [i for i, _ in acked if not holds(node, i)]
        assert not missing, f"server {node.id} lost acked writes {missing[:10]}"
    sizes = set()
    for node in nodes:
        status, body = node.request("GET", "/v1/stats")
        sizes.add(body["index"]["entries"])
    assert len(sizes) == 1, f"servers disagree on the index size: {sizes}"


def case_replicate_and_follower_refuses(binary):
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(50)]
        assert all(rev for _, rev in acked), acked
        follower = next(n for n in cluster.nodes if n is not leader)
        status, body = follower.request("POST", "/v1/events", {"events": [
            {"event_type": "stored", "model_name": "m", "block_size": BS, "backend_id": "x",
             "token_ids": prompt(999)}]})
        assert status == 421 and body["code"] == "not_leader", (status, body)
        assert f"server {leader.id}" in body["message"], body
        check_acked(cluster, acked, cluster.nodes)
        status, body = follower.request("GET", "/v1/cluster")
        assert body["leader_id"] == leader.id and len(body["members"]) == 3, body
        # Read your writes on a follower: wait for the revision the write was answered with.
        rev = write(leader, 500)
        query = {"model": "m", "token_ids": prompt(500), "block_size": BS, "min_revision": rev}
        status, body = follower.request("POST", "/query", query)
        assert status == 200 and body["default"]["w"]["GPU"] == 2 * BS, (status, body)
        # Linearizable reads go through the leader.
        query = {"model": "m", "token_ids": prompt(500), "block_size": BS,
                 "consistency": "linearizable"}
        assert follower.request("POST", "/query", query)[0] == 421
        status, body = leader.request("POST", "/query", query)
        assert status == 200 and body["default"]["w"]["GPU"] == 2 * BS, (status, body)
        query["consistency"] = "strong"
        status, body = leader.request("POST", "/query", query)
        assert status == 400 and "consistency" in body["message"], body
        query = {"model": "m", "token_ids": prompt(500), "block_size": BS,
                 "min_revision": 10**9}
        status, body = follower.request("POST", "/v1/lookup", dict(query, model_name="m"))
        assert status == 504 and "min_revision" in body["message"], (status, body)
    finally:
        cluster.cleanup()


def case_kill_leader_under_load(binary):
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked, lock, stop = [], threading.Lock(), threading.Event()
        counter = [0]

        def writer():
            while not stop.is_set():
                with lock:
                    i = counter[0]
                    counter[0] += 1
                target = None
                for node in cluster.nodes:
                    if node.alive():
                        status, body = node.request("GET", "/v1/cluster")
                        if status == 200 and body["state"] == "leader":
                            target = node
                            break
                if target is None:
                    time.sleep(0.02)
                    continue
                rev = write(target, i)
                if rev:
                    with lock:
                        acked.append((i, rev))

        threads = [threading.Thread(target=writer) for _ in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        killed_at = time.time()
        leader.kill(signal.SIGKILL)
        new_leader = cluster.leader(exclude=(leader.id,))
        failover = time.time() - killed_at
        time.sleep(1.5)
        stop.set()
        for t in threads:
            t.join(timeout=DEADLINE_S)
        survivors = [n for n in cluster.nodes if n.alive()]
        check_acked(cluster, acked, survivors)
        leader.start()  # the killed leader comes back on its data directory
        check_acked(cluster, acked, cluster.nodes)
        print(f"  {len(acked)} acked writes, failover {failover:.2f}s "
              f"(new leader {new_leader.id})", flush=True)
        assert failover < 5, failover
    finally:
        cluster.cleanup()


def case_kill_all_and_restart(binary):
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(100)]
        assert all(rev for _, rev in acked)
        for node in cluster.nodes:
            node.kill(signal.SIGKILL)
        for node in cluster.nodes:
            node.start()
        cluster.leader()
        check_acked(cluster, acked, cluster.nodes)
    finally:
        cluster.cleanup()


def case_rebuild_from_log(binary):
    """A server marked for rebuild (its raft log failed) restarts from an empty database."""
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(60)]
        follower = next(n for n in cluster.nodes if n is not leader)
        follower.kill(signal.SIGTERM)
        open(os.path.join(follower.data_dir, "raft", "REBUILD_STATE"), "w").close()
        follower.start()
        check_acked(cluster, acked, cluster.nodes)
        assert not os.path.exists(os.path.join(follower.data_dir, "raft", "REBUILD_STATE"))
        assert "rebuilding the state from the raft log" in follower.log_tail()
    finally:
        cluster.cleanup()


def case_engine_stream_fails_over(binary):
    """Only the leader follows an engine; a new leader resumes from the replicated position."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    import zmq_ingest_test as z  # the fake engine driver
    cluster = Cluster(binary)
    fake = z.Fake()
    try:
        leader = cluster.leader()
        status, body = leader.request("POST", "/register", {
            "endpoint": fake.endpoint, "replay_endpoint": fake.replay_endpoint, "type": "vLLM",
            "modelname": "m", "instance_id": "e1", "block_size": z.BS})
        assert status == 200, body
        assert fake.cmd(op="wait_peer", count=1, timeout_ms=5000)["ok"]
        fake.store(z.PROMPT[:2 * z.BS])

        def gpu(node):
            status, body = node.request("POST", "/query", {"model": "m", "block_size": z.BS,
                                                           "token_ids": z.PROMPT})
            return body.get("default", {}).get("e1", {}).get("GPU") if status == 200 else None

        deadline = time.time() + DEADLINE_S
        while not all(gpu(n) == 2 * z.BS for n in cluster.nodes) and time.time() < deadline:
            time.sleep(0.05)
        assert all(gpu(n) == 2 * z.BS for n in cluster.nodes), "not replicated"
        leader.kill(signal.SIGKILL)
        # While no leader follows it, the engine goes on; the new leader connects, sees a
        # sequence past the replicated position and replays exactly the gap.
        fake.store(z.PROMPT[:3 * z.BS], from_block=2)
        new_leader = cluster.leader(exclude=(leader.id,))
        assert fake.cmd(op="wait_peer", count=1, timeout_ms=10000)["ok"]
        fake.store(z.PROMPT[:4 * z.BS], from_block=3)
        deadline = time.time() + DEADLINE_S
        survivors = [n for n in cluster.nodes if n.alive()]
        while not all(gpu(n) == 4 * z.BS for n in survivors) and time.time() < deadline:
            time.sleep(0.05)
        assert all(gpu(n) == 4 * z.BS for n in survivors), [gpu(n) for n in survivors]
        status, streams = new_leader.request("GET", "/v1/streams")
        stream = streams["streams"][0]
        assert stream["last_seq"] == 2 and stream["lost_batches"] == 0, stream
        status, holders = new_leader.request("GET", "/v1/holders")
        entries = [h["entries"] for h in holders["holders"] if h["holder_id"] == "e1"]
        assert entries == [4], holders  # no block applied twice
    finally:
        fake.close()
        cluster.cleanup()


def case_membership(binary):
    """Add a fourth server at run time, move leadership to it, remove an original one."""
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(40)]
        port = free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        joiner = Node(binary, 4, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}")
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        check_acked(cluster, acked, cluster.nodes)  # the new server caught up
        status, body = leader.request("POST", "/v1/cluster/transfer", {"id": 4})
        assert status == 200, body
        deadline = time.time() + DEADLINE_S
        while joiner.request("GET", "/v1/cluster")[1]["state"] != "leader":
            assert time.time() < deadline, "server 4 did not take over"
            time.sleep(0.05)
        status, body = joiner.request("DELETE", "/v1/cluster/members/2")
        assert status == 200, body
        deadline = time.time() + DEADLINE_S  # the status refreshes every 50 ms
        while sorted(m["id"] for m in joiner.request("GET", "/v1/cluster")[1]["members"]) != [1, 3, 4]:
            assert time.time() < deadline, joiner.request("GET", "/v1/cluster")
            time.sleep(0.05)
        acked += [(i, write(joiner, i)) for i in range(40, 60)]
        assert all(rev for _, rev in acked)
        check_acked(cluster, acked, [n for n in cluster.nodes if n.id != 2])
        status, body = leader.request("POST", "/v1/cluster/members", {"id": 0})
        assert status in (400, 421), (status, body)
    finally:
        cluster.cleanup()


def case_disk_low(binary):
    """Below the free-space watermark writes are refused, and accepted again after."""
    root = tempfile.mkdtemp(prefix="kvatlas-disk-")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", root],
                             capture_output=True).returncode == 0
    if not mounted:
        print("  SKIP disk_low: cannot mount a tmpfs here (needs root)", flush=True)
        shutil.rmtree(root, ignore_errors=True)
        return
    node = None
    try:
        d = os.path.join(root, "n1")
        os.makedirs(d)
        node = Node(binary, 1, "", d)
        node.extra = ["--min-free-disk-bytes", str(100 << 20)]
        node.start()
        assert write(node, 1)
        with open(os.path.join(root, "balloon"), "wb") as f:
            f.write(b"\0" * (100 << 20))
        deadline = time.time() + DEADLINE_S
        while True:
            event = {"event_type": "stored", "model_name": "m", "block_size": BS,
                     "backend_id": "w", "token_ids": prompt(2)}
            status, body = node.request("POST", "/v1/events", {"events": [event]})
            if status == 429 and "disk space low" in body["message"]:
                break
            assert time.time() < deadline, (status, body)
            time.sleep(0.1)
        assert holds(node, 1)  # reads go on
        os.remove(os.path.join(root, "balloon"))
        deadline = time.time() + DEADLINE_S
        while not write(node, 3):
            assert time.time() < deadline, "writes not accepted after space returned"
            time.sleep(0.1)
        assert node.alive()
    finally:
        if node:
            node.kill(signal.SIGKILL)
        subprocess.run(["umount", root], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


CASES = {
    "replicate": case_replicate_and_follower_refuses,
    "kill_leader": case_kill_leader_under_load,
    "kill_all": case_kill_all_and_restart,
    "rebuild": case_rebuild_from_log,
    "engine_failover": case_engine_stream_fails_over,
    "membership": case_membership,
    "disk_low": case_disk_low,
}


def main():
    binary = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    failed = []
    for name in names:
        start = time.time()
        try:
            CASES[name](binary)
            print(f"PASS {name} ({time.time() - start:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            failed.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)
            import traceback
            traceback.print_exc()
    print(f"{len(names) - len(failed)}/{len(names)} cases passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
