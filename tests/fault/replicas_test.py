#!/usr/bin/python3
"""Groups with replicas on some servers (docs/scaling.md §Replicas on some servers).

usage: replicas_test.py KVATLAS_SERVER_BINARY [CASE...]

Five servers run `--groups 6 --replicas 3`. Group 1 stays on every server; each other
group's voters are three servers picked by rendezvous hashing and balanced (PlaceReplicas), its
leader one of them, and group 1's directory records them. A server holds entries of the
groups placed on it only; a lookup (REST, Conductor or binary protocol) through a server
that holds no replica of the context's group is answered by a member, and a write through
it reaches the group's leader; a REST snapshot or watch there is relayed from a member.
A client that routes by the directory sends each context's reads (lookups, snapshots,
watches, a LocalIndex's) to a member itself, so its server sends none on. With one server
killed every group keeps a majority, and writes and lookups through the others go on.
A sixth server added to group 1 takes its share of the replicas: the groups chosen onto it
add it, record the new members, then remove the server it replaces, which then drops its
copy (docs/scaling.md §Dropping a copy), and every write stays readable; removed again, its
groups go back to the servers that dropped them, which take them whole again. An online
backup through a server that holds some of the groups fetches the others' parts from their
members; restored on five new servers, each group ends up on its chosen servers only.
Loopback only, bounded in time, cleaned up.
"""

import json
import os
import shutil
import signal
import sys
import tempfile
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import backup_test as bt  # noqa: E402 - restores and new clusters on given directories
import cluster_fault_test as h  # noqa: E402 - the shared harness
import groups_test as gt  # noqa: E402 - its prompts, writes and reads
import replica_placement as rp  # noqa: E402 - PlaceReplicas, as the servers compute it
import kvatlas  # noqa: E402 - the Python package (pybind11), for binary-protocol reads

GROUPS = 6
REPLICAS = 3
MODELS = 30
BS = gt.BS


def choose_members(group, servers, replicas):
    """The members PlaceReplicas gives group `group` of GROUPS."""
    return rp.place_replicas(GROUPS, servers, replicas)[group]


prompt, write = gt.prompt, gt.write


def holds(node, model, i):
    """Both the Conductor query and the lookup through `node` find the prompt's 2 blocks."""
    if not gt.holds(node, model, i):
        return False
    status, body = node.request("POST", "/v1/lookup", {"model_name": f"m{model}",
                                                       "block_size": BS,
                                                       "token_ids": prompt(model, i)})
    return status == 200 and body.get("blocks_found") == 2


def holds_binary(client, model, i, linearizable=False):
    """A binary-protocol lookup through the client's server finds the prompt's 2 blocks."""
    answer = client.lookup(kvatlas.Context(f"m{model}", BS), tokens=prompt(model, i),
                           linearizable=linearizable)
    return answer.blocks_found == 2


def groups_of(node):
    status, body = node.request("GET", "/v1/groups")
    return {g["id"]: g for g in body["groups"]} if status == 200 else {}


def placed_as_chosen(nodes, servers):
    """Every live node records, for every group, the members PlaceReplicas picks of
    `servers` (group 1: none, it is on every server), and every group has a leader among
    them, as its members see it."""
    for node in nodes:
        groups = groups_of(node)
        if len(groups) != GROUPS or groups[1]["replicas"] != []:
            return False
        for gid in range(2, GROUPS + 1):
            want = choose_members(gid, servers, REPLICAS)
            g = groups[gid]
            if g["replicas"] != want or g["hosted_here"] != (node.id in want):
                return False
            if node.id in want:
                voters = sorted(m["id"] for m in g["members"] if m["role"] == "voter")
                if voters != want or g["leader_id"] not in want:
                    return False
    return True


def wait_all_held(nodes, written):
    for node in nodes:
        try:
            h.wait_until(f"server {node.id} answers every acknowledged write",
                         lambda node=node: all(holds(node, m, i) for m, i in written))
        except AssertionError as e:
            # Which write, in which group, and what the server answered for it.
            missing = next(((m, i) for m, i in written if not holds(node, m, i)), None)
            if missing is None:
                raise AssertionError(f"{e} (every write held when asked again)") from None
            m, i = missing
            answers = [node.request("POST", path, body) for path, body in (
                ("/query", {"model": f"m{m}", "block_size": BS, "token_ids": prompt(m, i)}),
                ("/v1/lookup", {"model_name": f"m{m}", "block_size": BS,
                                "token_ids": prompt(m, i)}))]
            raise AssertionError(f"{e}: m{m} (group {h.home_group(f'm{m}', BS, GROUPS)}) "
                                 f"answered {answers}") from None


