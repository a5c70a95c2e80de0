#!/usr/bin/python3
"""Servers hosting several raft groups (docs/scaling.md §Groups on every server).

usage: groups_test.py KVATLAS_SERVER_BINARY [CASE...]

Three servers run `--groups 3` (with the default 3 replicas, every group on every one of
them). Every group has group 1's voters, and the groups' leaders
are spread: group g is led by group 1's voters taken as a ring from group 1's leader, the
(g - 1)-th (so each of the three servers leads one group). Writes of many models (each
model's contexts live in its home group) go through a server that does not lead group 1,
which hands each part of a group it does not lead to that group's leader (an internal call,
refused unsigned), and are read back on every server; /v1/groups shows the contexts spread
over the groups. Killing group 1's leader: each group is led by a survivor, by its
preferred one where that is alive; writes go on, and the killed server, back and caught up,
leads its groups again. A server drained by hand leads no group, keeps taking writes, and
leads its share again once undrained; a server stopped with SIGTERM hands its groups over
before it exits, so the others need no election. An engine's ZMQ stream is followed by the leader of its model's
home group only, and resumed by that group's next leader. A server added to group 1 of a
cluster run with `--replicas 0` is added to every group and takes its share of the
leaderships; one run with another replication factor than the cluster's is refused as it
announces itself, and says it is not ready, naming both. A data directory refuses to start with another group count, or with another
replication factor than it recorded at its first start; one without the record (made by
an older build) runs `replicas` 0. A group whose snapshot reached snapshot_stop_bytes takes no
new contexts: a new context whose home it is is placed on another group by the directory.
Loopback only, bounded in time, cleaned up.
"""

import json
import os
import signal
import subprocess
import sys
import time
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


def voters_of(group):
    return sorted(m["id"] for m in group["members"] if m["role"] == "voter")


def preferred_leader(voters, first_leader, group_id):
    """Group `group_id`'s preferred leader: `voters` as a ring from group 1's leader."""
    return voters[(voters.index(first_leader) + group_id - 1) % len(voters)]


def spread(node, voters, alive=None):
    """Every group on `node` has `voters` as its voters and is led by its preferred leader,
    or, where that server is not in `alive` (default: every voter), by one that is."""
    alive = set(voters if alive is None else alive)
    groups = groups_of(node)
    if len(groups) != GROUPS or any(voters_of(g) != voters for g in groups):
        return False
    first = groups[0]["leader_id"]
    if first not in alive:
        return False
    for g in groups:
        want = preferred_leader(voters, first, g["id"])
        if g["preferred_leader"] != want:
            return False
        if g["leader_id"] != want and (want in alive or g["leader_id"] not in alive):
            return False
    return True


def leader_of(node, group_id):
    return next(g["leader_id"] for g in groups_of(node) if g["id"] == group_id)


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


def internal_call_refused(node, path):
    """An internal call (POST `path`, docs/api.md): unsigned, or not its binary body, it is
    refused."""
    for content_type, expected in (("application/octet-stream", 401), ("application/json", 415)):
        req = urllib.request.Request(node.base + path, data=b"\x01\x02",
                                     method="POST", headers={"Content-Type": content_type})
        try:
            urllib.request.urlopen(req, timeout=5)
            return False
        except urllib.error.HTTPError as e:
            if e.code != expected:
                return False
    return True


def apply_refused(node):
    """POST /v1/cluster/apply is an internal call: unsigned, or not a batch, it is refused."""
    return internal_call_refused(node, "/v1/cluster/apply?group=2")


def wait_all_held(nodes, written):
    for node in nodes:
        h.wait_until(f"server {node.id} holds every acknowledged write",
                     lambda node=node: all(holds(node, m, i) for m, i in written))


