#!/usr/bin/python3
"""A cluster whose raft addresses are host names, as on Kubernetes (docs/operations.md
§Kubernetes, docs/replication.md §Configuration).

usage: host_names_test.py KVATLAS_SERVER_BINARY [CASE...]

names: three servers with peers 1@localhost:P1,... (names, resolved by the transport at
  every connect), each binding --raft-bind 127.0.0.1:Pn and serving REST on 0.0.0.0 (so
  the addresses they announce take the name's host). A leader is elected, a write sent to
  a follower is forwarded to the leader's announced localhost:PORT and replicated; then
  the scaling procedure: a fourth server joins at localhost:P4, catches up, and is removed.
  A server whose own raft address is a name and that has no --raft-bind refuses to start.
unresolvable: one of three peers has a name that does not resolve (.invalid): the other
  two elect a leader and take writes, and a server stops in order (SIGTERM, exit 0) while
  its resolutions fail.

Loopback only, bounded in time, cleaned up.
"""

import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "fault"))
import cluster_fault_test as h  # noqa: E402 - the shared harness


class NamedNode(h.Node):
    """A server with a raft address that is a name and a separate bind address."""

    def __init__(self, binary, node_id, peers, data_dir, bind, auth, raft_listen=None):
        super().__init__(binary, node_id, peers, data_dir, raft_listen=raft_listen, auth=auth)
        # REST on 0.0.0.0 without tokens: access control has its own tests (auth_test).
        self.extra = ["--raft-bind", bind, "--insecure"]

    def command(self, http_listen="0.0.0.0:0"):
        return super().command(http_listen=http_listen)


def start_cluster(binary, root, hosts, start=None):
    ports = h.free_ports(len(hosts))
    peers = ",".join(f"{i + 1}@{host}:{p}" for i, (host, p) in enumerate(zip(hosts, ports)))
    auth = h.make_auth(root)
    nodes = []
    for i, port in enumerate(ports):
        d = os.path.join(root, f"n{i + 1}")
        os.makedirs(d)
        nodes.append(NamedNode(binary, i + 1, peers, d, f"127.0.0.1:{port}", auth))
    for node in nodes[:start]:
        node.start()
    for node in nodes[len(nodes[:start]):]:  # h.Cluster's messages quote every log
        with open(os.path.join(node.data_dir, "server.log"), "w") as f:
            f.write(f"(server {node.id} not started)\n")
    return nodes, peers, auth


class Cluster(h.Cluster):
    """h.Cluster's helpers (leader, cleanup) over NamedNodes; only the first `start` run."""

    def __init__(self, binary, hosts, start=None):  # pylint: disable=super-init-not-called
        self.root = tempfile.mkdtemp(prefix="kvatlas-names-")
        self.nodes, self.peers, self.auth = start_cluster(binary, self.root, hosts, start)


def wait_members(node, want):
    deadline = time.time() + h.DEADLINE_S
    while True:
        status, body = node.request("GET", "/v1/cluster")
        if status == 200 and sorted(m["id"] for m in body["members"]) == want:
            return body
        assert time.time() < deadline, body
        time.sleep(0.05)


def case_names(binary):
    cluster = Cluster(binary, ["localhost"] * 3)
    try:
        leader = cluster.leader()
        body = wait_members(leader, [1, 2, 3])
        raft = {m["id"]: m["raft_address"] for m in body["members"]}
        assert all(a.startswith("localhost:") for a in raft.values()), raft
        h.wait_addresses_known(cluster)
        body = leader.request("GET", "/v1/cluster")[1]
        assert all(m["http_address"].startswith("localhost:") for m in body["members"]), body
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        acked = [(i, h.write(follower, i)) for i in range(20)]  # forwarded to localhost:PORT
        h.check_acked(cluster, acked, cluster.nodes)

        # Scale up by one and back, as docs/operations.md §Kubernetes does with pods.
        port = h.free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        joiner = NamedNode(binary, 4, cluster.peers, d, f"127.0.0.1:{port}", cluster.auth,
                           raft_listen=f"localhost:{port}")
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"localhost:{port}"})
        assert status == 200, body
        acked += [(i, h.write(leader, i)) for i in range(20, 30)]
        h.check_acked(cluster, acked, cluster.nodes)  # the new server caught up
        status, body = leader.request("DELETE", "/v1/cluster/members/4")
        assert status == 200, body
        wait_members(leader, [1, 2, 3])
        joiner.kill(signal.SIGTERM)
        acked += [(i, h.write(leader, i)) for i in range(30, 40)]
        h.check_acked(cluster, acked, cluster.nodes[:3])

        # A name cannot be bound: without --raft-bind the server says so.
        run = subprocess.run([binary, "--id", "1", "--peers", cluster.peers, "--data-dir",
                              os.path.join(cluster.root, "refused"), "--cluster-id", "c",
                              "--cluster-secret-file", cluster.auth[1]],
                             capture_output=True, text=True, timeout=h.DEADLINE_S)
        assert run.returncode == 2, run
        assert "raft_bind: must be set when this server's raft address localhost:" in run.stderr, \
            run.stderr
    finally:
        cluster.cleanup()


def case_unresolvable(binary):
    cluster = Cluster(binary, ["localhost", "localhost", "kvatlas-missing.invalid"], start=2)
    try:
        leader = cluster.leader()
        acked = [(i, h.write(leader, i)) for i in range(10)]
        h.check_acked(cluster, acked, cluster.nodes[:2])
        time.sleep(1.0)  # several failed resolutions of server 3's name
        for node in cluster.nodes[:2]:
            assert node.alive(), node.log_tail()
            node.proc.send_signal(signal.SIGTERM)
            assert node.proc.wait(timeout=h.DEADLINE_S) == 0, node.log_tail()
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    h.run_cases({"names": case_names, "unresolvable": case_unresolvable})
