#!/usr/bin/python3
"""Backup and restore (docs/operations.md §Backup and restore), real processes on loopback.

usage: backup_test.py KVATLAS_SERVER_BINARY [CASE...]

online_single   a server under continuous ingest is backed up through POST /v1/admin/backup;
                the backup restores into a new single server whose state digest is the
                backup's and which holds every write acknowledged before the backup began;
                it takes new writes and keeps them across a restart.
online_cluster  the same from the leader of a 3-server cluster, restored into a new 3-server
                cluster (new cluster id and secret): every member has the backup's digest and
                the writes; a new write reaches all three and their digests stay equal.
offline         `kvatlas-server backup --data-dir` refuses a running server's directory and
                backs up the stopped one; restored, it has every acknowledged write.
hostile         tokens on: no token 401, a write token 403; paths outside backup_dir, "..",
                symbolic links, non-empty targets refused with 4xx JSON; online backups off
                without backup_dir (412); a damaged or edited backup and a non-empty target
                data directory are refused by verify-backup and restore.
groups          a server running `--groups 3` with contexts of many models in every group is
                backed up online (every group's part, per-group figures in the answer and the
                CLI) and offline once stopped; each backup restores into a new server that
                starts with `--groups 3` and reads every context back; started with
                `--groups 1` the restored directory is refused naming both counts; a damaged or
                missing group-2 part fails verify-backup and restore naming group 2.
groups_cluster  the online backup of a 3-server `--groups 3` cluster's leader restored into a
                new 3-server cluster: every member reads every context back, in every group;
                once every group's RESTORED marker is gone (no write needed), a fourth
                server with an empty data directory joins and holds every restored context.

Prints the figures it measured (backup time and size, the longest write latency during the
backup). Bounded in time; every process and directory it creates is removed at the end.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness
import groups_test as g  # noqa: E402 - writes of many models, spread over the groups
from shutdown_test import Writers, holds, write  # noqa: E402 - writers with latencies

STARTED = []  # every node started, killed at the end of its case whatever happened


def stop(node):
    if node.alive():
        node.proc.send_signal(signal.SIGTERM)
        code = node.proc.wait(timeout=h.DEADLINE_S)
        assert code == 0, f"server {node.id} exited {code}:\n" + node.log_tail()
    node.log.close()


def run(binary, *args):
    done = subprocess.run([binary, *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout, done.stderr


def new_cluster(binary, root, name, n, data_dirs=None, extra=(), headers=None):
    """`n` servers with fresh ports, cluster id and secret, on `data_dirs` (created empty
    when not given); started, with their leader."""
    ports = h.free_ports(n)
    peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
    base = os.path.join(root, name)
    os.makedirs(base, exist_ok=True)
    auth = h.make_auth(base)
    nodes = []
    for i in range(n):
        d = data_dirs[i] if data_dirs else os.path.join(base, f"n{i + 1}")
        os.makedirs(d, exist_ok=True)
        node = h.Node(binary, i + 1, peers, d, auth=auth)
        node.extra = list(extra)
        nodes.append(node)
    STARTED.extend(nodes)
    for node in nodes:
        node.start()
    return nodes, leader_of(nodes, headers)


def leader_of(nodes, headers=None):
    deadline = time.time() + h.DEADLINE_S
    while time.time() < deadline:
        for node in nodes:
            status, body, _ = h.request_with_headers(node, "GET", "/v1/cluster", None,
                                                     headers or {})
            if status == 200 and body["state"] == "leader" and body["id"] == node.id:
                return node
        time.sleep(0.05)
    raise AssertionError("no leader:\n" + "\n".join(n.log_tail() for n in nodes))


def digest(node, revision=0):
    h.wait_applied(node, revision)
    status, body = node.request("GET", "/v1/admin/digest")
    assert status == 200, (status, body)
    return body


def manifest_of(backup):
    with open(os.path.join(backup, "backup.json")) as f:
        return json.load(f)


def backup_under_ingest(leader, backup_root, name):
    """Backs `leader` up while writers run; returns (answer, writes acked before the request,
    longest write latency overlapping the backup in ms)."""
    writers = Writers(leader, 0, count=2)

    def acked():
        with writers.lock:
            return list(writers.acked)

    try:
        deadline = time.time() + h.DEADLINE_S
        while len(acked()) < 200:
            assert time.time() < deadline, "writers made no progress"
            time.sleep(0.02)
        before = acked()
        started = time.monotonic()
        status, answer = leader.request("POST", "/v1/admin/backup", {"to": name})
        ended = time.monotonic()
        time.sleep(0.3)  # writes go on after the backup
    finally:
        acked = writers.finish()
    assert status == 200, (status, answer)
    assert answer["path"] == os.path.join(backup_root, name), answer
    after = [i for i in acked if i not in set(before)]
    assert after, "no write was acknowledged after the backup"
    overlapping = [e - s for s, e in writers.latencies if s < ended and e > started]
    worst = max(overlapping, default=0) * 1000
    m = manifest_of(answer["path"])
    assert m["applied_index"] == answer["applied_index"] and \
        m["state_digest"] == answer["state_digest"], (m, answer)
    print(f"  backup of {len(before)}+ writes: applied index {answer['applied_index']}, "
          f"{answer['records']} records, {answer['bytes']} bytes, capture "
          f"{answer['capture_micros']} us, total {answer['total_micros'] / 1000:.1f} ms "
          f"(request {1000 * (ended - started):.1f} ms); {len(overlapping)} writes overlapped "
          f"it, longest {worst:.1f} ms")
    return answer, before


def join_fourth(binary, root, name, nodes, leader, extra=()):
    """Adds a server 4 with an empty data directory to the restored cluster `nodes`."""
    port = h.free_ports(1)[0]
    empty = os.path.join(root, name, "n4")
    os.makedirs(empty)
    joiner = h.Node(binary, 4, nodes[0].peers, empty, raft_listen=f"127.0.0.1:{port}",
                    auth=nodes[0].auth)
    joiner.extra = list(extra)
    STARTED.append(joiner)
    joiner.start()
    nodes.append(joiner)
    status, body = leader.request("POST", "/v1/cluster/members",
                                  {"id": 4, "raft_address": f"127.0.0.1:{port}"})
    assert status == 200, (status, body)
    return joiner


def check_restored(nodes, answer, before):
    for node in nodes:
        d = digest(node)
        assert d["state_digest"] == answer["state_digest"], (node.id, d, answer)
        missing = [i for i in before if not holds(node, i)]
        assert not missing, f"server {node.id} lacks acked writes {missing[:5]}"


def backed_up_source(binary, root, n):
    """A new n-server cluster backed up under ingest from its leader, then stopped:
    (the backup's answer, the writes acknowledged before it)."""
    backups = os.path.join(root, "backups")
    os.makedirs(backups)
    nodes, leader = new_cluster(binary, root, "src", n, extra=["--backup-dir", backups])
    try:
        return backup_under_ingest(leader, backups, "b1")
    finally:
        for node in nodes:
            stop(node)


def case_online_single(binary, root):
    answer, before = backed_up_source(binary, root, 1)
    code, out, err = run(binary, "verify-backup", "--from", answer["path"])
    assert code == 0 and answer["state_digest"] in out, (code, out, err)
    target = os.path.join(root, "restored")
    code, out, err = run(binary, "restore", "--from", answer["path"], "--data-dir", target)
    assert code == 0, (out, err)
    nodes, leader = new_cluster(binary, root, "dst", 1, data_dirs=[target])
    try:
        check_restored(nodes, answer, before)
        status, body = write(leader, 10**6)
        assert status == 200, (status, body)
        grown = digest(leader, body["revision"])
        assert grown["state_digest"] != answer["state_digest"], grown
        stop(leader)
        leader.start()
        leader_of([leader])
        # The restored state and the new write, each once: the log's entries at or below
        # the database's applied index are not applied again.
        check_restored([leader], grown, before)
        assert holds(leader, 10**6), "a write to the restored server was lost at its restart"
    finally:
        for node in nodes:
            if node.alive():
                stop(node)


def case_online_cluster(binary, root):
    answer, before = backed_up_source(binary, root, 3)
    dirs = [os.path.join(root, f"r{i}") for i in range(3)]
    for d in dirs:
        code, out, err = run(binary, "restore", "--from", answer["path"], "--data-dir", d)
        assert code == 0, (out, err)
    nodes, leader = new_cluster(binary, root, "dst", 3, data_dirs=dirs)
    try:
        check_restored(nodes, answer, before)
        status, body = write(leader, 10**6)
        assert status == 200, (status, body)
        digests = {digest(node, body["revision"])["state_digest"] for node in nodes}
        assert len(digests) == 1 and answer["state_digest"] not in digests, digests
        assert all(holds(node, 10**6) for node in nodes)
        status, cluster = leader.request("GET", "/v1/cluster")
        assert sorted(m["id"] for m in cluster["members"]) == [1, 2, 3], cluster
        # Each restored server snapshots the restored state at once and drops the marker:
        # a member added later with an EMPTY data directory receives that snapshot instead
        # of a log that lacks the restored state.
        deadline = time.time() + h.DEADLINE_S
        while any(os.path.exists(os.path.join(d, "RESTORED")) for d in dirs):
            assert time.time() < deadline, "the restored servers kept their RESTORED marker"
            time.sleep(0.05)
        joiner = join_fourth(binary, root, "dst", nodes, leader)
        status, body = write(leader, 10**6 + 1)
        assert status == 200, (status, body)
        joined = {digest(node, body["revision"])["state_digest"] for node in nodes}
        assert len(joined) == 1, f"the member added after the restore diverged: {joined}"
        assert holds(joiner, 10**6) and all(holds(joiner, i) for i in before[:50])
    finally:
        for node in nodes:
            stop(node)


def case_offline(binary, root):
    nodes, leader = new_cluster(binary, root, "src", 1)
    acked = []
    try:
        for i in range(300):
            status, _ = write(leader, i)
            assert status == 200
            acked.append(i)
        target = os.path.join(root, "running")
        code, out, err = run(binary, "backup", "--data-dir", leader.data_dir, "--to", target)
        assert code == 1 and "in use" in err, (code, out, err)
        assert not os.path.exists(target), "a refused backup left a directory behind"
        live = digest(leader)
    finally:
        stop(leader)
    backup = os.path.join(root, "offline")
    started = time.monotonic()
    code, out, err = run(binary, "backup", "--data-dir", leader.data_dir, "--to", backup)
    elapsed = time.monotonic() - started
    assert code == 0, (out, err)
    m = manifest_of(backup)
    assert m["state_digest"] == live["state_digest"] and not m["source"]["online"], (m, live)
    print(f"  offline backup of 300 writes: {m['records']} records, {m['files'][0]['bytes']} "
          f"bytes, {1000 * elapsed:.0f} ms (the whole command)")
    target = os.path.join(root, "restored")
    code, out, err = run(binary, "restore", "--from", backup, "--data-dir", target)
    assert code == 0, (out, err)
    nodes, _ = new_cluster(binary, root, "dst", 1, data_dirs=[target])
    try:
        check_restored(nodes, {"state_digest": m["state_digest"]}, acked)
    finally:
        stop(nodes[0])


def token_line(name, role):
    token = "kvt_" + os.urandom(32).hex()
    return token, f"{name}:{role}:{hashlib.sha256(token.encode()).hexdigest()}\n"


def case_hostile(binary, root):
    backups = os.path.join(root, "backups")
    os.makedirs(backups)
    admin, admin_line = token_line("ops", "admin")
    writer, writer_line = token_line("ingest", "write")
    token_file = os.path.join(root, "tokens")
    with open(token_file, "w") as f:
        f.write(admin_line + writer_line)
    as_admin = {"Authorization": "Bearer " + admin}
    nodes, leader = new_cluster(binary, root, "src", 1, headers=as_admin,
                                extra=["--backup-dir", backups, "--token-file", token_file])

    def backup(body, headers=None, raw=None):
        headers = as_admin if headers is None else headers
        if raw is not None:
            import urllib.request
            req = urllib.request.Request(leader.base + "/v1/admin/backup", data=raw,
                                         method="POST")
            req.add_header("Content-Type", "application/json")
            for k, v in headers.items():
                req.add_header(k, v)
            try:
                with urllib.request.urlopen(req, timeout=5) as resp:
                    return resp.status, json.loads(resp.read())
            except urllib.error.HTTPError as e:
                return e.code, json.loads(e.read())
        status, answer, _ = h.request_with_headers(leader, "POST", "/v1/admin/backup", body,
                                                   headers)
        return status, answer

    try:
        event = {"event_type": "stored", "model_name": "m", "block_size": h.BS,
                 "backend_id": "w", "seq_hashes": list(range(1, 21))}
        status, body, _ = h.request_with_headers(leader, "POST", "/v1/events",
                                                 {"events": [event]}, as_admin)
        assert status == 200, (status, body)
        assert backup({"to": "x"}, {})[0] == 401
        assert backup({"to": "x"}, {"Authorization": "Bearer " + writer})[0] == 403
        status, body, _ = h.request_with_headers(leader, "GET", "/v1/admin/digest", None, {})
        assert status == 401, (status, body)
        assert not os.path.exists(os.path.join(backups, "x"))
        outside = os.path.join(root, "outside")
        os.makedirs(outside)
        os.symlink(outside, os.path.join(backups, "link"))
        os.makedirs(os.path.join(backups, "full"))
        with open(os.path.join(backups, "full", "f"), "w") as f:
            f.write("x")
        refused = [
            ({"to": "../escape"}, 400, ".."),
            ({"to": "a/../../escape"}, 400, ".."),
            ({"to": outside + "/b"}, 400, "under backup_dir"),
            ({"to": backups}, 400, "not itself"),
            ({"to": backups + "2/b"}, 400, "under backup_dir"),
            ({"to": "link/b"}, 400, "symbolic link"),
            ({"to": "link"}, 400, "symbolic link"),
            ({"to": ""}, 400, "directory"),
            ({"to": 7}, 400, "string"),
            ({"to": "a" * 2000}, 400, "longer"),
            ({"to": "ok", "mode": "fast"}, 400, "unknown field"),
            ({}, 400, "body.to"),
            ({"to": "full"}, 409, "not empty"),
        ]
        for body, want, words in refused:
            status, answer = backup(body)
            assert status == want and words in answer.get("message", ""), (body, status, answer)
            assert answer["code"] in ("invalid_argument", "already_exists"), answer
        status, answer = backup(None, raw=b'{"to": "a\\u0000b"}')
        assert status == 400 and "NUL" in answer["message"], (status, answer)
        assert os.listdir(outside) == [], "a refused backup wrote outside backup_dir"
        status, answer = backup({"to": os.path.join(backups, "nested", "ok")})
        assert status == 200, (status, answer)
        status, answer = backup({"to": "nested/ok"})
        assert status == 409, (status, answer)
        # The CLI: kvatlas cluster backup / digest, with and without the admin token.
        cli, http = h.cli_binary(binary), leader.base[len("http://"):]
        code, out, err = h.run_cli(cli, "--token", admin, "cluster", "backup", "cli", "--http",
                                   http)
        assert code == 0 and os.path.join(backups, "cli") in out, (code, out, err)
        code, out, err = h.run_cli(cli, "--token", admin, "cluster", "digest", "--http", http)
        assert code == 0 and manifest_of(os.path.join(backups, "cli"))["state_digest"] in out, \
            (code, out, err)
        code, out, err = h.run_cli(cli, "cluster", "backup", "cli2", "--http", http)
        assert code == 1 and "401" in err, (code, out, err)
        good = os.path.join(backups, "nested", "ok")
    finally:
        stop(leader)
    # Without backup_dir, online backups are off.
    nodes, plain = new_cluster(binary, root, "plain", 1)
    try:
        status, answer = plain.request("POST", "/v1/admin/backup", {"to": "x"})
        assert status == 412 and "backup_dir" in answer["message"], (status, answer)
    finally:
        stop(plain)

    # Damaged backups are refused by verify-backup and restore, which create nothing.
    def damaged(name, damage):
        copy = os.path.join(root, name)
        shutil.copytree(good, copy)
        damage(copy)
        code, out, err = run(binary, "verify-backup", "--from", copy)
        assert code == 1, (name, code, out, err)
        target = os.path.join(root, name + "-restored")
        code2, out2, err2 = run(binary, "restore", "--from", copy, "--data-dir", target)
        assert code2 == 1 and not os.path.exists(target), (name, code2, out2, err2)
        return err

    def flip_byte(copy):
        path = os.path.join(copy, "state.kvsn")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x40]))

    def edit_manifest(field, value):
        def edit(copy):
            m = manifest_of(copy)
            m[field] = value
            with open(os.path.join(copy, "backup.json"), "w") as f:
                json.dump(m, f)
        return edit

    def rehash_after(edit_bytes):
        """Damages the state file and updates the manifest's checksum to match: only the
        digest check can tell."""
        def damage(copy):
            path = os.path.join(copy, "state.kvsn")
            with open(path, "rb") as f:
                data = bytearray(f.read())
            edit_bytes(data)
            with open(path, "wb") as f:
                f.write(data)
            m = manifest_of(copy)
            m["files"][0]["sha256"] = hashlib.sha256(data).hexdigest()
            with open(os.path.join(copy, "backup.json"), "w") as f:
                json.dump(m, f)
        return damage

    def change_last_value_byte(data):
        data[-9] ^= 0x01  # the last byte of the last record's value, before the count

    assert "SHA-256" in damaged("flipped", flip_byte)
    assert "digest" in damaged("rehashed", rehash_after(change_last_value_byte))
    assert "bytes" in damaged("truncated", lambda c: os.truncate(
        os.path.join(c, "state.kvsn"), os.path.getsize(os.path.join(c, "state.kvsn")) - 1))
    assert "format_version" in damaged("future", edit_manifest("format_version", 99))
    assert "backup.json" in damaged("no-manifest",
                                    lambda c: os.remove(os.path.join(c, "backup.json")))
    assert "unexpected" in damaged("extra", lambda c: open(os.path.join(c, "x"), "w").close())
    # A target data directory that is not empty.
    busy = os.path.join(root, "busy")
    os.makedirs(busy)
    open(os.path.join(busy, "keep"), "w").close()
    code, out, err = run(binary, "restore", "--from", good, "--data-dir", busy)
    assert code == 1 and "not empty" in err and os.listdir(busy) == ["keep"], (code, out, err)
    code, out, err = run(binary, "restore", "--from", good)
    assert code == 2, (code, out, err)