def case_spread_and_failover(binary):
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        leader = cluster.leader()
        h.wait_until("the groups' leaders are spread over the servers",
                     lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))
        assert sorted(g["leader_id"] for g in groups_of(leader)) == [1, 2, 3]
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        written = [(m, 0) for m in range(MODELS)]
        for m, i in written:
            assert write(follower, m, i), f"write of m{m} through server {follower.id} failed"
        wait_all_held(cluster.nodes, written)
        groups = groups_of(leader)
        holding = [g["id"] for g in groups if g["contexts"] > 0]
        assert len(holding) >= 2, f"every context landed in one group: {groups}"
        assert sum(g["contexts"] for g in groups) == MODELS, groups
        # The server handed the parts of each group it does not lead to that group's leader,
        # and applied its own group's itself.
        parts = forwarded(follower)
        others = {g["id"] for g in groups if g["id"] in holding and g["leader_id"] != follower.id}
        assert set(parts) == others, (parts, groups)
        assert apply_refused(follower)
        # A listing of one group: a group number out of range, or not one, is refused.
        status, body = follower.request("GET", "/v1/holders?group=2")
        assert status == 200, (status, body)
        for bad in ("0", str(GROUPS + 1), "x", "", "-1", "2%20"):
            status, body = follower.request("GET", f"/v1/holders?group={bad}")
            assert status == 400 and f"1 to {GROUPS}" in body["message"], (bad, status, body)
        # Each server holds the same contexts in each group.
        for node in cluster.nodes:
            h.wait_until(f"server {node.id}'s groups hold what the leader's do", lambda node=node: [
                (g["id"], g["contexts"], g["entries"]) for g in groups_of(node)
            ] == [(g["id"], g["contexts"], g["entries"]) for g in groups])

        leader.kill(signal.SIGKILL)
        survivors = [n for n in cluster.nodes if n.id != leader.id]
        alive = [n.id for n in survivors]
        cluster.leader(exclude=(leader.id,))
        h.wait_until("every group is led by a survivor, its preferred one where alive",
                     lambda: all(spread(n, [1, 2, 3], alive) for n in survivors))
        more = [(m, 1) for m in range(MODELS)]
        for m, i in more:
            assert write(survivors[-1], m, i), f"write of m{m} after the failover failed"
        wait_all_held(survivors, written + more)
        leader.start()
        wait_all_held([leader], written + more)
        h.wait_until("the server back leads its groups again",
                     lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))


def case_engine_stream_follows_its_group(binary):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                    "integration"))
    import zmq_ingest_test as z  # the fake engine driver
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        leader = cluster.leader()
        h.wait_until("the groups' leaders are spread over the servers",
                     lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))
        # A model whose home group is not group 1, so its leader is not group 1's.
        model = next(f"e{i}" for i in range(100) if h.home_group(f"e{i}", z.BS, GROUPS) != 1)
        home = h.home_group(model, z.BS, GROUPS)
        fake = z.Fake()
        try:
            fake.register_on(leader, model=model)
            fake.store(z.PROMPT[:2 * z.BS])

            def gpu(node):
                status, body = node.request("POST", "/query", {
                    "model": model, "block_size": z.BS, "token_ids": z.PROMPT})
                return body.get("default", {}).get("e1", {}).get("GPU") if status == 200 else None

            h.wait_until("every server holds the engine's blocks",
                         lambda: all(gpu(n) == 2 * z.BS for n in cluster.nodes))
            assert [g["contexts"] for g in groups_of(leader) if g["id"] == home] == [1], \
                f"{model} is not in group {home}: {groups_of(leader)}"
            follower_id = leader_of(leader, home)
            assert follower_id != leader.id
            for node in cluster.nodes:
                status, body = node.request("GET", "/v1/streams")
                keys = [s["key"] for s in body["streams"]]
                assert (len(keys) == 1) == (node.id == follower_id), (node.id, follower_id, keys)
            # Its group's leader killed, the group's next leader resumes it from the
            # replicated position and replays exactly the gap.
            stream_leader = next(n for n in cluster.nodes if n.id == follower_id)
            stream_leader.kill(signal.SIGKILL)
            survivors = [n for n in cluster.nodes if n.alive()]
            fake.store(z.PROMPT[:3 * z.BS], from_block=2)
            h.wait_until(f"group {home} has a new leader",
                         lambda: leader_of(survivors[0], home) in [n.id for n in survivors])
            assert fake.cmd(op="wait_peer", count=1, timeout_ms=10000)["ok"]
            fake.store(z.PROMPT[:4 * z.BS], from_block=3)
            h.wait_until("the survivors hold every block",
                         lambda: all(gpu(n) == 4 * z.BS for n in survivors))
            new_leader = next(n for n in survivors if n.id == leader_of(survivors[0], home))
            h.assert_stream_resumed(new_leader)
            # Unregistered (group 1 has the registry), every group forgets the stream and
            # drops the holder's entries, its home group included.
            status, body = survivors[0].request("POST", "/unregister", {"instance_id": "e1"})
            assert status == 200, body
            h.wait_until("the survivors dropped the engine's blocks",
                         lambda: all(not gpu(n) for n in survivors))
            status, body = new_leader.request("GET", "/v1/streams")
            assert body["streams"] == [], body
        finally:
            fake.close()