def model_in_group(gid):
    return next(m for m in range(1000) if h.home_group(f"m{m}", BS, GROUPS) == gid)


def check_entries_only_where_placed(nodes, servers, written):
    """A server holds entries of the groups placed on it only, and as many as the other
    members of each."""
    per_group = {}
    for node in nodes:
        groups = groups_of(node)
        for gid in range(2, GROUPS + 1):
            if node.id in choose_members(gid, servers, REPLICAS):
                per_group.setdefault(gid, set()).add(groups[gid]["entries"])
            else:
                assert groups[gid]["entries"] == 0, (node.id, gid, groups[gid])
    expected_groups = {h.home_group(f"m{m}", BS, GROUPS) for m, _ in written} - {1}
    for gid in expected_groups:
        assert len(per_group[gid]) == 1 and per_group[gid] != {0}, (gid, per_group)


def copies_only_where_placed(nodes, servers):
    """No node holds entries of a group not placed on it (its copy dropped)."""
    for node in nodes:
        groups = groups_of(node)
        for gid in range(2, GROUPS + 1):
            if node.id not in choose_members(gid, servers, REPLICAS) and groups[gid]["entries"]:
                return False
    return True


def dropped(node):
    """{group: copies node dropped} (kvatlas_replicas_dropped_total)."""
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {int(line.split('group="')[1].split('"')[0]): int(float(line.rsplit(" ", 1)[1]))
            for line in text.splitlines()
            if line.startswith("kvatlas_replicas_dropped_total{")}


def forwarded_reads(node):
    """Reads `node` sent on to another group's member (kvatlas_group_forwarded_reads_total)."""
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
               if line.startswith("kvatlas_group_forwarded_reads_total{"))


def check_routed_client(node, servers, written):
    """A client connected to `node` only, routing by the directory, reads every group —
    lookups, a snapshot, a watch and a LocalIndex of groups `node` holds no replica of —
    from their members directly: `node` sends none of its reads on. One that does not
    route pays the second hop, and is refused the snapshot."""
    unheld = [g for g in range(2, GROUPS + 1) if node.id not in choose_members(g, servers, 3)]
    assert unheld, f"server {node.id} holds every group"
    rpc = h.addr_of(node, "rpc.addr")
    before = forwarded_reads(node)
    client = kvatlas.Client([rpc])
    plain = kvatlas.Client([rpc], route_by_directory=False)
    try:
        for m, i in written:
            assert holds_binary(client, m, i), f"routed lookup of m{m} through {node.id}"
        assert forwarded_reads(node) == before, "a routed lookup was sent on by the server"
        ours = [(m, i) for m, i in written if h.home_group(f"m{m}", BS, GROUPS) in unheld]
        for m, i in ours:
            assert holds_binary(plain, m, i), f"lookup of m{m} through {node.id}"
        assert forwarded_reads(node) == before + len(ours), (forwarded_reads(node), before)

        model = model_in_group(unheld[0])
        context = kvatlas.Context(f"m{model}", BS)
        snapshot = client.snapshot(context)
        assert len(snapshot.copies) >= 2, snapshot
        try:
            plain.snapshot(context)
            raise AssertionError("a snapshot through a server without the group was answered")
        except kvatlas.Error as e:
            assert e.code == "wrong_group", e
        with client.watch_stream(filter=kvatlas.FeedFilter.for_context(context)) as stream:
            assert write(node, model, 7)
            h.wait_until(f"the routed watch of m{model} sees a write",
                         lambda: any(stream.next(timeout=0.2)))
        with kvatlas.LocalIndex([rpc], [context]) as index:
            index.wait_synced(timeout=30)  # raises unless synced
            found = index.lookup(context, tokens=prompt(model, 7))
            assert found.blocks_found == 2, found
    finally:
        client.close()
        plain.close()


def open_watch(node, model):
    """GET /v1/watch of model m{model}'s context through `node`, from now: the response."""
    return urllib.request.urlopen(
        f"{node.base}/v1/watch?model_name=m{model}&block_size={BS}&from=now", timeout=10)


def next_event(resp):
    """The next SSE event of `resp` (keep-alives skipped): a dict of its fields."""
    event = {}
    for raw in resp:
        line = raw.decode().rstrip("\n")
        if line == "":
            if event:
                return event
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        event[name] = value
    raise AssertionError(f"the stream ended; last event fields {event}")


