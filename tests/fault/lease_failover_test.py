#!/usr/bin/python3
"""Holder leases across a leader failover (docs/leases.md §Failover grace).

usage: lease_failover_test.py KVATLAS_SERVER_BINARY

A 3-server cluster with --holder-ttl 2. Holder "live" heartbeats every 0.4 s through
whichever server is up (followers forward heartbeats to the leader); holder "dead" never
does. "dead" is expired on every server; the leader is SIGKILLed; the new leader, which
never saw the heartbeats its predecessor received, must not expire "live" (it grants every
holder a full TTL when it takes over) while the heartbeats go on; once they stop, it
expires "live" too, and the survivors agree. Loopback only, bounded in time, cleaned up.
"""

import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

TTL_S = 2
HEARTBEAT_EVERY_S = 0.4
BOUND_S = 20.0


class LeaseNode(h.Node):
    def command(self, http_listen="127.0.0.1:0"):
        return super().command(http_listen) + ["--holder-ttl", str(TTL_S)]


# The harness's Cluster builds its nodes from the module's Node.
h.Node = LeaseNode


def stored(backend, first):
    return {"event_type": "stored", "model_name": "m", "block_size": h.BS,
            "backend_id": backend, "token_ids": [first + k for k in range(2 * h.BS)]}


def entries(node, holder):
    status, body = node.request("GET", "/v1/holders")
    assert status == 200, (status, body)
    return sum(x["entries"] for x in body["holders"] if x["holder_id"] == holder)


def wait_until(what, predicate):
    deadline = time.time() + BOUND_S
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting until {what}")


class Heartbeater(threading.Thread):
    """Heartbeats `holder` to the live servers in turn until stopped; counts successes."""

    def __init__(self, cluster, holder):
        super().__init__(daemon=True)
        self.cluster, self.holder = cluster, holder
        self.stop = threading.Event()
        self.ok = 0
        self.unexpected = []

    def run(self):
        turn = 0
        while not self.stop.is_set():
            alive = [n for n in self.cluster.nodes if n.alive()]
            node = alive[turn % len(alive)]
            turn += 1
            status, body = node.request("POST", "/v1/heartbeat",
                                        {"holders": [{"instance_id": self.holder}]})
            if status == 200:
                self.ok += 1
            elif status not in (0, 421, 503, 504):  # during the election
                self.unexpected.append((status, body))
            self.stop.wait(HEARTBEAT_EVERY_S)


def main():
    binary = sys.argv[1]
    cluster = h.Cluster(binary)
    beats = None
    try:
        leader = cluster.leader()
        status, body = leader.request("POST", "/v1/events",
                                      [stored("live", 1), stored("dead", 100)])
        assert status == 200, (status, body)
        beats = Heartbeater(cluster, "live")
        beats.start()
        for node in cluster.nodes:
            h.wait_applied(node, body["revision"])
            wait_until(f"'dead' expired on server {node.id}", lambda n=node: entries(n, "dead") == 0)
        assert all(entries(n, "live") == 2 for n in cluster.nodes), "'live' lost its entries"

        leader.kill(signal.SIGKILL)
        new_leader = cluster.leader(exclude=(leader.id,))
        print(f"server {leader.id} killed; server {new_leader.id} leads", flush=True)
        # Three TTLs under the new leader, heartbeats going on.
        time.sleep(3 * TTL_S)
        survivors = [n for n in cluster.nodes if n.alive()]
        for node in survivors:
            assert entries(node, "live") == 2, f"server {node.id}: 'live' expired after failover"
        assert beats.ok > 0 and not beats.unexpected, (beats.ok, beats.unexpected)

        beats.stop.set()
        beats.join()
        for node in survivors:
            wait_until(f"'live' expired on server {node.id}", lambda n=node: entries(n, "live") == 0)
        sizes = {n.request("GET", "/v1/stats")[1]["index"]["entries"] for n in survivors}
        assert sizes == {0}, f"servers disagree on the index size: {sizes}"
        print("lease failover: ok", flush=True)
    except BaseException:
        for node in cluster.nodes:
            print(f"--- server {node.id} log tail ---\n{node.log_tail()}", file=sys.stderr)
        raise
    finally:
        if beats is not None:
            beats.stop.set()
        cluster.cleanup()


if __name__ == "__main__":
    main()