def case_joining_server_joins_every_group(binary):
    # Every group on every server however many there are: not the default of 3 replicas.
    flags = ["--groups", str(GROUPS), "--replicas", "0"]
    with h.running_cluster(binary, extra=flags) as cluster:
        leader = cluster.leader()
        # Group 1's leader is known; the other groups may still be electing theirs (slower
        # under ASan) or handing them to their preferred leaders, and a write whose group's
        # leadership moves while it commits is answered as failed (it may or may not apply).
        h.wait_until("every group is led by its preferred leader",
                     lambda: spread(leader, [1, 2, 3]))
        written = [(m, 0) for m in range(8)]
        for m, i in written:
            assert write(leader, m, i), f"write of m{m} through server {leader.id} failed"
        port = h.free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        joiner = h.Node(binary, 4, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}",
                        auth=cluster.auth)
        joiner.extra = list(flags)
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        # Group 1's leadership goes to the new server, maybe before the other groups have it
        # as a voter: their leader adds it, and they are led by the ring from server 4.
        h.wait_until("server 4 takes group 1's leadership", lambda: leader.request(
            "POST", "/v1/cluster/transfer", {"id": 4})[0] == 200)
        h.wait_until("every group has server 4 as a voter, and leaders follow the ring from it",
                     lambda: spread(joiner, [1, 2, 3, 4]) and leader_of(joiner, 1) == 4)
        wait_all_held([joiner], written)
        assert write(joiner, 99, 0), "a write through the new leader failed"


def case_mismatched_joiner_refused(binary):
    # The cluster runs the default 3 replicas; a server added with `--replicas 0` would
    # place and drop replicas by another rule than group 1's leader.
    with h.running_cluster(binary, extra=["--groups", str(GROUPS)]) as cluster:
        leader = cluster.leader()
        port = h.free_ports(1)[0]
        d = os.path.join(cluster.root, "n4")
        os.makedirs(d)
        joiner = h.Node(binary, 4, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}",
                        auth=cluster.auth)
        joiner.extra = ["--groups", str(GROUPS), "--replicas", "0"]
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 4, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        mismatch = f"server 4 runs --groups {GROUPS} --replicas 0, but group 1's leader"

        def refused():
            status, body = joiner.request("GET", "/readyz")
            return status == 503 and mismatch in json.dumps(body) and \
                f"runs --groups {GROUPS} --replicas 3" in json.dumps(body)
        h.wait_until("the joiner says it is not ready, naming both settings", refused)
        # Nothing recorded: no server forwards to it or sends clients to it.
        members = leader.request("GET", "/v1/cluster")[1]["members"]
        assert not [m for m in members if m["id"] == 4 and m.get("http_address")], members
        assert "refused server 4's announcement" in open(os.path.join(leader.data_dir, "server.log")).read()
        assert "refused this server's announcement" in open(os.path.join(joiner.data_dir, "server.log")).read()
        # The cluster goes on.
        assert write(leader, 1, 0), "a write after the refusal failed"
        # Handed group 1's leadership, it hands it back (as a draining server) and changes
        # no group's members by its own rule (every group on every server): each group but
        # group 1 (on every server) keeps 3 of the 4 voters, as the cluster's leaders place
        # them.
        h.wait_until("server 4 is a voter and takes group 1's leadership", lambda: leader.request(
            "POST", "/v1/cluster/transfer", {"id": 4})[0] == 200)
        h.wait_until("server 4 hands group 1 back", lambda: leader_of(leader, 1) not in (4, 0))
        time.sleep(1)
        groups = groups_of(leader)
        assert leader_of(leader, 1) != 4, groups
        assert all(len(voters_of(g)) == 3 for g in groups if g["id"] != 1), groups
        # Nor did it record its addresses while it led group 1.
        members = leader.request("GET", "/v1/cluster")[1]["members"]
        assert not [m for m in members if m["id"] == 4 and m.get("http_address")], members
        assert joiner.request("GET", "/readyz")[0] == 503


def led_by(node, server_id):
    """The ids of the groups `node` sees led by `server_id`."""
    return [g["id"] for g in groups_of(node) if g["leader_id"] == server_id]


