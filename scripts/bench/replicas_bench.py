#!/usr/bin/python3
"""A cluster whose groups have replicas on some servers (docs/scaling.md §Replicas on some
servers): what each server holds, the groups' snapshots, and the restart and catch-up of
one server.

usage: replicas_bench.py KVATLAS_SERVER_BINARY [--servers 6] [--replicas 3] [--groups 12]
                         [--entries N] [--models M] [--dir DIR]

S servers on loopback run `--groups G --replicas R` and are filled with N single-copy
entries (default 12,000,000; stored events of 1,000 random block hashes spread over M
models, written through group 1's leader as restart_bench.py writes them), with snapshots
off while they fill. Printed:
  - per server: the entries of the groups it holds a replica of, as a share of N (R/S
    expected), and its peak RSS (VmHWM) against the whole map's on one server;
  - per group: its entries and the snapshot bytes after every server restarted with a
    64 KiB raft_snapshot_log_bytes budget (each replica snapshots its state once);
  - lookups of one context through a server holding its group and through one that does
    not (which sends them on to a member): p50 and p99 of each, and their ratio; over the
    binary protocol also by a client of the latter that routes by the directory;
  - an SSE watch of that context through the latter (relayed from a member) and one through
    the member it is relayed from, at once: write acknowledged -> record seen, 500 writes;
  - an online backup through group 1's leader: its time and size, and the parts fetched
    from members (the groups it does not hold);
  - restart: a server that leads no group 1 is stopped (SIGTERM) and started on its data
    directory: seconds until /readyz answers 200 and, for every group it holds, its
    applied index is at least the group's leader's (polled every 20 ms);
  - replace: the same server is stopped, its data directory deleted and it is removed
    from the cluster; a server with a new id and an empty directory is added. Seconds from
    its start until every group's replicas are on the servers PlaceReplicas picks of the
    new voters, recorded, and caught up with their leaders; then, until every server holds
    no entries of a group not placed on it (its copies dropped, docs/scaling.md §Dropping a
    copy), with each server's entries kept and resident memory (VmRSS) before and after.
Data under DIR (default $TMPDIR), removed at exit; every server started is killed.
"""

import argparse
import atexit
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import restart_bench as rb  # noqa: E402 - fill, readiness, stops, peak RSS
import replica_placement as rt  # noqa: E402 - PlaceReplicas, as the servers compute it
import kvatlas  # noqa: E402 - the Python package (PYTHONPATH: scripts/bench/scale sets it)
h = rb.h


def views(nodes):
    """{server id: {group id: GET /v1/groups item}} of the live servers that answer."""
    out = {}
    for n in nodes:
        if n.alive():
            groups = rb.groups_of(n, 10)
            if groups:
                out[n.id] = groups
    return out


def placed(nodes, groups, replicas):
    """Every group's recorded replicas are ChooseMembers of the live voters, each member
    holds it and has applied what its leader has."""
    seen = views(nodes)
    ids = sorted(seen)
    if len(ids) != len([n for n in nodes if n.alive()]):
        return False
    for gid in range(2, groups + 1):
        want = rt.place_replicas(groups, ids, replicas)[gid]
        leader_id = None
        for i in want:
            g = seen[i][gid]
            if g["replicas"] != want or not g["hosted_here"]:
                return False
            if g["this_server"] == "leader":
                leader_id = i
        if leader_id is None:
            return False
        top = seen[leader_id][gid]["applied_index"]
        if any(seen[i][gid]["applied_index"] < top for i in want):
            return False
    return all(rb.ready(n) for n in nodes if n.alive())


def held_entries(nodes, groups):
    """{server: entries of the groups it holds}, {group: entries} (a member's count)."""
    seen = views(nodes)
    per_group = {}
    held = {}
    for i, view in seen.items():
        held[i] = sum(g["entries"] for g in view.values() if g["hosted_here"])
        for gid, g in view.items():
            if g["hosted_here"]:
                per_group[gid] = max(per_group.get(gid, 0), g["entries"])
    return held, per_group


def part_writer(backup, group):
    """The server that wrote group `group`'s part of `backup` (its manifest's source)."""
    part = backup if group == 1 else os.path.join(backup, "groups", str(group))
    with open(os.path.join(part, "backup.json")) as f:
        return json.load(f)["source"]["server_id"]