def groups_figures(node):
    """(id, contexts, entries) of every group on `node`."""
    return [(x["id"], x["contexts"], x["entries"]) for x in g.groups_of(node)]


def group_dir(d, group):
    return d if group == 1 else os.path.join(d, "groups", str(group))


def group_digests(node):
    status, body = node.request("GET", "/v1/admin/digest")
    assert status == 200 and body["state_digest"] == body["groups"][0]["state_digest"], body
    return [x["state_digest"] for x in body["groups"]]


def restore_and_check(binary, root, name, backup, n, written, figures, join=False):
    """Restores `backup` into n new data directories, starts a new n-server cluster with
    --groups 3 on them and checks every member has every group's backed-up state digest and
    reads every write back, in every group; each group's RESTORED marker goes once its
    snapshot holds the restored state, and the cluster takes new writes in every group.
    With `join`, a fourth server with an empty data directory is added before any write:
    every group sends it the snapshot of its restored state, not a log that lacks it."""
    parts = [manifest_of(group_dir(backup, x))["state_digest"] for x in range(1, g.GROUPS + 1)]
    dirs = [os.path.join(root, f"{name}-r{i}") for i in range(n)]
    for d in dirs:
        code, out, err = run(binary, "restore", "--from", backup, "--data-dir", d)
        assert code == 0 and "3 raft groups" in out and "--groups 3" in out, (code, out, err)
        assert all(os.path.exists(os.path.join(d, "groups", x, "db")) for x in ("2", "3")), d
        with open(os.path.join(d, "replicas")) as f:  # the source's, from the manifest
            assert f.read() == "0\n", d
    nodes, _ = new_cluster(binary, root, name + "-dst", n, data_dirs=dirs,
                           extra=["--groups", str(g.GROUPS)])
    try:
        for node in nodes:
            assert group_digests(node) == parts, (node.id, group_digests(node), parts)
            h.wait_until(f"restored server {node.id} holds every write", lambda node=node: all(
                g.holds(node, m, i) for m, i in written))
            h.wait_until(f"restored server {node.id}'s groups hold the source's",
                         lambda node=node: groups_figures(node) == figures)
        # Each group's RESTORED marker goes once a raft snapshot holds its restored state,
        # without waiting for a write to the group (its leader applies an empty batch).
        markers = [os.path.join(group_dir(d, x), "RESTORED") for d in dirs
                   for x in range(1, g.GROUPS + 1)]
        try:
            h.wait_until("every group's RESTORED marker is gone",
                         lambda: not any(os.path.exists(m) for m in markers))
        except AssertionError:
            raise AssertionError("RESTORED markers left: " + ", ".join(
                m for m in markers if os.path.exists(m)) + "\n" + nodes[0].log_tail())
        leader = leader_of(nodes)
        if join:
            joiner = join_fourth(binary, root, name + "-dst", nodes, leader,
                                 extra=["--groups", str(g.GROUPS), "--replicas", "0"])
            h.wait_until("server 4 holds every restored context", lambda: all(
                g.holds(joiner, m, i) for m, i in written))
            h.wait_until("server 4's groups hold the source's",
                         lambda: groups_figures(joiner) == figures)
        more = [(m, 1) for m in range(g.MODELS)]
        for m, i in more:
            assert g.write(leader, m, i), f"write of m{m} to the restored cluster failed"
        for node in nodes:
            h.wait_until(f"restored server {node.id} holds the new writes", lambda node=node: all(
                g.holds(node, m, i) for m, i in written + more))
    finally:
        for node in nodes:
            stop(node)


