#!/usr/bin/python3
"""What a placed context costs (docs/scaling.md §Placed contexts): the first write of a new
context whose home group takes no new contexts (two commits first: its home group disowns
it, group 1 places it) against the first write of a new context whose home takes it, and
then writes and lookups of placed contexts against contexts in their home groups.

usage: placement_bench.py KVATLAS_SERVER_BINARY [--contexts N] [--lookups N]

Three servers on loopback, `--groups 3`, `snapshot_stop_bytes` 64 KiB and a snapshot every
32 log entries: group 2 is written (64 blocks a write) until its snapshot passes the bound
and the directory records that it takes no new contexts (groups 1 and 3, with a few hundred
entries, stay under it). Then, from one client on one kept-alive connection to one server, one request at a
time: N (default 200) first writes of new contexts homed in group 2 (`new, placed`)
interleaved with N first writes of new contexts homed in group 1 or 3 (`new, home`); a
second write into each (`placed`, `home`); and L (default 2,000) lookups of them,
alternating. Prints p50 and p99 of each and their ratios to the home contexts'. Writes are
applied by their group's leader, here or forwarded (docs/scaling.md §Writes reach every
group's leader), alike for both kinds. Data under $TMPDIR, removed at exit.
"""

import argparse
import http.client
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fault"))
import cluster_fault_test as h  # noqa: E402 - the test harness: Node, Cluster, free ports

BS = 16
GROUPS = 3
FLAGS = ["--log-level", "warning", "--audit-interval-ms", "0", "--groups", str(GROUPS),
         "--snapshot-stop-bytes", "65536", "--raft-snapshot-threshold", "32"]


def tokens(i):
    return [9_000_000 + i * 64 + k for k in range(BS)]


class Conn:
    """One kept-alive connection; timed JSON requests."""

    def __init__(self, node):
        host, port = node.base[len("http://"):].rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=30)

    def timed(self, path, body):
        data = json.dumps(body)
        t0 = time.perf_counter()
        self.conn.request("POST", path, data, {"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        answer = resp.read()
        elapsed = time.perf_counter() - t0
        if resp.status != 200:
            raise AssertionError(f"{path}: {resp.status} {answer!r}")
        return elapsed, json.loads(answer)

    def write(self, model, i, blocks=1):
        event = {"event_type": "stored", "model_name": model, "block_size": BS,
                 "backend_id": "w",
                 "token_ids": [t + 1_000_000 * b for b in range(blocks) for t in tokens(i)]}
        return self.timed("/v1/events", {"events": [event]})[0]

    def lookup_found(self, model, i):
        answer = self.timed("/query", {"model": model, "block_size": BS,
                                       "token_ids": tokens(i)})[1]
        return answer.get("default", {}).get("w", {}).get("GPU") == BS

    def lookup(self, model, i):
        elapsed, answer = self.timed("/query", {"model": model, "block_size": BS,
                                               "token_ids": tokens(i)})
        if answer.get("default", {}).get("w", {}).get("GPU") != BS:
            raise AssertionError(f"lookup of {model} found {answer}")
        return elapsed


def directory(node):
    status, body = node.request("GET", "/v1/directory")
    assert status == 200, body
    return body


def group_2_accepting(node):
    listed = [g for g in directory(node)["groups"] if g["id"] == 2]
    return not listed or listed[0]["accepting"]


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--contexts", type=int, default=200)
    parser.add_argument("--lookups", type=int, default=2000)
    args = parser.parse_args()
    names = [f"c{i}" for i in range(20 * args.contexts)]
    homed = {g: [m for m in names if h.home_group(m, BS, GROUPS) == g] for g in (1, 2, 3)}
    placed = homed[2][1:1 + args.contexts]
    home = (homed[1] + homed[3])[:args.contexts]
    with h.running_cluster(args.binary, 3, FLAGS) as cluster:
        cluster.leader()
        node = cluster.nodes[0]
        h.wait_until("every group has a leader", lambda: (status := node.request(
            "GET", "/v1/groups"))[0] == 200 and all(g["leader_id"] for g in status[1]["groups"]))
        conn = Conn(node)
        filler = homed[2][0]
        i = 0
        while group_2_accepting(node):
            conn.write(filler, i, blocks=64)
            i += 1
            if i % 32 == 0:
                time.sleep(0.2)
            assert i < 4000, "group 2 still takes new contexts"
        print(f"group 2 takes no new contexts after {i} writes; directory epoch "
              f"{directory(node)['epoch']}")
        kinds = {"new, placed": [], "new, home": [], "placed": [], "home": [],
                 "lookup placed": [], "lookup home": []}
        for a, b in zip(placed, home):
            kinds["new, placed"].append(conn.write(a, 0))
            kinds["new, home"].append(conn.write(b, 0))
        for a, b in zip(placed, home):
            kinds["placed"].append(conn.write(a, 1))
            kinds["home"].append(conn.write(b, 1))
        # A follower learns a group's last commits with the leader's next message.
        h.wait_until("this server holds every write", lambda: all(
            conn.lookup_found(m, 1) for m in placed + home))
        on = {c["model_name"]: c["ranges"][0]["group"] for c in directory(node)["contexts"]}
        assert all(on.get(m) in (1, 3) for m in placed), on
        for k in range(args.lookups):
            j = k % len(placed)
            kinds["lookup placed"].append(conn.lookup(placed[j], 1))
            kinds["lookup home"].append(conn.lookup(home[j], 1))
        print(f"{len(placed)} contexts of each kind, one connection to server {node.id}; "
              f"placed on groups {sorted(set(on.values()))}")
        print(f"{'kind':>14} {'count':>6} {'p50 ms':>8} {'p99 ms':>8} {'p50 ÷ home':>11} "
              f"{'p99 ÷ home':>11}")
        base = {"new, placed": "new, home", "new, home": "new, home", "placed": "home",
                "home": "home", "lookup placed": "lookup home", "lookup home": "lookup home"}
        for kind, values in kinds.items():
            ref = kinds[base[kind]]
            p50, p99 = percentile(values, 0.5), percentile(values, 0.99)
            print(f"{kind:>14} {len(values):>6} {p50 * 1e3:8.3f} {p99 * 1e3:8.3f} "
                  f"{p50 / percentile(ref, 0.5):11.2f} {p99 / percentile(ref, 0.99):11.2f}")


if __name__ == "__main__":
    main()
