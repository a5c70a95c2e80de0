#!/usr/bin/python3
"""The cost of a write sent to a follower (docs/scaling.md §Writes reach every group's
leader): one group, where the follower proxies the whole request to the leader
(docs/replication.md §Writes on followers), against G groups, where it forwards each
part to its group's leader (POST /v1/cluster/apply).

usage: forward_bench.py KVATLAS_SERVER_BINARY [--groups 1,3] [--writes N] [--models M]

For each G in --groups, in one run: three servers on loopback (`--groups G`, every group
led by one server, as they are); one client on one kept-alive connection sends N
(default 2,000) writes of one stored event of one block, each to a model drawn from M
(default 24, so the parts land in every group), first to the leader, then to a follower,
one at a time, and times each answer. Prints per G and target the p50 and p99 and the
follower's ÷ the leader's in the same cluster, then the follower's forwarded parts by
group (kvatlas_group_forwarded_batches_total). Data under $TMPDIR, removed at exit.
"""

import argparse
import http.client
import json
import os
import random
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fault"))
import cluster_fault_test as h  # noqa: E402 - the test harness: Node, Cluster, free ports

BS = 16
FLAGS = ["--log-level", "warning", "--audit-interval-ms", "0"]


def led_by(node, leader_id, groups):
    status, body = node.request("GET", "/v1/groups")
    return status == 200 and len(body["groups"]) == groups and all(
        g["leader_id"] == leader_id for g in body["groups"])


def timed_writes(node, writes, models, rng):
    """Latencies (s) of `writes` sequential single-block writes on one connection."""
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies = []
    for i in range(writes):
        event = {"event_type": "stored", "model_name": f"m{rng.randrange(models)}",
                 "block_size": BS, "backend_id": "w",
                 "token_ids": [rng.getrandbits(31) for _ in range(BS)]}
        body = json.dumps({"events": [event]})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/events", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = resp.read()
        latencies.append(time.perf_counter() - t0)
        if resp.status != 200:
            raise AssertionError(f"write {i} to server {node.id}: {resp.status} {answer!r}")
    conn.close()
    return sorted(latencies)


def percentile(sorted_values, q):
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def forwarded(node):
    with urllib.request.urlopen(node.base + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("kvatlas_group_forwarded_batches_total{"):
            labels, value = line.rsplit(" ", 1)
            counts[labels[len("kvatlas_group_forwarded_batches_total"):]] = int(float(value))
    return counts


def run_one(binary, groups, args):
    rng = random.Random(7)
    with h.running_cluster(binary, 3, FLAGS + ["--groups", str(groups)]) as cluster:
        leader = cluster.leader()
        h.wait_until("every group led by group 1's leader",
                     lambda: all(led_by(n, leader.id, groups) for n in cluster.nodes))
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        timed_writes(leader, 200, args.models, rng)  # warm-up: contexts exist, caches warm
        rows = {}
        for name, node in (("leader", leader), ("follower", follower)):
            lat = timed_writes(node, args.writes, args.models, rng)
            rows[name] = (percentile(lat, 0.5), percentile(lat, 0.99))
        return rows, forwarded(follower)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--groups", default="1,3")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--models", type=int, default=24)
    args = parser.parse_args()
    print(f"{args.writes} sequential single-block REST writes per target, one connection, "
          f"{args.models} models; 3 servers on loopback")
    print(f"{'groups':>6} {'target':>9} {'p50 ms':>8} {'p99 ms':>8} {'p50 ÷ leader':>13} "
          f"{'p99 ÷ leader':>13}")
    for groups in [int(g) for g in args.groups.split(",")]:
        rows, parts = run_one(args.binary, groups, args)
        base = rows["leader"]
        for name, (p50, p99) in rows.items():
            print(f"{groups:>6} {name:>9} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} "
                  f"{p50 / base[0]:13.2f} {p99 / base[1]:13.2f}")
        if parts:
            print(f"{'':>6} forwarded by the follower: {parts}")


if __name__ == "__main__":
    main()