def written_groups_source(binary, root, n):
    """A new n-server --groups 3 cluster (with a backup_dir) holding contexts of many models
    in every group: (nodes, leader, backup root, writes, per-group figures)."""
    backups = os.path.join(root, "backups")
    os.makedirs(backups)
    # Every group on every server (not the default 3 replicas), so that a fourth server
    # joining the restored cluster holds every group.
    nodes, leader = new_cluster(binary, root, "src", n,
                                extra=["--backup-dir", backups, "--groups", str(g.GROUPS),
                                       "--replicas", "0"])
    # A write whose group's leadership moves while it commits (the groups are handed to
    # their preferred leaders after the election) is answered as failed: write once settled.
    h.wait_until("every group is led by its preferred leader",
                 lambda: g.spread(leader, [node.id for node in nodes]))
    written = [(m, 0) for m in range(g.MODELS)]
    for m, i in written:
        assert g.write(leader, m, i), f"write of m{m} failed"
    for node in nodes:
        h.wait_until(f"server {node.id} holds every write",
                     lambda node=node: all(g.holds(node, m, i) for m, i in written))
    figures = groups_figures(leader)
    assert len(figures) == g.GROUPS and all(c > 0 for _, c, _ in figures), \
        f"not every group holds contexts: {figures}"
    return nodes, leader, backups, written, figures


