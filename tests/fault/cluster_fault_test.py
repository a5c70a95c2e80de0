#!/usr/bin/python3
"""Replication under faults: a 3-server kvatlas cluster on loopback, real processes.

usage: cluster_fault_test.py KVATLAS_SERVER_BINARY [CASE...]

Writers record every acknowledged write (a unique prompt per write) and the checker asks
every server for every acknowledged prompt afterwards: acked ⊆ applied on every survivor and
on restarted servers (the Jepsen "set" check), and the servers agree on the index size.
Bounded in time; only 127.0.0.1 ports picked free by the test; every process and directory
it creates is removed at the end.
"""

import base64
import contextlib
import json
import os
import random
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
    """n distinct loopback ports free now, drawn below Linux's ephemeral range (32768 and
    up): a port the kernel hands to another test's `:0` bind or outgoing connection could
    otherwise be taken between this check and the server's own bind (a raft listener
    failing with "raft_start" in a parallel CI run)."""
    socks, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", random.randrange(20000, 32000)))
        except OSError:
            s.close()
            continue
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    return ports


def make_auth(root, cluster_id=None):
    """A fresh cluster secret in `root` (mode 600) and a cluster id: the (cluster_id, path)
    a Node passes as --cluster-id/--cluster-secret-file (docs/security.md §Peers)."""
    path = os.path.join(root, "cluster.secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(base64.b64encode(os.urandom(32)).decode() + "\n")
    return (cluster_id or "test-" + os.urandom(4).hex(), path)


class Node:
    def __init__(self, binary, node_id, peers, data_dir, raft_listen=None, auth=None):
        self.binary, self.id, self.peers, self.data_dir = binary, node_id, peers, data_dir
        self.raft_listen = raft_listen
        self.auth = auth  # (cluster_id, secret file) from make_auth, or None
        self.extra = []
        self.proc = None
        self.base = None

    def command(self, http_listen="127.0.0.1:0"):
        """The server's argv; subclasses wrap it (e.g. `ip netns exec`)."""
        return [self.binary, "--data-dir", self.data_dir, "--id", str(self.id),
                "--peers", self.peers, "--http-listen", http_listen,
                "--rpc-listen", "127.0.0.1:0", "--raft-election-timeout-ms", "500",
                "--apply-timeout-ms", "3000",
                *(["--raft-listen", self.raft_listen] if self.raft_listen else []),
                *(["--cluster-id", self.auth[0], "--cluster-secret-file", self.auth[1]]
                  if self.auth else []), *self.extra]

    def start(self):
        addr_file = os.path.join(self.data_dir, "http.addr")
        if os.path.exists(addr_file):
            os.remove(addr_file)
        self.log = open(os.path.join(self.data_dir, "server.log"), "ab")
        self.proc = subprocess.Popen(self.command(), stdout=self.log, stderr=self.log)
        deadline = time.time() + DEADLINE_S
        # The file is written whole (rename) once the server listens.
        while not (os.path.exists(addr_file) and os.path.getsize(addr_file) > 0):
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
    def __init__(self, binary, n=3, extra=()):
        """`extra`: more server flags, the same for every server."""
        self.root = tempfile.mkdtemp(prefix="kvatlas-cluster-")
        ports = free_ports(n)
        peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        self.auth = make_auth(self.root)
        self.nodes = []
        for i in range(n):
            d = os.path.join(self.root, f"n{i + 1}")
            os.makedirs(d)
            self.nodes.append(Node(binary, i + 1, peers, d, auth=self.auth))
            self.nodes[-1].extra = list(extra)
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


@contextlib.contextmanager
def running_cluster(binary, n=3, extra=()):
    """A Cluster, removed on exit; its servers' log tails are printed when the body fails."""
    cluster = Cluster(binary, n, extra)
    try:
        yield cluster
    except BaseException:
        for node in cluster.nodes:
            print(f"--- server {node.id} log tail ---\n{node.log_tail()}", file=sys.stderr)
        raise
    finally:
        cluster.cleanup()


def home_group(model, block_size, groups, tenant="default"):
    """HomeGroup (placement.h): 1 + XXH3-64 of the context key's bytes (tenant, model, no
    LoRA, block size, no salt) mod the groups; every client computes it alike."""
    import xxhash  # python3-xxhash: only the multi-group tests need it

    def field(text):
        data = text.encode()
        assert len(data) < 128  # a one-byte varint length
        return bytes([len(data)]) + data
    assert block_size < 128
    key = field(tenant) + field(model) + field("") + bytes([block_size]) + field("")
    return 1 + xxhash.xxh3_64_intdigest(key) % groups


def wait_until(what, predicate, bound_s=DEADLINE_S):
    """Polls `predicate` every 50 ms until it holds; AssertionError naming `what` after
    `bound_s`."""
    deadline = time.time() + bound_s
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting until {what}")


def current_leader(nodes):
    """The live node that says it leads right now, or None (no waiting)."""
    for node in nodes:
        if node.alive():
            status, body = node.request("GET", "/v1/cluster")
            if status == 200 and body["state"] == "leader":
                return node
    return None


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


def load_entries(node, entries, seed=7):
    """Writes `entries` entries to `node` in requests of ten 1,000-block stored events of
    one holder (random block hashes from `seed`): a large state quickly."""
    rng = random.Random(seed)
    done = 0
    while done < entries:
        events = []
        for _ in range(10):
            n = min(1000, entries - done)
            if n <= 0:
                break
            events.append({"event_type": "stored", "model_name": "bench", "block_size": 16,
                           "backend_id": "h", "parent_hash": rng.getrandbits(63),
                           "seq_hashes": [rng.getrandbits(63) for _ in range(n)]})
            done += n
        status, body = node.request("POST", "/v1/events", {"events": events})
        assert status == 200, (status, body)


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


def request_with_headers(node, method, path, body, headers):
    """Like Node.request, with extra request headers; also returns the answer's headers."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(node.base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null"), dict(resp.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), dict(e.headers)


def addr_of(node, name):
    with open(os.path.join(node.data_dir, name)) as f:
        return f.read().strip()


def wait_addresses_known(cluster, nodes=None):
    """Until every live server's GET /v1/cluster names every member's addresses."""
    nodes = [n for n in (nodes or cluster.nodes) if n.alive()]
    deadline = time.time() + DEADLINE_S
    while True:
        bodies = [node.request("GET", "/v1/cluster") for node in nodes]
        if all(status == 200 and body["leader_http_address"] and all(
                m["http_address"] and m["rpc_address"] for m in body["members"])
               for status, body in bodies):
            return [body for _, body in bodies]
        assert time.time() < deadline, bodies
        time.sleep(0.05)


def case_replicate_and_follower_refuses(binary):
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(50)]
        assert all(rev for _, rev in acked), acked
        follower = next(n for n in cluster.nodes if n is not leader)
        wait_addresses_known(cluster)
        # A write to a follower is forwarded to the leader and answered with its answer.
        event = {"event_type": "stored", "model_name": "m", "block_size": BS, "backend_id": "w",
                 "token_ids": prompt(999)}
        status, body, headers = request_with_headers(follower, "POST", "/v1/events",
                                                     {"events": [event]}, {})
        assert status == 200 and body["revision"] > 0, (status, body)
        assert headers.get("X-Kvatlas-Forwarded-From") == str(follower.id), headers
        acked.append((999, body["revision"]))
        # A request a follower already forwarded is never forwarded again.
        status, body, headers = request_with_headers(
            follower, "POST", "/v1/events", {"events": [event]}, {"X-Kvatlas-Forwarded": "7"})
        assert status == 421 and body["code"] == "not_leader", (status, body)
        assert body["leader_id"] == leader.id, body
        assert body["leader_http_address"] == addr_of(leader, "http.addr"), body
        assert body["leader_rpc_address"] == addr_of(leader, "rpc.addr"), body
        check_acked(cluster, acked, cluster.nodes)
        status, body = follower.request("GET", "/v1/cluster")
        assert body["leader_id"] == leader.id and len(body["members"]) == 3, body
        # Read your writes on a follower: wait for the revision the write was answered with.
        rev = write(leader, 500)
        query = {"model": "m", "token_ids": prompt(500), "block_size": BS, "min_revision": rev}
        status, body = follower.request("POST", "/query", query)
        assert status == 200 and body["default"]["w"]["GPU"] == 2 * BS, (status, body)
        # Linearizable reads go through the leader: a follower forwards them.
        query = {"model": "m", "token_ids": prompt(500), "block_size": BS,
                 "consistency": "linearizable"}
        status, body, headers = request_with_headers(follower, "POST", "/query", query, {})
        assert status == 200 and body["default"]["w"]["GPU"] == 2 * BS, (status, body)
        assert headers.get("X-Kvatlas-Forwarded-From") == str(follower.id), headers
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


def cli_binary(server_binary):
    cli = os.environ.get("KVATLAS_CLI") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(server_binary))), "client", "kvatlas")
    assert os.access(cli, os.X_OK), f"no kvatlas CLI at {cli} (set KVATLAS_CLI)"
    return cli


def run_cli(cli, *args, stdin=None):
    env = dict(os.environ)
    env.pop("KVATLAS_HTTP", None)
    env.pop("KVATLAS_SERVER", None)
    done = subprocess.run([cli, "--timeout-ms", "5000", *args], input=stdin,
                          capture_output=True, text=True, timeout=DEADLINE_S, env=env)
    return done.returncode, done.stdout, done.stderr


def case_addresses_cli_and_client(binary):
    """Every server names every member's addresses; the CLI's cluster commands; the client
    library follows not_leader from a follower's binary-protocol endpoint to the leader."""
    cli = cli_binary(binary)
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        bodies = wait_addresses_known(cluster)
        for body in bodies:
            by_id = {m["id"]: m for m in body["members"]}
            assert sorted(by_id) == [1, 2, 3], body
            for node in cluster.nodes:
                assert by_id[node.id]["http_address"] == addr_of(node, "http.addr"), body
                assert by_id[node.id]["rpc_address"] == addr_of(node, "rpc.addr"), body
            assert body["leader_id"] == leader.id, body
            assert body["leader_http_address"] == addr_of(leader, "http.addr"), body
            assert body["leader_rpc_address"] == addr_of(leader, "rpc.addr"), body
        follower = next(n for n in cluster.nodes if n is not leader)

        # CLI status, through a follower, human and JSON.
        code, out, err = run_cli(cli, "cluster", "status", "--http", addr_of(follower, "http.addr"))
        assert code == 0, (out, err)
        assert f"leader {leader.id}" in out and addr_of(leader, "http.addr") in out, out
        code, out, err = run_cli(cli, "cluster", "status", "--json",
                                 "--http", addr_of(follower, "http.addr"))
        assert code == 0 and json.loads(out)["leader_id"] == leader.id, (out, err)

        # The client library, given only a follower's RPC endpoint, follows not_leader.
        events = "\n".join(json.dumps({"event_type": "stored", "model_name": "m",
                                       "block_size": BS, "backend_id": "w",
                                       "token_ids": prompt(i)}) for i in range(700, 710))
        code, out, err = run_cli(cli, "--server", addr_of(follower, "rpc.addr"), "ingest", "-",
                                 stdin=events + "\n")
        assert code == 0 and "ingested 10 events" in out, (code, out, err)
        revision = int(out.rsplit("revision ", 1)[1].rstrip(")\n"))
        check_acked(cluster, [(i, revision) for i in range(700, 710)], cluster.nodes)

        # Transfer through a follower: the change is forwarded to the leader.
        code, out, err = run_cli(cli, "cluster", "transfer", "--http",
                                 addr_of(follower, "http.addr"))
        assert code == 0 and "transferred" in out, (code, out, err)
        new_leader = cluster.leader(exclude=(leader.id,))
        assert new_leader is not leader
        # The new leader's addresses are known everywhere already.
        deadline = time.time() + DEADLINE_S
        while True:
            status, body = leader.request("GET", "/v1/cluster")
            if status == 200 and body["leader_id"] == new_leader.id:
                break
            assert time.time() < deadline, body
            time.sleep(0.05)
        assert body["leader_http_address"] == addr_of(new_leader, "http.addr"), body

        # Remove a follower through the other follower (forwarded), with --json.
        victim = next(n for n in cluster.nodes if n is not new_leader and n is not leader)
        code, out, err = run_cli(cli, "cluster", "remove", str(victim.id), "--json",
                                 "--http", addr_of(leader, "http.addr"))
        assert code == 0 and json.loads(out)["removed"] == victim.id, (code, out, err)
        deadline = time.time() + DEADLINE_S
        while sorted(m["id"] for m in new_leader.request("GET", "/v1/cluster")[1]["members"]) \
                != sorted([leader.id, new_leader.id]):
            assert time.time() < deadline, new_leader.request("GET", "/v1/cluster")
            time.sleep(0.05)
        assert write(leader, 800), "a write through the remaining follower after the removal"

        # Errors: a bad command line is 2, an unreachable server 1 with an explanation.
        code, out, err = run_cli(cli, "cluster", "remove", "zero")
        assert code == 2 and "remove ID" in err, (code, err)
        port = free_ports(1)[0]
        code, out, err = run_cli(cli, "cluster", "status", "--http", f"127.0.0.1:{port}")
        assert code == 1 and "cannot reach" in err, (code, err)
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
                target = current_leader(cluster.nodes)
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


def assert_stream_resumed(node, holder="e1", entries=4):
    """`node` follows one stream, resumed at sequence 2 with no batch lost, and holds
    `entries` of `holder`'s entries: no block applied twice."""
    status, streams = node.request("GET", "/v1/streams")
    stream = streams["streams"][0]
    assert stream["last_seq"] == 2 and stream["lost_batches"] == 0, stream
    status, holders = node.request("GET", "/v1/holders")
    held = [h["entries"] for h in holders["holders"] if h["holder_id"] == holder]
    assert held == [entries], holders


def case_engine_stream_fails_over(binary):
    """Only the leader follows an engine; a new leader resumes from the replicated position."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    import zmq_ingest_test as z  # the fake engine driver
    cluster = Cluster(binary)
    fake = z.Fake()
    try:
        leader = cluster.leader()
        fake.register_on(leader)
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
        assert_stream_resumed(new_leader)
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
        joiner = Node(binary, 4, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}",
                      auth=cluster.auth)
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
        # A small disk wants small raft segments (libraft preallocates ~3 of them).
        node.extra = ["--min-free-disk-bytes", str(100 << 20),
                      "--raft-segment-bytes", str(8 << 20)]
        node.start()
        assert write(node, 1)
        # Fill the disk to half the watermark below it. The balloon is sized from the
        # free space measured now, because what the server preallocates (WAL, raft
        # segments) depends on its memory and segment options.
        stat = os.statvfs(root)
        balloon = stat.f_bavail * stat.f_frsize - (50 << 20)
        assert balloon > 0, f"only {stat.f_bavail * stat.f_frsize} bytes free on the tmpfs"
        with open(os.path.join(root, "balloon"), "wb") as f:
            f.write(b"\0" * balloon)
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


def case_replace_dead(binary):
    """docs/operations.md §Replacing a dead server: a follower dies with its disk; the two
    left keep taking writes, the dead one is removed, a new server with a new id and an
    empty data directory is added and catches up; no acknowledged write is lost."""
    cluster = Cluster(binary)
    try:
        leader = cluster.leader()
        acked = [(i, write(leader, i)) for i in range(40)]
        dead = next(n for n in cluster.nodes if n.id != leader.id)
        dead.kill(signal.SIGKILL)
        shutil.rmtree(dead.data_dir)  # the disk is gone with it
        acked += [(i, write(leader, i)) for i in range(40, 60)]  # 2 of 3 still commit
        assert all(rev for _, rev in acked), acked
        status, body = leader.request("DELETE", f"/v1/cluster/members/{dead.id}")
        assert status == 200, body
        port = free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        replacement = Node(binary, 4, cluster.nodes[0].peers, d,
                           raft_listen=f"127.0.0.1:{port}", auth=cluster.auth)
        replacement.start()
        cluster.nodes.append(replacement)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        live = [n for n in cluster.nodes if n.alive()]
        deadline = time.time() + DEADLINE_S  # promoted once it caught up
        while True:
            members = leader.request("GET", "/v1/cluster")[1]["members"]
            roles = {m["id"]: m["role"] for m in members}
            if roles == {n.id: "voter" for n in live}:
                break
            assert time.time() < deadline, members
            time.sleep(0.05)
        acked += [(i, write(leader, i)) for i in range(60, 80)]
        assert all(rev for _, rev in acked), acked
        check_acked(cluster, acked, live)
        # The new voter counts: with the old leader gone, the other two elect and serve.
        leader.kill(signal.SIGKILL)
        survivor = cluster.leader(exclude=(leader.id,))
        assert write(survivor, 80), "a write after losing the old leader"
    finally:
        cluster.cleanup()


def case_leader_stop_drains(binary):
    """A leader asked to stop (SIGTERM) hands its leadership over first: writes sent through
    a follower meanwhile all succeed (one the old leader refused as it handed over is
    forwarded again to the new one), and none is lost."""
    with running_cluster(binary) as cluster:
        leader = cluster.leader()
        via = next(n for n in cluster.nodes if n.id != leader.id)
        wait_until("every member's addresses are known", lambda: all(
            m.get("http_address") for m in via.request("GET", "/v1/cluster")[1]["members"]))
        acked, failed, stop = [], [], threading.Event()

        def writer():
            i = 0
            while not stop.is_set():
                rev = write(via, i)
                (acked if rev else failed).append((i, rev))
                i += 1

        thread = threading.Thread(target=writer)
        thread.start()
        try:
            time.sleep(1.0)
            leader.kill(signal.SIGTERM)
            time.sleep(1.5)
        finally:
            stop.set()
            thread.join()
        assert not failed, f"writes failed while the leader stopped: {failed}"
        assert "every group is led by another server" in leader.log_tail(), leader.log_tail()
        survivors = [n for n in cluster.nodes if n.id != leader.id]
        check_acked(cluster, acked, survivors)


CASES = {
    "replicate": case_replicate_and_follower_refuses,
    "addresses": case_addresses_cli_and_client,
    "kill_leader": case_kill_leader_under_load,
    "kill_all": case_kill_all_and_restart,
    "rebuild": case_rebuild_from_log,
    "engine_failover": case_engine_stream_fails_over,
    "membership": case_membership,
    "replace_dead": case_replace_dead,
    "disk_low": case_disk_low,
    "leader_stop_drains": case_leader_stop_drains,
}


def run_cases(cases):
    """The fault tests' main: argv = BINARY [CASE...]; runs the named cases (default all),
    reports each, exits non-zero if any failed. SIGTERM (ctest's timeout) runs cleanups."""
    binary = sys.argv[1]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    names = sys.argv[2:] or list(cases)
    failed = []
    for name in names:
        start = time.time()
        try:
            cases[name](binary)
            print(f"PASS {name} ({time.time() - start:.1f}s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report every case
            failed.append(name)
            print(f"FAIL {name}: {e!r}", flush=True)
            import traceback
            traceback.print_exc()
    print(f"{len(names) - len(failed)}/{len(names)} cases passed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    run_cases(CASES)
