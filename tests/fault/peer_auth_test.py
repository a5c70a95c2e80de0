#!/usr/bin/python3
"""Peers authenticate each other (docs/security.md §Peers).

usage: peer_auth_test.py KVATLAS_SERVER_BINARY [CASE...]

spoofed_announce: an attacker repeats POST /v1/cluster/announce {"id": <leader>,
  "http_address": <its own listener>} against a follower while a client sends 40 writes
  through that follower. Every announcement must be refused (401 unauthenticated), no
  request may reach the attacker's listener, and every acknowledged write must be visible
  on the leader. Signed announcements are checked too: a member announcing another
  member's addresses (403), another secret, a replay, a stale signature (401).
rogue_raft: processes that are not members try to take part in raft: one with another
  cluster secret and one with another cluster id, each posing as a stopped follower (same
  id, same raft address), and one with the right secret and id but a server id that is not
  in the configuration. Their raft connections must be refused and counted
  (kvatlas_peer_refusals_total), the cluster's leader, term and log must not change, and a
  server with another secret that the leader is asked to add never receives the log.

Loopback only, bounded in time, cleaned up.
"""

import hashlib
import hmac
import http.server
import json
import os
import re
import struct
import sys
import threading
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

WRITES = 40


def metric(node, channel, reason):
    """kvatlas_peer_refusals_total{channel, reason} on `node` (0 when absent)."""
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    pattern = (r'^kvatlas_peer_refusals_total\{channel="%s",reason="%s"\} (\S+)$'
               % (channel, reason))
    found = re.search(pattern, text, re.M)
    return float(found.group(1)) if found else 0.0


def wait_metric(node, channel, reason, what):
    deadline = time.time() + h.DEADLINE_S
    while metric(node, channel, reason) < 1:
        assert time.time() < deadline, f"server {node.id}: no {channel}/{reason} refusal ({what})"
        time.sleep(0.1)


# --- internal-call signatures, as docs/replication.md §Internal calls specifies -----------

def field(data):
    return struct.pack("<Q", len(data)) + data


def peer_header(secret, cluster_id, sender, method, target, body, ts=None, nonce=None):
    """The X-Kvatlas-Peer-Auth value a member `sender` would send."""
    key = hmac.new(secret, b"kvatlas peer key v1: internal http", hashlib.sha256).digest()
    ts = int(time.time() * 1000) if ts is None else ts
    nonce = nonce or os.urandom(16).hex()
    message = (b"kvatlas http v1 request" + field(cluster_id.encode()) +
               struct.pack("<QQ", sender, ts) + field(nonce.encode()) + field(method.encode()) +
               field(target.encode()) + field(hashlib.sha256(body).hexdigest().encode()))
    mac = hmac.new(key, message, hashlib.sha256).hexdigest()
    return f"v1 id={sender} ts={ts} nonce={nonce} mac={mac}"


def read_secret(path):
    with open(path, "rb") as f:
        return f.read().rstrip(b" \t\r\n")


