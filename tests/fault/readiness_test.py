#!/usr/bin/python3
"""Readiness means a write succeeds (docs/api.md §Operations, docs/replication.md §Readiness).

usage: readiness_test.py KVATLAS_SERVER_BINARY

A fresh 3-server cluster on loopback, several times over: every server's GET /readyz is
polled from the moment it listens, and the first time a server says 200 a write is sent to
it at once. Every such write must succeed (200): on the leader directly, on a follower
forwarded to the leader (X-Kvatlas-Forwarded-From). A follower that answered ready while it
could only say 421 not_leader with no leader address would fail here. Until then /readyz
must be 503 unavailable with a message. Loopback only, bounded in time, cleaned up.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

ROUNDS = 3
BOUND_S = 20.0


def event(i):
    return {"event_type": "stored", "model_name": "m", "block_size": h.BS, "backend_id": "w",
            "token_ids": [2_000_000 + i * 16 + k for k in range(2 * h.BS)]}


def one_round(binary, round_no):
    cluster = h.Cluster(binary)
    try:
        written = {}  # node id -> (status, body, forwarded_from)
        not_ready = set()
        deadline = time.time() + BOUND_S
        while len(written) < len(cluster.nodes):
            assert time.time() < deadline, (
                f"round {round_no}: not every server became ready in {BOUND_S} s: "
                f"written {written}\n" + "\n".join(n.log_tail() for n in cluster.nodes))
            for node in cluster.nodes:
                if node.id in written:
                    continue
                status, body = node.request("GET", "/readyz")
                if status != 200:
                    assert status == 503 and body.get("code") == "unavailable" and \
                        body.get("message"), (node.id, status, body)
                    not_ready.add(body["message"])
                    continue
                # Ready: a write sent right now must succeed.
                status, body, headers = h.request_with_headers(
                    node, "POST", "/v1/events", {"events": [event(round_no * 10 + node.id)]}, {})
                written[node.id] = (status, body, headers.get("X-Kvatlas-Forwarded-From"))
            time.sleep(0.005)
        for node_id, (status, body, forwarded) in written.items():
            assert status == 200 and body.get("revision", 0) > 0, (
                f"round {round_no}: server {node_id} said ready, then refused a write: "
                f"{status} {body}")
        forwarded = [i for i, (_, _, f) in written.items() if f is not None]
        assert len(forwarded) == 2, f"round {round_no}: expected 2 forwarded writes: {written}"
        print(f"  round {round_no}: 3 ready servers took a write each ({len(forwarded)} "
              f"forwarded); not-ready answers seen: {sorted(not_ready)}", flush=True)
    finally:
        cluster.cleanup()


def main():
    binary = sys.argv[1]
    for round_no in range(ROUNDS):
        one_round(binary, round_no)
    print("PASS readiness_test", flush=True)


if __name__ == "__main__":
    main()