def check_relayed_streams(nodes, servers):
    """REST streams through a server without the group are relayed from a member: a
    snapshot equal to the member's, and an SSE watch that sees new writes; killing the
    member it is relayed from ends the watch with an error event naming where to resume."""
    node = nodes[0]
    gid = next(g for g in range(2, GROUPS + 1) if node.id not in choose_members(g, servers, 3))
    members = choose_members(gid, servers, 3)
    model = model_in_group(gid)
    assert write(node, model, 1)
    before = forwarded_reads(node)
    path = f"/v1/snapshot?model_name=m{model}&block_size={BS}"
    status, body, headers = h.request_with_headers(node, "GET", path, None, {})
    assert status == 200, (status, body)
    assert headers.get("X-Kvatlas-Forwarded-From") == str(node.id), headers
    assert int(headers.get("X-Kvatlas-Relayed-From")) in members, headers
    member = next(n for n in nodes if n.id == members[0])
    status, direct = member.request("GET", path)
    assert status == 200, direct
    key = lambda c: (c["backend_id"], c["key"])  # noqa: E731
    assert sorted(body["copies"], key=key) == sorted(direct["copies"], key=key), (body, direct)
    assert len(body["copies"]) >= 2, body
    assert forwarded_reads(node) == before + 1, (forwarded_reads(node), before)

    with open_watch(node, model) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream"), resp.headers
        relayed_from = int(resp.headers["X-Kvatlas-Relayed-From"])
        assert relayed_from in members, resp.headers
        assert write(node, model, 9)
        seen = next_event(resp)
        assert f"m{model}" in seen.get("data", ""), seen
        last_id = int(seen["id"])
        # The member it is relayed from dies: the watch ends with an error event.
        victim = next(n for n in nodes if n.id == relayed_from)
        victim.kill(signal.SIGKILL)
        error = next_event(resp)
        assert error.get("event") == "error", error
        detail = json.loads(error["data"])
        assert detail["code"] == "unavailable" and detail["resume_from"] == last_id, detail
    victim.start()
    h.wait_until(f"server {victim.id} is back", lambda: victim.request("GET", "/healthz")[0] == 200)


def released_unsigned_refused(node):
    """POST /v1/cluster/released is an internal call: unsigned, it is refused 401."""
    req = urllib.request.Request(node.base + "/v1/cluster/released?group=2", data=b"{}",
                                 method="POST", headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=5)
        return False
    except urllib.error.HTTPError as e:
        return e.code == 401 and "code" in json.loads(e.read().decode())


def case_placed_and_served(binary):
    servers = [1, 2, 3, 4, 5]
    extra = ("--groups", str(GROUPS), "--replicas", str(REPLICAS))
    with h.running_cluster(binary, n=5, extra=extra) as cluster:
        h.wait_until("every group's replicas are on its chosen servers, and recorded",
                     lambda: placed_as_chosen(cluster.nodes, servers))
        for n in cluster.nodes:
            led = [g["id"] for g in groups_of(n).values() if g["leader_id"] == n.id]
            print(f"server {n.id} holds groups "
                  f"{[g for g in range(2, GROUPS + 1) if n.id in choose_members(g, servers, 3)]}"
                  f" and leads {led}")
        # Writes through every server, members of the model's group or not.
        written = []
        for m in range(MODELS):
            node = cluster.nodes[m % len(cluster.nodes)]
            assert write(node, m, 0), f"write of m{m} through server {node.id} failed"
            written.append((m, 0))
        wait_all_held(cluster.nodes, written)
        check_entries_only_where_placed(cluster.nodes, servers, written)
        # Binary-protocol lookups through every server by a client that does not route:
        # a server that holds no replica of the group has a member answer them, a
        # linearizable one included.
        for node in cluster.nodes:
            client = kvatlas.Client([h.addr_of(node, "rpc.addr")], route_by_directory=False)
            try:
                for m, i in written:
                    assert holds_binary(client, m, i, linearizable=(m % 3 == 0)), \
                        f"binary lookup of m{m} through server {node.id}"
            finally:
                client.close()

        check_routed_client(cluster.nodes[0], servers, written)

        assert gt.internal_call_refused(cluster.nodes[0], "/v1/cluster/read?group=2&type=2")
        assert released_unsigned_refused(cluster.nodes[0])
        check_relayed_streams(cluster.nodes, servers)

        # One server killed: every group keeps two of its three members.
        victim = cluster.nodes[1]
        victim.kill(signal.SIGKILL)
        alive = [n for n in cluster.nodes if n.id != victim.id]
        cluster.leader()
        more = []
        for m in range(MODELS):
            node = alive[m % len(alive)]
            h.wait_until(f"write of m{m} through server {node.id} with server 2 down",
                         lambda node=node, m=m: write(node, m, 1))
            more.append((m, 1))
        wait_all_held(alive, written + more)


