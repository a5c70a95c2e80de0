#!/usr/bin/python3
"""The cost of a write part applied by another server than the one that took it
(docs/scaling.md §Writes reach every group's leader): with one group, a write sent to a
follower, which proxies the whole request to the leader (docs/replication.md §Writes on
followers); with G groups, whose leaders are spread over the servers, a write whose group
the server that took it does not lead, which it forwards to that group's leader (POST
/v1/cluster/apply).

usage: forward_bench.py KVATLAS_SERVER_BINARY [--groups 1,3] [--writes N] [--models M]

For each G in --groups, in one run: three servers on loopback (`--groups G`, the groups'
leaders spread as they are); one client on one kept-alive connection sends N (default
2,000) writes of one stored event of one block, each to a model drawn from M (default 24,
so the parts land in every group), one at a time, and times each answer: with one group
first to the leader, then to a follower; with several, to one server, each write sorted by
whether that server leads the model's home group (`local`) or not (`forwarded`). Prints
per G and kind the p50 and p99 and their ratio to the same run's local writes, then the
parts forwarded by group (kvatlas_group_forwarded_batches_total). Data under $TMPDIR,
removed at exit.
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


def leaders(node, groups):
    """{group id: leader id} once `node` lists `groups` groups, each with a leader."""
    status, body = node.request("GET", "/v1/groups")
    if status != 200 or len(body["groups"]) != groups:
        return None
    led = {g["id"]: g["leader_id"] for g in body["groups"]}
    return led if all(led.values()) else None


def timed_writes(node, writes, models, rng):
    """(model, latency in s) of `writes` sequential single-block writes on one connection."""
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    latencies = []
    for i in range(writes):
        model = f"m{rng.randrange(models)}"
        event = {"event_type": "stored", "model_name": model,
                 "block_size": BS, "backend_id": "w",
                 "token_ids": [rng.getrandbits(31) for _ in range(BS)]}
        body = json.dumps({"events": [event]})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/events", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = resp.read()
        latencies.append((model, time.perf_counter() - t0))
        if resp.status != 200:
            raise AssertionError(f"write {i} to server {node.id}: {resp.status} {answer!r}")
    conn.close()
    return latencies


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
    """{kind: (p50, p99)} and the parts forwarded, for one cluster of `groups` groups."""
    rng = random.Random(7)
    with h.running_cluster(binary, 3, FLAGS + ["--groups", str(groups)]) as cluster:
        leader = cluster.leader()
        # Spread: with as many groups as servers or more, every server leads one.
        h.wait_until("the groups' leaders spread", lambda: all(
            (led := leaders(n, groups)) and len(set(led.values())) == min(groups, 3)
            for n in cluster.nodes))
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        timed_writes(leader, 200, args.models, rng)  # warm-up: contexts exist, caches warm
        latencies = {}
        if groups == 1:
            for kind, node in (("local", leader), ("forwarded", follower)):
                latencies[kind] = [t for _, t in timed_writes(node, args.writes, args.models, rng)]
            taker = follower
        else:
            led = leaders(leader, groups)
            for model, t in timed_writes(leader, args.writes, args.models, rng):
                home = h.home_group(model, BS, groups)
                latencies.setdefault("local" if led[home] == leader.id else "forwarded",
                                     []).append(t)
            taker = leader
        rows = {kind: (percentile(sorted(lat), 0.5), percentile(sorted(lat), 0.99), len(lat))
                for kind, lat in sorted(latencies.items(), key=lambda kv: kv[0] != "local")}
        return rows, forwarded(taker)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--groups", default="1,3")
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--models", type=int, default=24)
    args = parser.parse_args()
    print(f"{args.writes} sequential single-block REST writes per target, one connection, "
          f"{args.models} models; 3 servers on loopback")
    print(f"{'groups':>6} {'kind':>9} {'writes':>6} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'p50 ÷ local':>12} {'p99 ÷ local':>12}")
    for groups in [int(g) for g in args.groups.split(",")]:
        rows, parts = run_one(args.binary, groups, args)
        base = rows["local"]
        for kind, (p50, p99, count) in rows.items():
            print(f"{groups:>6} {kind:>9} {count:>6} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} "
                  f"{p50 / base[0]:12.2f} {p99 / base[1]:12.2f}")
        if parts:
            print(f"{'':>6} forwarded: {parts}")


if __name__ == "__main__":
    main()
