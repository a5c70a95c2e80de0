#!/usr/bin/python3
"""What the cluster says about its members (docs/api.md §Cluster): real 3-server clusters on
loopback.

usage: cluster_health_test.py KVATLAS_SERVER_BINARY [CASE...]

- dead_member: a SIGKILLed follower shows on the leader's GET /v1/cluster as reachable false,
  state "unreachable", its last contact growing, and in kvatlas_raft_member_reachable; the
  live one stays reachable.
- failed_add: POST /v1/cluster/members naming an address where nothing listens fails with a
  message that says the server did not answer and was not added, and leaves the members as
  they were (no spare); adding a started server then works.
- transfer: POST /v1/cluster/transfer answers with the leader after the transfer, and
  every server's GET /v1/groups shows the one group with all three members and that leader.

Loopback only, bounded in time, every process and directory cleaned up.
"""

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

ELECTION_TIMEOUT_MS = 500  # the harness's --raft-election-timeout-ms


def members(node):
    status, body = node.request("GET", "/v1/cluster")
    assert status == 200, body
    return {m["id"]: m for m in body["members"]}


def wait_until(what, predicate, nodes):
    deadline = time.time() + h.DEADLINE_S
    while True:
        value = predicate()
        if value:
            return value
        assert time.time() < deadline, f"{what}\n" + "\n".join(n.log_tail() for n in nodes)
        time.sleep(0.05)


def slow_request(node, method, path, body):
    """Like Node.request with a limit past the add's own (apply_timeout + 10 s)."""
    req = urllib.request.Request(node.base + path, data=json.dumps(body).encode(),
                                 method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(node, name, labels):
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    for line in text.splitlines():
        if line.startswith(f"{name}{{{labels}}} "):
            return float(line.split()[-1])
    return None


def case_dead_member(binary):
    cluster = h.Cluster(binary)
    try:
        leader = cluster.leader()
        others = [n for n in cluster.nodes if n.id != leader.id]
        # Before: every other member reachable, heard from within an election timeout.
        before = wait_until("the followers reachable", lambda: (
            lambda ms: all(ms[n.id]["reachable"] is True for n in others) and ms)(
                members(leader)), cluster.nodes)
        for n in others:
            m = before[n.id]
            assert m["state"] is None and m["last_contact_ms"] < ELECTION_TIMEOUT_MS, m
        assert before[leader.id]["reachable"] is None, before[leader.id]
        assert before[leader.id]["last_contact_ms"] is None, before[leader.id]
        # A follower's view has no reachability (the leader's alone).
        assert all(m["reachable"] is None and m["last_contact_ms"] is None
                   for m in members(others[0]).values()), members(others[0])
        dead, alive = others
        dead.kill(signal.SIGKILL)
        after = wait_until("the dead follower unreachable", lambda: (
            lambda ms: ms[dead.id]["reachable"] is False and ms)(members(leader)),
            cluster.nodes)
        m = after[dead.id]
        assert m["state"] == "unreachable", m
        assert m["last_contact_ms"] >= ELECTION_TIMEOUT_MS, m
        assert after[alive.id]["reachable"] is True and after[alive.id]["state"] is None, after
        later = wait_until("the last contact grows", lambda: (
            lambda ms: ms[dead.id]["last_contact_ms"] > m["last_contact_ms"] and ms)(
                members(leader)), cluster.nodes)
        assert later[dead.id]["state"] == "unreachable", later
        assert metric(leader, "kvatlas_raft_member_reachable", f'member="{dead.id}"') == 0.0
        assert metric(leader, "kvatlas_raft_member_reachable", f'member="{alive.id}"') == 1.0
        assert metric(leader, "kvatlas_raft_member_reachable", f'member="{leader.id}"') is None
        print(f"  server {dead.id} killed: unreachable, last contact "
              f"{later[dead.id]['last_contact_ms']} ms ago", flush=True)
    finally:
        cluster.cleanup()


def start_joiner(binary, cluster, node_id, port):
    d = os.path.join(cluster.root, f"n{node_id}")
    os.makedirs(d)
    joiner = h.Node(binary, node_id, cluster.nodes[0].peers, d,
                    raft_listen=f"127.0.0.1:{port}", auth=cluster.auth)
    joiner.start()
    cluster.nodes.append(joiner)
    return joiner


def case_failed_add(binary):
    cluster = h.Cluster(binary)
    try:
        leader = cluster.leader()
        before = sorted((m["id"], m["role"]) for m in members(leader).values())
        port = h.free_ports(1)[0]  # nothing listens there
        address = f"127.0.0.1:{port}"
        started = time.time()
        status, body = slow_request(leader, "POST", "/v1/cluster/members",
                                    {"id": 5, "raft_address": address})
        took = time.time() - started
        assert status == 503 and body["code"] == "unavailable", (status, body)
        message = body["message"]
        for part in (f"server 5 at {address} did not answer", "it was not added",
                     "--id 5", f"--raft-listen {address}", "then add it again"):
            assert part in message, (part, message)
        # The configuration is as before: no spare 5 left behind.
        assert sorted((m["id"], m["role"]) for m in members(leader).values()) == before, \
            members(leader)
        for node in cluster.nodes:  # every server applied the removal
            wait_until(f"server {node.id} without server 5",
                       lambda n=node: 5 not in members(n), cluster.nodes)
        print(f"  add of a dead address refused in {took:.1f} s: {message}", flush=True)
        # Now the server runs: the same add works, and it becomes a voter.
        start_joiner(binary, cluster, 5, port)
        status, body = slow_request(leader, "POST", "/v1/cluster/members",
                                    {"id": 5, "raft_address": address})
        assert status == 200, (status, body)
        wait_until("server 5 a voter", lambda: members(leader).get(5, {}).get("role") == "voter",
                   cluster.nodes)
        assert h.write(leader, 1), "a write after the add"
    finally:
        cluster.cleanup()


def case_transfer(binary):
    cluster = h.Cluster(binary)
    try:
        leader = cluster.leader()
        target = next(n for n in cluster.nodes if n.id != leader.id)
        status, body = leader.request("POST", "/v1/cluster/transfer", {"id": target.id})
        assert status == 200, (status, body)
        assert body["status"] == "ok" and body["transfer_to"] == target.id, body
        assert body["leader_id"] == target.id, body
        # Any voter (id 0): the answer names the one that took over.
        new_leader = cluster.leader()
        assert new_leader.id == target.id
        status, body = new_leader.request("POST", "/v1/cluster/transfer", {})
        assert status == 200, (status, body)
        assert body["transfer_to"] == 0, body
        assert body["leader_id"] not in (0, target.id), body
        assert cluster.leader().id == body["leader_id"], body
        # GET /v1/groups: the one group, its members and the new leader, on every server.
        for node in cluster.nodes:
            def group_led_by_new_leader():
                status, doc = node.request("GET", "/v1/groups")
                assert status == 200, (status, doc)
                assert doc["epoch"] == 0 and len(doc["groups"]) == 1, doc
                group = doc["groups"][0]
                assert group["id"] == 1, group
                assert sorted(m["id"] for m in group["members"]) == [1, 2, 3], group
                return group if group["leader_id"] == body["leader_id"] else None
            group = wait_until("the group's leader is the new leader", group_led_by_new_leader,
                               cluster.nodes)
            assert group["this_server"] == ("leader" if node.id == body["leader_id"]
                                            else "follower"), group
    finally:
        cluster.cleanup()


CASES = {
    "dead_member": case_dead_member,
    "failed_add": case_failed_add,
    "transfer": case_transfer,
}


if __name__ == "__main__":
    h.run_cases(CASES)