def case_added_server_takes_its_share(binary):
    extra = ["--groups", str(GROUPS), "--replicas", str(REPLICAS)]
    with h.running_cluster(binary, n=5, extra=extra) as cluster:
        h.wait_until("every group's replicas are on its chosen servers",
                     lambda: placed_as_chosen(cluster.nodes, [1, 2, 3, 4, 5]))
        leader = cluster.leader()
        written = [(m, 0) for m in range(MODELS)]
        for m, i in written:
            assert write(leader, m, i), f"write of m{m} failed"
        port = h.free_ports(1)[0]
        d = os.path.join(cluster.root, "n6")
        os.makedirs(d)
        joiner = h.Node(binary, 6, cluster.nodes[0].peers, d, raft_listen=f"127.0.0.1:{port}",
                        auth=cluster.auth)
        joiner.extra = list(extra)
        joiner.start()
        cluster.nodes.append(joiner)
        status, body = leader.request("POST", "/v1/cluster/members",
                                      {"id": 6, "raft_address": f"127.0.0.1:{port}"})
        assert status == 200, body
        servers = [1, 2, 3, 4, 5, 6]
        moved = [g for g in range(2, GROUPS + 1) if 6 in choose_members(g, servers, REPLICAS)]
        assert moved, "no group is chosen onto server 6: pick other sizes"
        h.wait_until("the groups chosen onto server 6 have it, and the servers it replaces "
                     "are removed", lambda: placed_as_chosen(cluster.nodes, servers))
        wait_all_held(cluster.nodes, written)
        event = {"event_type": "stored", "model_name": "m1", "block_size": BS,
                 "backend_id": "w", "token_ids": prompt(1, 7)}
        status, body = joiner.request("POST", "/v1/events", {"events": [event]})
        assert status == 200, f"a write through server 6 failed: {status} {body}"
        written.append((1, 7))
        wait_all_held(cluster.nodes, written)
        # The servers server 6 replaced drop their copies of those groups.
        h.wait_until("the replaced servers dropped their copies",
                     lambda: copies_only_where_placed(cluster.nodes, servers), bound_s=120)
        check_entries_only_where_placed(cluster.nodes, servers, written)
        for node in cluster.nodes:
            want = {g: 1 for g in range(2, GROUPS + 1)
                    if node.id in choose_members(g, [1, 2, 3, 4, 5], REPLICAS)
                    and node.id not in choose_members(g, servers, REPLICAS)}
            assert dropped(node) == want, (node.id, dropped(node), want)

        # Server 6 removed again: its groups go back to the servers that dropped them,
        # which take them whole again, and every write stays readable.
        status, body = leader.request("DELETE", "/v1/cluster/members/6")
        assert status == 200, body
        joiner.kill()
        cluster.nodes.remove(joiner)
        h.wait_until("the groups are back on their first members",
                     lambda: placed_as_chosen(cluster.nodes, [1, 2, 3, 4, 5]))
        wait_all_held(cluster.nodes, written)
        h.wait_until("every copy is where it is placed",
                     lambda: copies_only_where_placed(cluster.nodes, [1, 2, 3, 4, 5]), bound_s=120)
        check_entries_only_where_placed(cluster.nodes, [1, 2, 3, 4, 5], written)


def digests_of(node):
    """{group: this server's state digest of its copy} (GET /v1/admin/digest)."""
    status, body = node.request("GET", "/v1/admin/digest")
    assert status == 200, (status, body)
    return {i + 1: part["state_digest"] for i, part in enumerate(body["groups"])}


