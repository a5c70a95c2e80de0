#!/usr/bin/python3
"""Replica audits catch a replica whose state diverged (docs/replication.md §Replica audits).

usage: audit_test.py KVATLAS_SERVER_BINARY CORRUPT_STATE_BINARY

A 3-server cluster on loopback with audits every 200 ms takes writes; every server reports
audit "ok". A follower is stopped (SIGTERM), one entry record is deleted from its RocksDB
state offline (corrupt_state: what a lost write or a bad disk would leave; its applied index
is kept, so nothing replays over it), and it is started again under more writes. Within a
bounded time it must report audit "diverged" in GET /v1/cluster (with both digests and the
audit point), refuse reads (lookups, Conductor queries, listings, watches) with 503
`unavailable` naming the divergence, fail /readyz saying so, export kvatlas_audit_diverged 1,
and log it; the two healthy servers stay "ok", ready and readable. Prints the time from the
restart to the detection. Loopback only, bounded in time, cleaned up.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

INTERVAL_MS = 200
BOUND_S = 30.0


def audit_of(node):
    status, body = node.request("GET", "/v1/cluster")
    assert status == 200, (node.id, status, body)
    return body["audit"]


def wait_audit(node, wanted, bound=BOUND_S):
    deadline = time.time() + bound
    audit = None
    while time.time() < deadline:
        audit = audit_of(node)
        if audit["status"] == wanted:
            return audit
        time.sleep(0.02)
    raise AssertionError(f"server {node.id}: audit status {wanted!r} not reached in {bound} s: "
                         f"{audit}\n{node.log_tail()}")


def metric(node, name):
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        for line in resp.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"server {node.id}: no metric {name}")


def lookup(node, i):
    return node.request("POST", "/v1/lookup", {"model_name": "m", "block_size": h.BS,
                                               "token_ids": h.prompt(i)})


def main():
    binary, corrupt = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    cluster = h.Cluster(binary, extra=["--audit-interval-ms", str(INTERVAL_MS)])
    try:
        leader = cluster.leader()
        acked = [(i, h.write(leader, i)) for i in range(40)]
        assert all(rev for _, rev in acked), acked
        for node in cluster.nodes:
            h.wait_applied(node, acked[-1][1])
        # Healthy: every server's audit says ok, at the same audit point and digest as the
        # leader's sooner or later (audits go on while idle, every 10 intervals).
        for node in cluster.nodes:
            audit = wait_audit(node, "ok")
            assert audit["digest"] == audit["leader_digest"], audit
            # One build: the leader's digest scheme is this server's.
            assert audit["digest_scheme"] >= 1, audit
            assert audit["leader_digest_scheme"] == audit["digest_scheme"], audit
            assert metric(node, "kvatlas_audit_diverged") == 0
            assert metric(node, "kvatlas_audit_checks_total") >= 1
        follower = next(n for n in cluster.nodes if n is not leader)
        healthy = [n for n in cluster.nodes if n is not follower]

        follower.kill(signal.SIGTERM)
        done = subprocess.run([corrupt, os.path.join(follower.data_dir, "db")],
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        print(f"  server {follower.id}: {done.stdout.strip()}", flush=True)

        stop = threading.Event()

        def writer():
            i = 1000
            while not stop.is_set():
                h.write(leader, i)
                i += 1
                time.sleep(0.1)

        thread = threading.Thread(target=writer, daemon=True)
        thread.start()
        try:
            restarted = time.time()
            follower.start()
            audit = wait_audit(follower, "diverged")
            detected = time.time() - restarted
        finally:
            stop.set()
            thread.join(timeout=10)
        print(f"  server {follower.id}: diverged {detected:.2f} s after its restart "
              f"(audit every {INTERVAL_MS} ms): {audit}", flush=True)
        assert audit["digest"] != audit["leader_digest"], audit
        assert audit["index"] > 0 and audit["mismatches"] >= 1, audit
        index = audit["index"]

        # It serves no reads, and says why (naming the audit point it last compared: audits
        # go on meanwhile, so that may be a later one than `index`).
        said = re.compile(r"diverged from the leader's at log index (\d+) \(replica digest "
                          r"[0-9a-f]{16}, leader's ([0-9a-f]{16})\); it serves no reads")
        for method, path, body in [
                ("POST", "/v1/lookup", {"model_name": "m", "block_size": h.BS,
                                        "token_ids": h.prompt(1)}),
                ("POST", "/query", {"model": "m", "block_size": h.BS, "token_ids": h.prompt(1)}),
                ("GET", "/v1/holders", None),
                ("GET", "/v1/contexts", None),
                ("GET", "/v1/watch?from=0", None),
                ("GET", "/readyz", None)]:
            status, answer = follower.request(method, path, body)
            assert status == 503 and answer.get("code") == "unavailable", (path, status, answer)
            message = answer.get("message", "")
            m = said.search(message)
            assert m and int(m.group(1)) >= index and "docs/operations.md" in message, (
                path, answer)
        assert metric(follower, "kvatlas_audit_diverged") == 1
        assert metric(follower, "kvatlas_audit_last_index") >= index
        assert "replica audit: this replica's state diverged" in follower.log_tail()

        # The healthy servers compared the same audit points and found them equal.
        for node in healthy:
            audit = audit_of(node)
            assert audit["status"] == "ok", (node.id, audit)
            assert metric(node, "kvatlas_audit_diverged") == 0
            status, _ = node.request("GET", "/readyz")
            assert status == 200, (node.id, status)
            status, answer = lookup(node, 1)
            assert status == 200, (node.id, status, answer)
            assert h.holds(node, 1), node.id
        print("PASS audit_test", flush=True)
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
