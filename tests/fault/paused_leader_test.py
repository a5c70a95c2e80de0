#!/usr/bin/python3
"""Requests held by a paused old leader (docs/replication.md §Writes on followers).

usage: paused_leader_test.py KVATLAS_SERVER_BINARY

A 3-server cluster (election timeout 500 ms). The leader is paused (SIGSTOP) until the
others elect a new one; then linearizable reads and writes are sent to the paused server
(they wait in its listen queue) and it is resumed (SIGCONT). It wakes up believing it still
leads, and its own status says so until the next refresh; each held request must end as a
client can act on: 200 (run on, or forwarded to, the new leader), a 421 naming a leader
other than the old one, or a 503 (the outcome of a write unknown). A 421 naming the old
leader itself ("send it here again", while it is not the leader) is the failure this test
exists for. A write held by a server that can reach no leader at all ends 503 with
"applied": false. Several rounds; loopback only, bounded in time, cleaned up.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

ROUNDS = 3
REQUESTS = 8  # per round, half reads and half writes


def lookup(i):
    return {"model_name": "m", "block_size": h.BS, "token_ids": h.prompt(i),
            "consistency": "linearizable"}


def event(i):
    return {"events": [{"event_type": "stored", "model_name": "m", "block_size": h.BS,
                        "backend_id": "w", "token_ids": h.prompt(i)}]}


def one_round(binary, round_no):
    cluster = h.Cluster(binary)
    try:
        h.wait_addresses_known(cluster)
        old = cluster.leader()
        old.proc.send_signal(signal.SIGSTOP)
        new = cluster.leader(exclude=(old.id,))
        answers = [None] * REQUESTS

        def send(k):
            i = round_no * 1000 + k
            path, body = ("/v1/lookup", lookup(i)) if k % 2 == 0 else ("/v1/events", event(i))
            answers[k] = (path, *old.request("POST", path, body))

        threads = [threading.Thread(target=send, args=(k,), daemon=True)
                   for k in range(REQUESTS)]
        for t in threads:
            t.start()
        time.sleep(0.3)  # the requests are in the paused server's listen queue
        old.proc.send_signal(signal.SIGCONT)
        for t in threads:
            t.join(timeout=h.DEADLINE_S)
        failures = []
        for path, status, body in answers:
            if status == 421 and body.get("leader_id") == old.id:
                failures.append(f"{path}: 421 naming the old leader {old.id} itself: {body}")
            elif status not in (200, 421, 503):
                failures.append(f"{path}: {status} {body}")
            elif status == 421 and body.get("applied") is not False:
                failures.append(f"{path}: a 421 without \"applied\": false: {body}")
            elif status == 421 and body.get("leader_id") not in (0, new.id):
                failures.append(f"{path}: 421 naming {body.get('leader_id')}, not the new "
                                f"leader {new.id}: {body}")
        counts = {}
        for _, status, _ in answers:
            counts[status] = counts.get(status, 0) + 1
        print(f"round {round_no}: old leader {old.id}, new {new.id}; answers {counts}")
        assert not failures, "\n".join(failures)
    finally:
        for node in cluster.nodes:
            if node.alive():
                node.proc.send_signal(signal.SIGCONT)
        cluster.cleanup()


def no_majority(binary):
    """A write held by a server that can reach no leader ends 503 saying it was not
    applied, with the leader fields of a 421 (none known here)."""
    cluster = h.Cluster(binary)
    try:
        h.wait_addresses_known(cluster)
        leader = cluster.leader()
        survivor = next(n for n in cluster.nodes if n is not leader)
        for node in cluster.nodes:
            if node is not survivor:
                node.kill()
        deadline = time.time() + h.DEADLINE_S
        while True:
            status, body = survivor.request("POST", "/v1/events", event(10**6))
            if status == 503 and "no leader could be forwarded to" in body.get("message", ""):
                break
            assert time.time() < deadline, (status, body)
        assert body.get("applied") is False, body
        assert "leader_id" in body and "leader_http_address" in body, body
        print(f"no majority: 503 {body}")
    finally:
        cluster.cleanup()


def main():
    binary = sys.argv[1]
    for round_no in range(ROUNDS):
        one_round(binary, round_no)
    no_majority(binary)
    print("paused_leader_test: ok")


if __name__ == "__main__":
    main()