def case_backup_restore(binary):
    """An online backup through a server holding some groups fetches the others' parts from
    their members; restored on five new servers with the same flags, each group ends up on
    its chosen servers only (the others drop their restored copies), every write readable."""
    root = tempfile.mkdtemp(prefix="kvatlas-replicas-backup-")
    backups = os.path.join(root, "backups")
    os.makedirs(backups)
    extra = ["--groups", str(GROUPS), "--replicas", str(REPLICAS)]
    servers = [1, 2, 3, 4, 5]
    try:
        with h.running_cluster(binary, n=5, extra=extra + ["--backup-dir", backups]) as cluster:
            h.wait_until("every group's replicas are on its chosen servers",
                         lambda: placed_as_chosen(cluster.nodes, servers))
            leader = cluster.leader()
            written = [(m, 0) for m in range(MODELS)]
            for m, i in written:
                assert write(leader, m, i), f"write of m{m} failed"
            wait_all_held(cluster.nodes, written)
            node = cluster.nodes[0]
            fetched = [g for g in range(2, GROUPS + 1)
                       if node.id not in choose_members(g, servers, REPLICAS)]
            assert fetched, "server 1 holds every group: pick other sizes"
            # A fetched part of several 4 MiB pages: 120,000 entries in one such group.
            bulk = model_in_group(fetched[0])
            for e in range(120):
                status, body = leader.request("POST", "/v1/events", {"events": [
                    {"event_type": "stored", "model_name": f"m{bulk}", "block_size": BS,
                     "backend_id": "bulk", "seq_hashes": [(e << 20) + k + 1
                                                          for k in range(1000)]}]})
                assert status == 200, body
            h.wait_until("the bulk writes are applied on every member", lambda: all(
                groups_of(n)[fetched[0]]["entries"] >= 120_000 for n in cluster.nodes
                if n.id in choose_members(fetched[0], servers, REPLICAS)), bound_s=120)
            # Past Node.request's 5 s: parts are written, fetched and fsynced first (ASan, CI).
            req = urllib.request.Request(node.base + "/v1/admin/backup", method="POST",
                                         data=json.dumps({"to": "b"}).encode(),
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=300) as resp:
                status, answer = resp.status, json.loads(resp.read())
            assert status == 200, (status, answer)
            assert [p["group"] for p in answer["groups"]] == list(range(1, GROUPS + 1)), answer
            assert answer["groups"][fetched[0] - 1]["bytes"] > 4 << 20, answer
            for p in answer["groups"]:
                gid = p["group"]
                source = bt.manifest_of(bt.group_dir(answer["path"], gid))["source"]
                if gid in fetched:
                    member = next(n for n in cluster.nodes if n.id == source["server_id"])
                    assert member.id in choose_members(gid, servers, REPLICAS), (gid, source)
                    assert digests_of(member)[gid] == p["state_digest"], (gid, p)
                else:
                    assert source["server_id"] == node.id, (gid, source)
            for n in cluster.nodes:
                parts = os.path.join(n.data_dir, "backup-parts")
                assert not os.path.isdir(parts) or not os.listdir(parts), (n.id, parts)
            print(f"  backup through server 1: groups {fetched} fetched from their members")
        code, out, err = bt.run(binary, "verify-backup", "--from", answer["path"])
        assert code == 0, (code, out, err)
        dirs = [os.path.join(root, f"r{i}") for i in servers]
        for d in dirs:
            code, out, err = bt.run(binary, "restore", "--from", answer["path"], "--data-dir", d)
            assert code == 0, (code, out, err)
        nodes, leader = bt.new_cluster(binary, root, "dst", 5, data_dirs=dirs, extra=extra)
        try:
            h.wait_until("the restored groups' replicas are on their chosen servers",
                         lambda: placed_as_chosen(nodes, servers))
            wait_all_held(nodes, written)
            # One group a round (2 s) per server, each drop a raft stop and restart.
            h.wait_until("the servers not chosen dropped their restored copies",
                         lambda: copies_only_where_placed(nodes, servers), bound_s=120)
            check_entries_only_where_placed(nodes, servers, written)
            more = [(m, 1) for m in range(MODELS)]
            for m, i in more:
                assert write(leader, m, i), f"write of m{m} to the restored cluster failed"
            wait_all_held(nodes, written + more)
        except BaseException:
            for n in nodes:
                print(f"--- server {n.id} log tail ---\n{n.log_tail()}", file=sys.stderr)
            raise
        finally:
            for n in nodes:
                bt.stop(n)
    finally:
        shutil.rmtree(root, ignore_errors=True)


CASES = {
    "placed_and_served": case_placed_and_served,
    "added_server": case_added_server_takes_its_share,
    "backup_restore": case_backup_restore,
}

if __name__ == "__main__":
    h.run_cases(CASES)