def online_groups_backup(leader, backups, name):
    status, answer = leader.request("POST", "/v1/admin/backup", {"to": name})
    assert status == 200, (status, answer)
    parts = answer["groups"]
    assert [p["state_digest"] for p in parts] == group_digests(leader), answer
    assert [p["group"] for p in parts] == [1, 2, 3], answer
    assert answer["records"] == sum(p["records"] for p in parts), answer
    assert answer["bytes"] == sum(p["bytes"] for p in parts), answer
    assert answer["applied_index"] == parts[0]["applied_index"] and \
        answer["state_digest"] == parts[0]["state_digest"], answer
    top = manifest_of(answer["path"])
    assert top["source"]["groups"] == 3 and top["source"]["group"] == 1, top
    assert top["source"]["replicas"] == 0, top  # carried to the restores
    for p in parts[1:]:
        m = manifest_of(os.path.join(answer["path"], "groups", str(p["group"])))
        assert m["source"]["group"] == p["group"] and m["applied_index"] == \
            p["applied_index"] and m["state_digest"] == p["state_digest"], (m, p)
    print("  online backup of 3 groups: " + ", ".join(
        f"group {p['group']} at {p['applied_index']}: {p['records']} records, {p['bytes']} bytes"
        for p in parts))
    return answer


def case_groups(binary, root):
    nodes, leader, backups, written, figures = written_groups_source(binary, root, 1)
    try:
        answer = online_groups_backup(leader, backups, "online")
        cli, http = h.cli_binary(binary), leader.base[len("http://"):]
        code, out, err = h.run_cli(cli, "cluster", "backup", "cli", "--http", http)
        assert code == 0 and "3 raft groups" in out and "group 3: applied index" in out, \
            (code, out, err)
        code, out, err = h.run_cli(cli, "cluster", "digest", "--http", http)
        assert code == 0 and "3 raft groups" in out and answer["groups"][2]["state_digest"] \
            in out, (code, out, err)
        code, out, err = run(binary, "backup", "--data-dir", leader.data_dir, "--to",
                             os.path.join(root, "running"))
        assert code == 1 and "in use" in err, (code, out, err)
    finally:
        stop(leader)
    offline = os.path.join(root, "offline")
    code, out, err = run(binary, "backup", "--data-dir", leader.data_dir, "--to", offline)
    assert code == 0 and "3 raft groups" in out, (code, out, err)
    assert manifest_of(os.path.join(offline, "groups", "3"))["source"]["group"] == 3
    for backup in (answer["path"], offline):
        code, out, err = run(binary, "verify-backup", "--from", backup)
        assert code == 0 and "3 raft groups" in out and "group 2:" in out, (code, out, err)
    restore_and_check(binary, root, "online", answer["path"], 1, written, figures)
    restore_and_check(binary, root, "offline", offline, 1, written, figures)

    # Started with another group count, a restored 3-group directory is refused.
    other = os.path.join(root, "other")
    code, out, err = run(binary, "restore", "--from", offline, "--data-dir", other)
    assert code == 0, (out, err)
    node = h.Node(binary, 1, leader.peers, other)
    node.extra = ["--groups", "1"]
    done = subprocess.run(node.command(), capture_output=True, text=True, timeout=h.DEADLINE_S)
    assert done.returncode != 0 and "holds 3 raft group(s), but groups is 1" in done.stderr, \
        done.stderr[-2000:]

    # A damaged or missing group-2 part: verify-backup and restore fail naming group 2.
    def damaged(name, damage):
        copy = os.path.join(root, name)
        shutil.copytree(offline, copy)
        damage(copy)
        code, out, err = run(binary, "verify-backup", "--from", copy)
        assert code == 1 and "group 2: " in err, (name, code, out, err)
        target = os.path.join(root, name + "-restored")
        code, out, err = run(binary, "restore", "--from", copy, "--data-dir", target)
        assert code == 1 and "group 2: " in err and not os.path.exists(target), \
            (name, code, out, err)

    def flip_group_2(copy):
        path = os.path.join(copy, "groups", "2", "state.kvsn")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([b[0] ^ 0x40]))

    damaged("flipped-2", flip_group_2)
    damaged("missing-2", lambda c: shutil.rmtree(os.path.join(c, "groups", "2")))


def case_groups_cluster(binary, root):
    nodes, leader, backups, written, figures = written_groups_source(binary, root, 3)
    try:
        answer = online_groups_backup(leader, backups, "online")
    finally:
        for node in nodes:
            stop(node)
    restore_and_check(binary, root, "dst", answer["path"], 3, written, figures, join=True)


CASES = {
    "online_single": case_online_single,
    "online_cluster": case_online_cluster,
    "offline": case_offline,
    "hostile": case_hostile,
    "groups": case_groups,
    "groups_cluster": case_groups_cluster,
}


def main():
    binary = sys.argv[1]
    names = sys.argv[2:] or list(CASES)
    failed = 0
    for name in names:
        root = tempfile.mkdtemp(prefix="kvatlas-backup-")
        started = time.time()
        try:
            CASES[name](binary, root)
            print(f"PASS {name} ({time.time() - started:.1f} s)", flush=True)
        except Exception as e:  # noqa: BLE001 - report and go on with the next case
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
        finally:
            for node in STARTED:
                if node.alive():
                    node.kill(signal.SIGKILL)
            STARTED.clear()
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