def drained(node, server_id):
    """Every group on `node` is led, and by another server than `server_id`, which is
    nobody's preferred leader and shown draining."""
    groups = groups_of(node)
    status, cluster = node.request("GET", "/v1/cluster")
    draining = [m["id"] for m in cluster.get("members", []) if m.get("draining")]
    return (len(groups) == GROUPS and draining == [server_id]
            and all(g["leader_id"] not in (0, server_id) for g in groups)
            and all(g["preferred_leader"] not in (0, server_id) for g in groups))


def case_drain(binary):
    with h.running_cluster(binary, extra=("--groups", str(GROUPS))) as cluster:
        h.wait_until("the groups' leaders are spread over the servers",
                     lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))
        # Group 1's leader drains (asked through another server, which forwards it).
        target = cluster.leader()
        other = next(n for n in cluster.nodes if n.id != target.id)
        for body, code in (({"id": 99}, 404), ({"id": "x"}, 400),
                           ({"id": target.id, "draining": "yes"}, 400)):
            status, answer = other.request("POST", "/v1/cluster/drain", body)
            assert status == code and "message" in answer, (body, status, answer)
        # A drain is kept with the server's announced addresses: refused (412) until then.
        h.wait_until(f"server {target.id} is drained", lambda: other.request(
            "POST", "/v1/cluster/drain", {"id": target.id})[1].get("draining") is True)
        h.wait_until(f"server {target.id} leads no group, on every server",
                     lambda: all(drained(n, target.id) for n in cluster.nodes))
        # It keeps serving: its writes go to the groups' leaders.
        written = [(m, 0) for m in range(MODELS)]
        for m, i in written:
            assert write(target, m, i), f"write of m{m} through the draining server failed"
        wait_all_held(cluster.nodes, written)
        # It stays drained (its announcer does not end it), then is undrained.
        assert not led_by(other, target.id)
        status, answer = target.request("POST", "/v1/cluster/drain",
                                        {"id": target.id, "draining": False})
        assert status == 200 and answer["draining"] is False, (status, answer)
        h.wait_until("the undrained server leads its share again",
                     lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))

        # A server asked to stop (SIGTERM) hands its groups over first: once it has exited,
        # no group is led by it any more, as the others see it, without waiting for an
        # election (500-1000 ms here). (A group may be between two leaders: the ring moves
        # with group 1's leader, so other groups are handed on too.)
        for stopping in (cluster.leader(), next(n for n in cluster.nodes if led_by(n, n.id)
                                                 and n.id != cluster.leader().id)):
            survivors = [n for n in cluster.nodes if n.id != stopping.id]
            assert led_by(survivors[0], stopping.id), "the server to stop leads no group"
            stopping.kill(signal.SIGTERM)
            # A follower's view of its leader is refreshed every 50 ms: allow 300 ms, well
            # short of the election timeout a stop without a drain would need.
            deadline = time.monotonic() + 0.3
            while True:
                leaders = {g["id"]: g["leader_id"] for g in groups_of(survivors[0])}
                if len(leaders) == GROUPS and stopping.id not in leaders.values():
                    break
                assert time.monotonic() < deadline, leaders
                time.sleep(0.02)
            assert "every group is led by another server" in stopping.log_tail(), \
                stopping.log_tail()
            more = [(m, 1) for m in range(MODELS)]
            for m, i in more:
                assert write(survivors[0], m, i), f"write of m{m} after the drain failed"
            # Back, its drain ends (it announces itself as it starts) and it leads again.
            stopping.start()
            h.wait_until("the restarted server leads its share again",
                         lambda: all(spread(n, [1, 2, 3]) for n in cluster.nodes))
            wait_all_held(cluster.nodes, written + more)


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

        # The replication factor is recorded in the data directory at its first start (the
        # default, 3) and fixed: another one given is refused naming the record.
        record = os.path.join(node.data_dir, "replicas")
        with open(record) as f:
            assert f.read() == "3\n"
        assert replication_factor(node) == 3
        node.kill(signal.SIGTERM)
        run = subprocess.run([*node.command(), "--replicas", "2"], capture_output=True,
                             text=True, timeout=h.DEADLINE_S)
        assert run.returncode != 0, "--replicas 2 started on a directory recording 3"
        assert f"{node.data_dir} records 3 (fixed when it was made), but replicas is 2" \
            in run.stderr, run.stderr[-2000:]
        # A directory made before the record (every group on every server by default)
        # keeps running so, whatever the new default, and records it.
        os.remove(record)
        node.start()
        assert replication_factor(node) == 0
        with open(record) as f:
            assert f.read() == "0\n"
        node.kill(signal.SIGTERM)
        node.start()
        assert replication_factor(node) == 0