def kept_entries(node):
    """The entries of every group's copy on `node`, held or not (GET /v1/groups)."""
    return sum(g["entries"] for g in rb.groups_of(node, 10).values())


def rss(node):
    """`node`'s resident memory now (VmRSS), bytes."""
    return rb.status_bytes(node, "VmRSS:")


def caught_up_where_held(node, nodes, groups):
    """/readyz 200 on `node` and every group it holds applied there up to its leader's."""
    if not rb.ready(node):
        return False
    seen = views(nodes)
    mine = seen.get(node.id)
    if not mine:
        return False
    for gid, g in mine.items():
        if not g["hosted_here"]:
            continue
        leaders = [v[gid]["applied_index"] for v in seen.values()
                   if v[gid]["this_server"] == "leader"]
        if not leaders or g["applied_index"] < max(leaders):
            return False
    return True


def settled_snapshots(nodes, groups):
    """Every group's replicas have a snapshot, and the figures stay the same for 2 s."""
    last, since = None, time.monotonic()
    deadline = time.monotonic() + h.DEADLINE_S
    while time.monotonic() < deadline:
        now = sorted((i, gid, g["snapshot_bytes"]) for i, view in views(nodes).items()
                     for gid, g in view.items() if g["hosted_here"])
        if any(b == 0 for _, _, b in now) or len({gid for _, gid, _ in now}) != groups:
            last, since = None, time.monotonic()
        elif now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 2.0:
            return now
        time.sleep(0.2)
    raise AssertionError("the snapshots did not settle")


