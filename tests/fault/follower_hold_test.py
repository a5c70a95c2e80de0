#!/usr/bin/python3
"""Writes on a follower across a leader kill (docs/replication.md §Writes on followers).

usage: follower_hold_test.py KVATLAS_SERVER_BINARY

A 3-server cluster (--apply-timeout-ms 3000, election timeout 500 ms). Once every server
knows every member's addresses, the leader is SIGKILLed and, from that moment, each
survivor is sent writes continuously (one writer thread per survivor) through the
election. A follower that does not know the leader (or its address) must hold the write
and forward it once it does, so no writer may ever see 421 with a null
leader_http_address (a 421 naming a server is followed, as a client does: a survivor
that takes over while holding a write runs it itself); a write answered 503/504 (a forward that failed after it was sent) is
resent. Every write must end 200 within apply_timeout (plus 1 s slack) of its first send.
Several rounds. Loopback only, bounded in time, cleaned up.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

ROUNDS = 2
APPLY_TIMEOUT_S = 3.0  # the harness passes --apply-timeout-ms 3000
WRITE_FOR_S = 4.0  # each writer keeps writing this long after the kill


def event(i):
    return {"event_type": "stored", "model_name": "m", "block_size": h.BS, "backend_id": "w",
            "token_ids": h.prompt(i)}


class Writer(threading.Thread):
    """Sends writes to `node` one after another until `until`; records every failure."""

    def __init__(self, node, nodes, first, until):
        super().__init__(daemon=True)
        self.node, self.nodes, self.next, self.until = node, nodes, first, until
        self.followed = 0  # 421 answers naming a leader, followed
        self.acked = []  # (i, revision)
        self.failures = []
        self.resent = []  # transient answers that were resent
        self.forwarded = 0
        self.slowest = 0.0

    def one(self, i):
        started = time.time()
        while True:
            status, body, headers = h.request_with_headers(
                self.node, "POST", "/v1/events", {"events": [event(i)]}, {})
            took = time.time() - started
            if status == 200:
                self.acked.append((i, body["revision"]))
                self.forwarded += headers.get("X-Kvatlas-Forwarded-From") is not None
                self.slowest = max(self.slowest, took)
                return
            if status == 421:
                if not body.get("leader_http_address"):
                    self.failures.append(f"write {i} to server {self.node.id}: 421 {body}")
                    return
                # Followable (e.g. an already forwarded request): a client resends
                # it to the named server.
                self.followed += 1
                target = next(n for n in self.nodes if n.base == "http://" +
                              body["leader_http_address"])
                status, body, headers = h.request_with_headers(
                    target, "POST", "/v1/events", {"events": [event(i)]}, {})
                if status == 200:
                    self.acked.append((i, body["revision"]))
                    self.slowest = max(self.slowest, time.time() - started)
                    return
            if took > APPLY_TIMEOUT_S + 1.0:
                self.failures.append(f"write {i} to server {self.node.id} not acked after "
                                     f"{took:.2f} s; last answer {status} {body}")
                return
            self.resent.append((status, body.get("message") if body else None))
            time.sleep(0.01)

    def run(self):
        try:
            while time.time() < self.until and not self.failures:
                self.one(self.next)
                self.next += 1
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            self.failures.append(repr(e))


def one_round(binary, round_no):
    with h.running_cluster(binary) as cluster:
        leader = cluster.leader()
        assert h.write(leader, round_no * 100_000), "the first write failed"
        h.wait_addresses_known(cluster)
        survivors = [n for n in cluster.nodes if n is not leader]
        leader.kill(signal.SIGKILL)
        until = time.time() + WRITE_FOR_S
        writers = [Writer(n, cluster.nodes, round_no * 100_000 + 1 + k * 10_000, until)
                   for k, n in enumerate(survivors)]
        for w in writers:
            w.start()
        for w in writers:
            w.join(timeout=WRITE_FOR_S + 2 * APPLY_TIMEOUT_S + 10)
            assert not w.is_alive(), f"writer to server {w.node.id} hung"
        failures = [f for w in writers for f in w.failures]
        assert not failures, f"round {round_no}: " + "\n".join(failures[:5])
        acked = [a for w in writers for a in w.acked]
        assert len(acked) > 0
        h.check_acked(cluster, acked, survivors)
        print(f"  round {round_no}: server {leader.id} killed; "
              + "; ".join(f"server {w.node.id}: {len(w.acked)} writes acked "
                          f"({w.forwarded} forwarded, {w.followed} 421 followed), slowest {w.slowest:.2f} s, "
                          f"{len(w.resent)} resent {sorted(set(w.resent))[:3]}"
                          for w in writers), flush=True)


def main():
    binary = sys.argv[1]
    for round_no in range(ROUNDS):
        one_round(binary, round_no)
    print("PASS follower_hold_test", flush=True)


if __name__ == "__main__":
    main()