def post_raw(node, path, body, headers):
    req = urllib.request.Request(node.base + path, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        req.add_header(name, value)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


class Attacker(http.server.ThreadingHTTPServer):
    """Answers every request 200 with a plausible write acknowledgement."""

    daemon_threads = True

    def __init__(self):
        self.hits = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(handler):  # noqa: N802, N805 - http.server's names
                length = int(handler.headers.get("Content-Length") or 0)
                handler.rfile.read(length)
                self.hits += 1
                body = json.dumps({"revision": 1, "status": "ok"}).encode()
                handler.send_response(200)
                handler.send_header("Content-Type", "application/json")
                handler.send_header("Content-Length", str(len(body)))
                handler.end_headers()
                handler.wfile.write(body)

            def log_message(handler, *args):  # noqa: N805 - quiet
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def address(self):
        return f"127.0.0.1:{self.server_address[1]}"


def case_spoofed_announce(binary):
    cluster = h.Cluster(binary)
    attacker = Attacker()
    try:
        leader = cluster.leader()
        h.wait_addresses_known(cluster)
        follower = next(n for n in cluster.nodes if n is not leader)
        spoof = {"id": leader.id, "http_address": attacker.address,
                 "rpc_address": attacker.address}
        answers, stop = [], threading.Event()

        def spoofer():
            while not stop.is_set():
                answers.append(follower.request("POST", "/v1/cluster/announce", spoof))
                time.sleep(0.005)

        thread = threading.Thread(target=spoofer, daemon=True)
        thread.start()
        time.sleep(0.3)  # the announcements are under way before the first write
        acked = []
        for i in range(WRITES):
            revision = h.write(follower, i)
            if revision:
                acked.append((i, revision))
        stop.set()
        thread.join(timeout=h.DEADLINE_S)
        lost = [i for i, _ in acked if not h.holds(leader, i)]
        print(f"  {len(answers)} spoofed announcements, {len(acked)}/{WRITES} writes acked, "
              f"{len(lost)} acked writes lost, {attacker.hits} requests reached the attacker",
              flush=True)
        assert not lost, f"{len(lost)} of {len(acked)} acknowledged writes are not on the leader"
        assert len(acked) == WRITES, f"only {len(acked)} of {WRITES} writes acknowledged"
        assert attacker.hits == 0, f"{attacker.hits} requests were sent to the attacker"
        assert answers and all(status == 401 and body["code"] == "unauthenticated"
                               for status, body in answers), answers[:3]
        assert "signed with the cluster secret" in answers[0][1]["message"], answers[0]
        status, view = follower.request("GET", "/v1/cluster")
        assert view["leader_http_address"] == h.addr_of(leader, "http.addr"), view
        assert metric(follower, "http_in", "unsigned") >= 1

        # Signed announcements: only a member's own, signed with this cluster's secret, once.
        cluster_id, secret_file = cluster.auth
        secret = read_secret(secret_file)
        body = json.dumps(spoof).encode()
        path = "/v1/cluster/announce"

        def signed(**kwargs):
            return {"X-Kvatlas-Peer-Auth": peer_header(kwargs.pop("secret", secret), cluster_id,
                                                       kwargs.pop("sender", follower.id), "POST",
                                                       path, body, **kwargs)}

        status, answer = post_raw(leader, path, body, signed())
        assert status == 403 and answer["code"] == "permission_denied", (status, answer)
        assert f"server {follower.id} may announce only its own" in answer["message"], answer
        status, answer = post_raw(leader, path, body, signed(secret=b"x" * 32))
        assert status == 401 and "does not verify" in answer["message"], (status, answer)
        stale = int(time.time() * 1000) - 120_000
        status, answer = post_raw(leader, path, body, signed(ts=stale))
        assert status == 401 and "clocks" in answer["message"], (status, answer)
        own = json.dumps({"id": follower.id, "http_address": h.addr_of(follower, "http.addr"),
                          "rpc_address": h.addr_of(follower, "rpc.addr")}).encode()
        header = {"X-Kvatlas-Peer-Auth": peer_header(secret, cluster_id, follower.id, "POST",
                                                     path, own)}
        status, answer = post_raw(leader, path, own, header)
        assert status == 200, (status, answer)  # a member's own addresses, properly signed
        status, answer = post_raw(leader, path, own, header)
        assert status == 401 and "replay" in answer["message"], (status, answer)
        for reason in ("wrong_sender", "bad_proof", "stale", "replay"):
            assert metric(leader, "http_in", reason) >= 1, reason
    finally:
        attacker.shutdown()
        cluster.cleanup()


def rogue(binary, cluster, name, node_id, peers, auth, raft_listen=None):
    d = os.path.join(cluster.root, name)
    os.makedirs(d)
    node = h.Node(binary, node_id, peers, d, raft_listen=raft_listen, auth=auth)
    node.start()
    return node


def view(node):
    status, body = node.request("GET", "/v1/cluster")
    assert status == 200, body
    return body


def case_rogue_raft(binary):
    # No replica audits: their periodic log entries would grow the log the case checks.
    cluster = h.Cluster(binary, extra=("--audit-interval-ms", "0"))
    rogues = []
    try:
        leader = cluster.leader()
        acked = [(i, h.write(leader, i)) for i in range(10)]
        h.wait_addresses_known(cluster)
        victim = next(n for n in cluster.nodes if n is not leader)
        other = next(n for n in cluster.nodes if n is not leader and n is not victim)
        victim.kill()
        cluster_id, _ = cluster.auth
        before = {n.id: view(n) for n in (leader, other)}
        peers = leader.peers

        # Another secret, posing as the stopped follower (its id and raft address).
        os.makedirs(os.path.join(cluster.root, "wrong"))
        wrong_secret = h.make_auth(os.path.join(cluster.root, "wrong"), cluster_id)
        rogues.append(rogue(binary, cluster, "rogue-secret", victim.id, peers, wrong_secret))
        wait_metric(leader, "raft_in", "bad_proof", "another secret")
        wait_metric(leader, "raft_out", "refused_by_peer", "the rogue refuses the leader")
        rogues.pop().kill()
        # The same secret, another cluster id.
        other_cluster = (cluster_id + "-other", cluster.auth[1])
        rogues.append(rogue(binary, cluster, "rogue-cluster", victim.id, peers, other_cluster))
        wait_metric(leader, "raft_in", "wrong_cluster", "another cluster id")
        rogues.pop().kill()
        # The right secret and cluster id, a server id not in the configuration that
        # bootstraps a configuration of its own naming the members (so it campaigns).
        port = h.free_ports(1)[0]
        rogues.append(rogue(binary, cluster, "rogue-id", 9, peers + f",9@127.0.0.1:{port}",
                            cluster.auth))
        wait_metric(leader, "raft_in", "not_member", "server 9 is not a member")
        time.sleep(1.5)  # three election timeouts of the rogue's campaigning
        rogues.pop().kill()

        after = {n.id: view(n) for n in (leader, other)}
        for node_id, was in before.items():
            now = after[node_id]
            assert now["leader_id"] == leader.id, (was, now)
            assert now["term"] == was["term"], f"server {node_id}: term {was['term']} -> {now['term']}"
            assert now["last_index"] == was["last_index"], (
                f"server {node_id}: log {was['last_index']} -> {now['last_index']}")
            assert sorted(m["id"] for m in now["members"]) == [1, 2, 3], now

        # The real follower comes back and the cluster goes on.
        victim.start()
        acked += [(i, h.write(leader, i)) for i in range(10, 20)]
        assert all(rev for _, rev in acked), acked
        h.check_acked(cluster, acked, cluster.nodes)

        # A server with another secret cannot join: the leader is asked to add it, and it
        # never receives the log.
        port = h.free_ports(1)[0]
        joiner = rogue(binary, cluster, "rogue-join", 4, peers, wrong_secret,
                       raft_listen=f"127.0.0.1:{port}")
        rogues.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status != 200, (status, body)
        wait_metric(joiner, "raft_in", "bad_proof", "the leader's connections to the joiner")
        assert view(joiner)["last_index"] == 0, view(joiner)
        assert view(joiner)["members"] == [], view(joiner)
    finally:
        for node in rogues:
            node.kill()
        cluster.cleanup()


CASES = {
    "spoofed_announce": case_spoofed_announce,
    "rogue_raft": case_rogue_raft,
}

if __name__ == "__main__":
    h.run_cases(CASES)