def replication_factor(node):
    status, body = node.request("GET", "/v1/groups")
    assert status == 200, body
    return body["replication_factor"]


def directory_of(node):
    status, body = node.request("GET", "/v1/directory")
    assert status == 200, body
    return body


def placed_on(node, model):
    """The group the directory on `node` places model `model`'s context on, or None."""
    for context in directory_of(node)["contexts"]:
        if context["model_name"] == model and context["block_size"] == BS:
            return context["ranges"][0]["group"]
    return None


def directory_accepting(node, group_id):
    listed = [g for g in directory_of(node)["groups"] if g["id"] == group_id]
    return not listed or listed[0]["accepting"]


def write_model(node, model, i):
    event = {"event_type": "stored", "model_name": model, "block_size": BS, "backend_id": "w",
             "token_ids": prompt(0, i)}
    status, body = node.request("POST", "/v1/events", {"events": [event]})
    return status == 200


def holds_model(node, model, i):
    status, body = node.request("POST", "/query", {"model": model, "block_size": BS,
                                                   "token_ids": prompt(0, i)})
    return status == 200 and body.get("default", {}).get("w", {}).get("GPU") == 2 * BS


def case_placement(binary):
    """A group whose snapshot reached snapshot_stop_bytes takes no new contexts: the placement
    directory says so, and a new context whose home it is gets placed on another group,
    written there and read through every server. The group keeps taking the contexts it
    holds. The directory survives a restart."""
    extra = ("--groups", str(GROUPS), "--snapshot-stop-bytes", "1",
             "--raft-snapshot-threshold", "32")
    models = [f"p{i}" for i in range(200)]
    homed_2 = [m for m in models if h.home_group(m, BS, GROUPS) == 2]
    held, fresh = homed_2[0], homed_2[1]
    with h.running_cluster(binary, extra=extra) as cluster:
        leader = cluster.leader()
        node = next(n for n in cluster.nodes if n.id != leader.id)
        h.wait_until("every group has a leader",
                     lambda: all(g["leader_id"] for g in groups_of(node)) and groups_of(node))
        # One write, one log entry, until group 2 snapshots and the directory records that it
        # takes no new contexts.
        i = 0
        while directory_accepting(node, 2):
            assert i < 600, "group 2 still takes new contexts after 600 writes"
            assert write_model(node, held, i), f"write {i} of {held} failed"
            i += 1
            if i % 32 == 0:
                time.sleep(0.2)
        accepting = [g["id"] for g in groups_of(node) if g["accepting"]]
        assert 2 not in accepting and accepting, groups_of(node)

        assert write_model(node, fresh, 0), f"the new context {fresh} was not written"
        target = placed_on(node, fresh)
        assert target in accepting, (target, directory_of(node))
        for n in cluster.nodes:
            h.wait_until(f"server {n.id} places {fresh} on group {target} and holds it",
                         lambda n=n: placed_on(n, fresh) == target and holds_model(n, fresh, 0))
        groups = {g["id"]: g for g in groups_of(node)}
        assert groups[target]["placed_contexts"] == 1, groups
        h.wait_until("group 2 holds nothing of the placed context", lambda: all(
            g["contexts"] == 1 for g in groups_of(node) if g["id"] == 2))
        # Its held context still goes to group 2 (no placement), through every server.
        for n in cluster.nodes:
            assert write_model(n, held, 1000 + n.id), f"held write through {n.id} failed"
            assert write_model(n, fresh, 1000 + n.id), f"placed write through {n.id} failed"
        assert placed_on(node, held) is None
        epoch = directory_of(node)["epoch"]
        assert epoch >= 2, directory_of(node)

        node.kill(signal.SIGTERM)
        node.start()
        h.wait_until("the restarted server has the directory and the placed context", lambda: (
            directory_of(node)["epoch"] >= epoch and placed_on(node, fresh) == target
            and all(holds_model(node, fresh, 1000 + n.id) for n in cluster.nodes)))


CASES = {
    "spread_and_failover": case_spread_and_failover,
    "engine_stream": case_engine_stream_follows_its_group,
    "joining_server": case_joining_server_joins_every_group,
    "mismatched_joiner": case_mismatched_joiner_refused,
    "group_count_fixed": case_group_count_is_fixed,
    "drain": case_drain,
    "placement": case_placement,
}

if __name__ == "__main__":
    h.run_cases(CASES)