def lookup_latencies(node, model, hashes, count):
    """`count` POST /v1/lookup of `hashes` in `model` through `node` on one keep-alive
    connection: their latencies in ms, sorted (each must find every block)."""
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    body = json.dumps({"model_name": model, "block_size": rb.BS, "seq_hashes": hashes})
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        conn.request("POST", "/v1/lookup", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        answer = json.loads(resp.read())
        times.append((time.perf_counter() - t0) * 1000)
        assert resp.status == 200 and answer["blocks_found"] == len(hashes), answer
    conn.close()
    return sorted(times)


def binary_lookup_latencies(client, model, hashes, count):
    """`count` binary-protocol lookups of `hashes` in `model` by `client`: their latencies
    in ms, sorted (each must find every block)."""
    context = kvatlas.Context(model, rb.BS)
    times = []
    for _ in range(count):
        t0 = time.perf_counter()
        answer = client.lookup(context, hashes=hashes)
        times.append((time.perf_counter() - t0) * 1000)
        assert answer.blocks_found == len(hashes), answer
    return sorted(times)


def watch_arrivals(node, model, arrivals, started):
    """Follows GET /v1/watch of `model`'s context through `node` (from now), recording when
    each record's backend_id first arrives (time.monotonic) until a record of "stop"; the
    member a relayed watch comes from under arrivals["relayed_from"]."""
    url = f"{node.base}/v1/watch?model_name={model}&block_size={rb.BS}&from=now"
    with urllib.request.urlopen(url, timeout=60) as resp:
        arrivals["relayed_from"] = resp.headers.get("X-Kvatlas-Relayed-From")
        started.set()
        for raw in resp:
            line = raw.decode()
            if not line.startswith("data: "):
                continue
            holder = json.loads(line[len("data: "):])["backend_id"]
            arrivals.setdefault(holder, time.monotonic())
            if holder == "stop":
                return


def watch_latencies(writer, nodes, far, model, count):
    """Write acknowledged -> record seen by an SSE watch through `far` (relayed from a
    member) and one through the member it is relayed from (which applies the write when
    it learns the commit: later than the group's leader when it follows), for `count`
    writes of new holders through `writer`: (member, [ms direct], [ms relayed])."""
    arrivals = {}
    watchers = []

    def follow(node):
        arrivals[node.id] = {}
        started = threading.Event()
        t = threading.Thread(target=watch_arrivals,
                             args=(node, model, arrivals[node.id], started), daemon=True)
        t.start()
        assert started.wait(30), f"the watch through server {node.id} did not start"
        watchers.append(t)

    follow(far)
    member = next(n for n in nodes if str(n.id) == arrivals[far.id]["relayed_from"])
    follow(member)
    acked = {}
    for i in range(count + 1):
        holder = "stop" if i == count else f"w{i}"
        status, body = writer.request("POST", "/v1/events", {"events": [
            {"event_type": "stored", "model_name": model, "block_size": rb.BS,
             "backend_id": holder, "seq_hashes": [0x7A7C0000 + i]}]})
        assert status == 200, body
        acked[holder] = time.monotonic()
        time.sleep(0.005)
    for t in watchers:
        t.join(60)
    return (member, *[sorted(max(0.0, (arrivals[n.id][f"w{i}"] - acked[f"w{i}"]) * 1000)
                             for i in range(count)) for n in (member, far)])


def pct(times, p):
    return times[min(len(times) - 1, int(len(times) * p))]


def mib(n):
    return f"{n / (1 << 20):,.1f} MiB"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--servers", type=int, default=6)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--entries", type=int, default=12_000_000)
    parser.add_argument("--models", type=int, default=96)
    parser.add_argument("--dir", default=None, help="parent of the data directories")
    args = parser.parse_args()
    if args.dir:
        os.environ["TMPDIR"] = args.dir
    S, G, R, N = args.servers, args.groups, args.replicas, args.entries
    backups = tempfile.mkdtemp(prefix="kvatlas-bench-backups-")
    atexit.register(shutil.rmtree, backups, True)
    flags = rb.COMMON + ["--groups", str(G), "--replicas", str(R), "--backup-dir", backups]
    print(f"{S} servers, --groups {G} --replicas {R}, {N:,} entries over {args.models} models; "
          f"load average {' '.join(open('/proc/loadavg').read().split()[:3])} "
          f"({os.cpu_count()} cores)", flush=True)
    with h.running_cluster(args.binary, S, flags + rb.FILLING) as cluster:
        leader = cluster.leader()
        rb.wait_for("every group's replicas are placed",
                    lambda: placed(cluster.nodes, G, R))
        t0 = time.monotonic()
        rb.fill(leader, N, args.models)
        rb.wait_for("every group's replicas applied the fill", lambda: (
            sum(held_entries(cluster.nodes, G)[1].values()) == N
            and placed(cluster.nodes, G, R)), bound_s=3600)
        fill_s = time.monotonic() - t0
        held, per_group = held_entries(cluster.nodes, G)
        print(f"filled in {fill_s:.1f} s ({N / fill_s:,.0f} entries/s through server "
              f"{leader.id})")
        peaks = {n.id: rb.peak_rss(n) for n in cluster.nodes}
        for n in cluster.nodes:
            rb.stop(n)

        # Every replica snapshots its state once (the log held > 64 KiB).
        rb.start_all(cluster.nodes, flags + rb.SNAPSHOTTING)
        snaps = settled_snapshots(cluster.nodes, G)
        leader = cluster.leader()
        rb.wait_for("every server is caught up", lambda: placed(cluster.nodes, G, R))
        snapshot_of = {}
        for _, gid, b in snaps:
            snapshot_of[gid] = max(snapshot_of.get(gid, 0), b)

        print("\nserver  groups held                 entries held   share of N   peak RSS")
        for n in cluster.nodes:
            mine = [gid for gid in range(2, G + 1)
                    if n.id in rt.place_replicas(G, sorted(held), R)[gid]]
            print(f"{n.id:>6}  {','.join(map(str, [1] + mine)):<26}  {held[n.id]:>12,}"
                  f"   {held[n.id] / N:>10.3f}   {mib(peaks[n.id])}")
        print(f"expected share R/S = {R / S:.3f} (group 1 on every server holds "
              f"{per_group.get(1, 0):,})")
        print("\ngroup  entries       snapshot (largest replica)")
        for gid in sorted(per_group):
            print(f"{gid:>5}  {per_group[gid]:>12,}  {mib(snapshot_of.get(gid, 0))}")
        print(f"largest snapshot {mib(max(snapshot_of.values()))}; "
              f"{sum(snapshot_of.values()) / N:.1f} B per entry over all groups")

        # Lookups through a server that holds the context's group against one that does not
        # (sent on to a member), interleaved in rounds.
        probe = next(gid for gid in range(2, G + 1)
                     if 1 <= len(rt.place_replicas(G, sorted(held), R)[gid]) < S)
        members = rt.place_replicas(G, sorted(held), R)[probe]
        model = next(f"p{i}" for i in range(10_000)
                     if h.home_group(f"p{i}", rb.BS, G) == probe)
        hashes = [0x5EED0000 + k for k in range(16)]
        status, body = leader.request("POST", "/v1/events", {"events": [
            {"event_type": "stored", "model_name": model, "block_size": rb.BS,
             "backend_id": "probe", "seq_hashes": hashes}]})
        assert status == 200, body
        near = next(n for n in cluster.nodes if n.id in members)
        far = next(n for n in cluster.nodes if n.id not in members)
        rb.wait_for("both servers answer the probe", lambda: all(
            n.request("POST", "/v1/lookup", {"model_name": model, "block_size": rb.BS,
                                             "seq_hashes": hashes})[1].get("blocks_found")
            == len(hashes) for n in (near, far)))
        at_member, sent_on = [], []
        for _ in range(10):
            at_member += lookup_latencies(near, model, hashes, 100)
            sent_on += lookup_latencies(far, model, hashes, 100)
        at_member.sort()
        sent_on.sort()
        print(f"\nlookups of a context of group {probe} (16 blocks), 1,000 each, interleaved:")
        print(f"  through server {near.id}, a member:         p50 {pct(at_member, 0.5):.3f} ms"
              f"  p99 {pct(at_member, 0.99):.3f} ms")
        print(f"  through server {far.id}, sent on to a member: p50 {pct(sent_on, 0.5):.3f} ms"
              f"  p99 {pct(sent_on, 0.99):.3f} ms"
              f"  (x{pct(sent_on, 0.5) / pct(at_member, 0.5):.2f} / "
              f"x{pct(sent_on, 0.99) / pct(at_member, 0.99):.2f})")

        # The same over the binary protocol: a client of the member, one of the other
        # server that does not route (the server sends each lookup on), and one of the
        # other server that routes by the directory (docs/scaling.md §Clients that route
        # by the directory), interleaved in rounds.
        clients = {"member": kvatlas.Client([h.addr_of(near, "rpc.addr")],
                                            route_by_directory=False),
                   "sent on": kvatlas.Client([h.addr_of(far, "rpc.addr")],
                                             route_by_directory=False),
                   "routed": kvatlas.Client([h.addr_of(far, "rpc.addr")])}
        binary = {name: [] for name in clients}
        for _ in range(10):
            for name, client in clients.items():
                binary[name] += binary_lookup_latencies(client, model, hashes, 100)
        for client in clients.values():
            client.close()
        base = sorted(binary["member"])
        print("  binary protocol, 1,000 each, interleaved:")
        for name, label in (("member", f"a client of server {near.id}, a member"),
                            ("sent on", f"a client of server {far.id}, sent on"),
                            ("routed", f"a client of server {far.id}, routing by the "
                                       "directory")):
            t = sorted(binary[name])
            print(f"    {label}: p50 {pct(t, 0.5):.3f} ms  p99 {pct(t, 0.99):.3f} ms"
                  f"  (x{pct(t, 0.5) / pct(base, 0.5):.2f} / x{pct(t, 0.99) / pct(base, 0.99):.2f})")

        # A REST watch of the context through the member, and through the other server,
        # which relays it from a member: write acknowledged -> record seen.
        member, direct, relayed = watch_latencies(leader, cluster.nodes, far, model, 500)
        print("  SSE watch, write acknowledged -> record seen, 500 writes, both watches at once:")
        print(f"    through server {member.id}, the member relayed from: p50 "
              f"{pct(direct, 0.5):.3f} ms  p99 {pct(direct, 0.99):.3f} ms")
        print(f"    through server {far.id}, relayed from a member: p50 {pct(relayed, 0.5):.3f} ms"
              f"  p99 {pct(relayed, 0.99):.3f} ms")

        # An online backup through group 1's leader: the parts of the groups it does not
        # hold are fetched from their members.
        t0 = time.monotonic()
        status, text = rb.post(leader, "/v1/admin/backup", json.dumps({"to": "bench"}),
                               timeout=3600)
        backup_s = time.monotonic() - t0
        assert status == 200, (status, text)
        answer = json.loads(text)
        fetched = [p for p in answer["groups"]
                   if part_writer(answer["path"], p["group"]) != leader.id]
        fetched_bytes = sum(p["bytes"] for p in fetched)
        print(f"\nonline backup through server {leader.id}: {answer['records']:,} records, "
              f"{mib(answer['bytes'])} in {backup_s:.2f} s; {len(fetched)} of {G} groups' parts "
              f"({mib(fetched_bytes)}) fetched from their members")
        shutil.rmtree(answer["path"])

        # Restart of a server that does not lead group 1.
        server = next(n for n in cluster.nodes if n.id != leader.id)
        stop_s = rb.stop(server)
        t0 = time.monotonic()
        server.start()
        listening_s = time.monotonic() - t0
        rb.wait_for("the restarted server caught up",
                    lambda: caught_up_where_held(server, cluster.nodes, G))
        restart_s = time.monotonic() - t0
        print(f"\nrestart of server {server.id}: SIGTERM to exit {stop_s:.2f} s, listening "
              f"{listening_s:.2f} s, caught up in every group it holds {restart_s:.2f} s")

        # Replaced: removed with its data, a new id added on an empty directory.
        rb.stop(server)
        shutil.rmtree(server.data_dir)
        status, body = leader.request("DELETE", f"/v1/cluster/members/{server.id}")
        assert status == 200, body
        t0 = time.monotonic()
        rb.wait_for(f"the groups server {server.id} held are placed on the others",
                    lambda: placed(cluster.nodes, G, R), bound_s=1800)
        rereplicated_s = time.monotonic() - t0
        print(f"server {server.id} removed: its replicas re-placed on the other "
              f"{S - 1} servers and caught up in {rereplicated_s:.2f} s")
        new_id = max(n.id for n in cluster.nodes) + 1
        port = h.free_ports(1)[0]
        data = os.path.join(cluster.root, f"n{new_id}")
        os.makedirs(data)
        joiner = h.Node(args.binary, new_id, server.peers, data,
                        raft_listen=f"127.0.0.1:{port}", auth=cluster.auth)
        joiner.extra = flags + rb.SNAPSHOTTING
        cluster.nodes.append(joiner)
        t0 = time.monotonic()
        joiner.start()
        added = threading.Event()

        def add():
            body = json.dumps({"id": new_id, "raft_address": f"127.0.0.1:{port}"})
            while not added.is_set():
                status, _ = rb.post(leader, "/v1/cluster/members", body)
                if status == 200:
                    return
                time.sleep(1.0)

        threading.Thread(target=add, daemon=True).start()
        rb.wait_for("the new server holds its share, caught up",
                    lambda: placed(cluster.nodes, G, R), bound_s=1800)
        joined_s = time.monotonic() - t0
        added.set()
        held, _ = held_entries(cluster.nodes, G)
        print(f"server {new_id} added on an empty directory: its share placed and caught "
              f"up in {joined_s:.2f} s; it holds {held.get(new_id, 0):,} entries "
              f"({held.get(new_id, 0) / N:.3f} of N)")

        # The servers it replaced drop the copies they no longer hold.
        before = {n.id: (kept_entries(n), rss(n)) for n in cluster.nodes if n.alive()}
        t0 = time.monotonic()
        rb.wait_for("every copy not placed is dropped",
                    lambda: all(kept_entries(n) == held_entries([n], G)[0].get(n.id)
                                for n in cluster.nodes if n.alive()), bound_s=600)
        dropped_s = time.monotonic() - t0
        print(f"copies no longer placed dropped within {dropped_s:.2f} s of that:")
        print("server  entries kept before -> after   RSS before -> after")
        for n in cluster.nodes:
            if not n.alive():
                continue
            kept, resident = before[n.id]
            print(f"{n.id:>6}  {kept:>12,} -> {kept_entries(n):>12,}   "
                  f"{mib(resident)} -> {mib(rss(n))}")


if __name__ == "__main__":
    main()
