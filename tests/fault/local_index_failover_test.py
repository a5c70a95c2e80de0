#!/usr/bin/python3
"""kvatlas::LocalIndex across a leader failover (docs/feed.md §LocalIndex).

usage: local_index_failover_test.py KVATLAS_SERVER_BINARY LOCAL_INDEX_PROBE_BINARY

A 3-server cluster on loopback; a LocalIndex (local_index_probe) follows the leader first.
Writers send random stores and removes (several holders, GPU and CPU) to whichever server
leads; the leader is killed under them. After the load stops, the replica must answer
2,000 random chains exactly as a surviving server does at the same revision — no change
lost or applied twice across the move to another server — and again after more load with
the old leader back. Bounded in time; every process and directory is cleaned up.
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

DOCS, BLOCKS = 200, 48


def random_event(rng):
    doc = rng.randrange(DOCS)
    begin = rng.randrange(BLOCKS) if rng.randrange(4) == 0 else 0
    end = min(BLOCKS, begin + rng.randrange(BLOCKS) + 1)
    event = {"model_name": "m", "block_size": 16, "backend_id": f"engine-{rng.randrange(4)}",
             "dp_rank": rng.randrange(2), "medium": rng.choice(["GPU", "CPU"]),
             "seq_hashes": [doc * 1000 + b + 1 for b in range(begin, end)]}
    if rng.randrange(10) < 3:
        event["event_type"] = "removed"
    else:
        event["event_type"] = "stored"
        if begin > 0:
            event["parent_hash"] = doc * 1000 + begin
    return event


class Load:
    """Writers sending random batches to the current leader until stopped."""

    def __init__(self, cluster, seed):
        self.cluster, self.stop, self.acked = cluster, threading.Event(), 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(seed + k,)) for k in range(2)]
        for t in self.threads:
            t.start()

    def run(self, seed):
        rng = random.Random(seed)
        while not self.stop.is_set():
            target = h.current_leader(self.cluster.nodes)
            if target is None:
                time.sleep(0.02)
                continue
            status, _ = target.request("POST", "/v1/events",
                                       {"events": [random_event(rng) for _ in range(8)]})
            if status == 200:
                with self.lock:
                    self.acked += 1

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=h.DEADLINE_S)


def settled_revision(cluster):
    """The leader's revision once the load stopped, applied by every live server."""
    leader = cluster.leader()
    _, body = leader.request("GET", "/v1/cluster")
    revision = body["revision"]
    for node in cluster.nodes:
        if node.alive():
            h.wait_applied(node, revision)
    return revision


class Probe:
    def __init__(self, binary, endpoints):
        self.proc = subprocess.Popen([binary, "--endpoints", ",".join(endpoints)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.expect("synced")

    def ask(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self.read()

    def read(self):
        result = []
        reader = threading.Thread(target=lambda: result.append(self.proc.stdout.readline()))
        reader.start()
        reader.join(timeout=60)
        assert result and result[0], "the probe did not answer"
        return result[0].strip()

    def expect(self, prefix):
        line = self.read()
        assert line.startswith(prefix), line
        return line

    def close(self):
        self.proc.kill()
        self.proc.wait()


def main():
    binary, probe_binary = sys.argv[1], sys.argv[2]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    cluster = h.Cluster(binary)
    probe = None
    try:
        leader = cluster.leader()
        others = [n for n in cluster.nodes if n is not leader]
        endpoints = [h.addr_of(n, "rpc.addr") for n in [leader] + others]
        probe = Probe(probe_binary, endpoints)

        load = Load(cluster, seed=1)
        time.sleep(1.5)
        leader.kill(signal.SIGKILL)
        cluster.leader(exclude=(leader.id,))
        time.sleep(2.0)
        load.finish()
        revision = settled_revision(cluster)
        answer = probe.ask(f"check {revision} 2000 7")
        print(f"  after failover: {load.acked} batches acked, revision {revision}: {answer}",
              flush=True)
        assert answer.startswith("ok"), answer
        assert "resumes=0" not in answer, "the replica never moved to another server"

        leader.start()  # the old leader returns on its data directory
        load = Load(cluster, seed=100)
        time.sleep(1.5)
        load.finish()
        revision = settled_revision(cluster)
        answer = probe.ask(f"check {revision} 2000 8")
        print(f"  old leader back, more load: revision {revision}: {answer}", flush=True)
        assert answer.startswith("ok"), answer
        print("PASS local_index_failover", flush=True)
    finally:
        if probe:
            probe.close()
        cluster.cleanup()


if __name__ == "__main__":
    main()
