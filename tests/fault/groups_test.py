#!/usr/bin/python3
"""Servers hosting several raft groups (docs/scaling.md §Groups on every server).

usage: groups_test.py KVATLAS_SERVER_BINARY [CASE...]

Three servers run `--groups 3`. Writes of many models (each model's contexts live in its
home group) go through a follower, which hands each group's part to that group's leader
(an internal call, refused unsigned), and are read back on every server; /v1/groups shows the
contexts spread over the groups, each group with the same voters and the same leader as
group 1. Killing the leader moves every group's leadership to group 1's new leader; writes
go on and the old leader catches up when it comes back. A server added to group 1 is added
to every group. A data directory refuses to start with another group count. Loopback
only, bounded in time, cleaned up.
"""

import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

GROUPS = 3
MODELS = 24
BS = 16


def prompt(model, i):
    return [7_000_000 + model * 10_000 + i * 64 + k for k in range(2 * BS)]


def write(node, model, i):
    """One stored 2-block prompt of model `model`; True once acknowledged."""
    event = {"event_type": "stored", "model_name": f"m{model}", "block_size": BS,
             "backend_id": "w", "token_ids": prompt(model, i)}
    status, body = node.request("POST", "/v1/events", {"events": [event]})
    return status == 200


def holds(node, model, i):
    status, body = node.request("POST", "/query", {"model": f"m{model}", "block_size": BS,
                                                   "token_ids": prompt(model, i)})
    return status == 200 and body.get("default", {}).get("w", {}).get("GPU") == 2 * BS


def groups_of(node):
    status, body = node.request("GET", "/v1/groups")
    return body["groups"] if status == 200 else []


def led_by_one(node, leader_id, voters):
    """Every group on `node` has `voters` as its voters and `leader_id` as its leader."""
    groups = groups_of(node)
    return len(groups) == GROUPS and all(
        g["leader_id"] == leader_id and
        sorted(m["id"] for m in g["members"] if m["role"] == "voter") == voters
        for g in groups)


def forwarded(node):
    """{group: write parts node forwarded to that group's leader and saw applied}."""
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    counts = {}
    for line in text.splitlines():
        if line.startswith("kvatlas_group_forwarded_batches_total{") and 'outcome="ok"' in line:
            group = int(line.split('group="')[1].split('"')[0])
            counts[group] = int(float(line.rsplit(" ", 1)[1]))
    return counts


def apply_refused(node):
    """POST /v1/cluster/apply is an internal call: unsigned, or not a batch, it is refused."""
    for content_type, expected in (("application/octet-stream", 401), ("application/json", 415)):
        req = urllib.request.Request(node.base + "/v1/cluster/apply?group=2", data=b"\x01\x02",
                                     method="POST", headers={"Content-Type": content_type})
        try:
            urllib.request.urlopen(req, timeout=5)
            return False
        except urllib.error.HTTPError as e:
            if e.code != expected:
                return False
    return True


def wait_all_held(nodes, written):
    for node in nodes:
        h.wait_until(f"server {node.id} holds every acknowledged write",
                     lambda node=node: all(holds(node, m, i) for m, i in written))


def case_spread_and_failover(binary):
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        leader = cluster.leader()
        h.wait_until("every group follows group 1's leader",
                     lambda: all(led_by_one(n, leader.id, [1, 2, 3]) for n in cluster.nodes))
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        written = [(m, 0) for m in range(MODELS)]
        for m, i in written:
            assert write(follower, m, i), f"write of m{m} through server {follower.id} failed"
        wait_all_held(cluster.nodes, written)
        # The follower handed each group's part to that group's leader.
        parts = forwarded(follower)
        assert len(parts) >= 2 and sum(parts.values()) >= MODELS, parts
        assert apply_refused(follower)
        groups = groups_of(leader)
        holding = [g["id"] for g in groups if g["contexts"] > 0]
        assert len(holding) >= 2, f"every context landed in one group: {groups}"
        assert sum(g["contexts"] for g in groups) == MODELS, groups
        # Each server holds the same contexts in each group.
        for node in cluster.nodes:
            h.wait_until(f"server {node.id}'s groups hold what the leader's do", lambda node=node: [
                (g["id"], g["contexts"], g["entries"]) for g in groups_of(node)
            ] == [(g["id"], g["contexts"], g["entries"]) for g in groups])

        leader.kill(signal.SIGKILL)
        survivors = [n for n in cluster.nodes if n.id != leader.id]
        new_leader = cluster.leader(exclude=(leader.id,))
        h.wait_until("every group follows group 1's new leader",
                     lambda: all(led_by_one(n, new_leader.id, [1, 2, 3]) for n in survivors))
        more = [(m, 1) for m in range(MODELS)]
        for m, i in more:
            assert write(survivors[-1], m, i), f"write of m{m} after the failover failed"
        wait_all_held(survivors, written + more)
        leader.start()
        wait_all_held([leader], written + more)


def case_joining_server_joins_every_group(binary):
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        leader = cluster.leader()
        written = [(m, 0) for m in range(8)]
        for m, i in written:
            assert write(leader, m, i)
        port = h.free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        joiner = h.Node(binary, 4, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}",
                        auth=cluster.auth)
        joiner.extra = ["--groups", str(GROUPS)]
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        # Group 1's leadership goes to the new server at once, maybe before the other groups
        # have it as a voter: their leader adds it, then hands them over too.
        h.wait_until("server 4 takes group 1's leadership", lambda: leader.request(
            "POST", "/v1/cluster/transfer", {"id": 4})[0] == 200)
        h.wait_until("every group has server 4 as a voter and leader",
                     lambda: led_by_one(joiner, 4, [1, 2, 3, 4]))
        wait_all_held([joiner], written)
        assert write(joiner, 99, 0), "a write through the new leader failed"


def case_group_count_is_fixed(binary):
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        node = cluster.nodes[0]
        node.kill(signal.SIGTERM)
        for count in ("2", "1"):
            run = subprocess.run([*node.command()[:-2], "--groups", count], capture_output=True,
                                 text=True, timeout=h.DEADLINE_S)
            assert run.returncode != 0, f"--groups {count} started on a 3-group directory"
            wanted = f"holds {GROUPS} raft group(s), but groups is {count}"
            assert wanted in run.stderr, run.stderr[-2000:]
        node.start()  # the right count still starts
        assert groups_of(node) and len(groups_of(node)) == GROUPS


CASES = {
    "spread_and_failover": case_spread_and_failover,
    "joining_server": case_joining_server_joins_every_group,
    "group_count_fixed": case_group_count_is_fixed,
}

if __name__ == "__main__":
    h.run_cases(CASES)
