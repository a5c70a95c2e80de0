#!/usr/bin/python3
"""Restart and catch-up time of a server hosting G raft groups against one group
(docs/scaling.md §Restart and catch-up).

usage: restart_bench.py KVATLAS_SERVER_BINARY [--entries N] [--groups 1,12] [--models M]
                        [--dir DIR]

For each G in --groups, in one run: three servers on loopback (`--groups G`) are filled
with the same N single-copy entries (default 12,000,000: stored events of 1,000 random
block hashes, spread over M models so every group holds some; the same events for every
G), with snapshots off while they fill. All three are then stopped and started again with
a 64 KiB `raft_snapshot_log_bytes` budget, which makes every group on every server take one
snapshot of its whole state (the count trigger stays off), so that what follows loads and
sends snapshots. Then, with no writes:
  - restart: a follower is stopped (SIGTERM) and started on its data directory;
  - catch-up: the same follower is stopped, its data directory deleted, it is removed from
    the cluster and a server with a new id and an empty data directory is started and
    added (docs/operations.md §Membership: a voter never comes back empty under its id).
A server is *caught up* when, in one poll (every 20 ms), its GET /readyz answers 200 and
for every group its GET /v1/groups applied_index is at least the leader's for that group;
the wiped one also when it is a voter of every group. Times run from the process's start.
Prints per G the snapshot bytes of each group, then a table of times with the ratio of the
last G to the first. Peak RSS (VmHWM) of every server is printed too. Data under DIR
(default $TMPDIR), removed at exit; every server started is killed.
"""

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fault"))
import cluster_fault_test as h  # noqa: E402 - the test harness: Node, Cluster, free ports
import startup_test as s  # noqa: E402 - stop

h.DEADLINE_S = 600.0
POLL_S = 0.02
BS = 16
BLOCKS_PER_EVENT = 1_000
EVENTS_PER_REQUEST = 20
WRITERS = 3
# Flags of every server. Snapshots off while filling (count trigger at its maximum, byte
# budget off); replica audits off: they read the whole state and would load the 2 cores.
COMMON = ["--storage-sync", "false", "--audit-interval-ms", "0",
          "--raft-election-timeout-ms", "2000", "--apply-timeout-ms", "60000",
          "--log-level", "warning", "--max-entries-per-context", "1000000000",
          "--raft-snapshot-threshold", "1000000"]
FILLING = ["--raft-snapshot-log-bytes", "0"]
SNAPSHOTTING = ["--raft-snapshot-log-bytes", str(64 << 10)]


def groups_of(node, timeout=30):
    body = get_json(node, "/v1/groups", timeout)
    return {g["id"]: g for g in body["groups"]} if body else {}


def get_json(node, path, timeout=30):
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        body = resp.read()
        return json.loads(body) if resp.status == 200 else None
    except (OSError, http.client.HTTPException):
        return None
    finally:
        conn.close()


def post(node, path, body, timeout=h.DEADLINE_S):
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, resp.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as e:
        return 0, str(e)
    finally:
        conn.close()


def ready(node):
    host, port = node.base[len("http://"):].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("GET", "/readyz")
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    except (OSError, http.client.HTTPException):
        return False
    finally:
        conn.close()


def fill(node, entries, models, seed=11):
    """`entries` entries written to `node` by WRITERS threads on keep-alive connections:
    requests of EVENTS_PER_REQUEST stored events of BLOCKS_PER_EVENT random block hashes,
    each event of the next model in turn. Each request is made as it is sent (from its own
    seed), so that the bench holds one request per writer, not the whole fill."""
    events_total = -(-entries // BLOCKS_PER_EVENT)
    requests_total = -(-events_total // EVENTS_PER_REQUEST)

    def request(k):
        rng = random.Random(f"{seed}:{k}")
        events = []
        for e in range(k * EVENTS_PER_REQUEST,
                       min(events_total, (k + 1) * EVENTS_PER_REQUEST)):
            n = min(BLOCKS_PER_EVENT, entries - e * BLOCKS_PER_EVENT)
            events.append((e % models, rng.getrandbits(63),
                           [rng.getrandbits(63) for _ in range(n)]))
        return events

    host, port = node.base[len("http://"):].rsplit(":", 1)
    errors = []

    def writer(part):
        conn = http.client.HTTPConnection(host, int(port), timeout=120)
        for k in part:
            events = request(k)
            body = json.dumps({"events": [
                {"event_type": "stored", "model_name": f"m{m}", "block_size": BS,
                 "backend_id": "h", "parent_hash": parent, "seq_hashes": hashes}
                for m, parent, hashes in events]})
            conn.request("POST", "/v1/events", body, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            answer = resp.read()
            if resp.status != 200:
                errors.append((resp.status, answer[:300]))
                return
        conn.close()

    threads = [threading.Thread(target=writer, args=(range(i, requests_total, WRITERS),))
               for i in range(WRITERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]


def wait_for(what, predicate, bound_s=h.DEADLINE_S):
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(POLL_S)


def caught_up(node, leader, voter_id=None):
    """One poll: /readyz 200 on `node` and every group's applied index there at least the
    leader's (and, with `voter_id`, that server a voter of every group)."""
    if not ready(node):
        return False
    mine, theirs = groups_of(node, 10), groups_of(leader, 10)
    if not mine or mine.keys() != theirs.keys():
        return False
    if voter_id is not None and not all(
            any(m["id"] == voter_id and m["role"] == "voter" for m in g["members"])
            for g in theirs.values()):
        return False
    return all(mine[g]["applied_index"] >= theirs[g]["applied_index"] for g in theirs)


def status_bytes(node, field):
    """A kB field of `node`'s /proc/PID/status (e.g. "VmRSS:"), in bytes; 0 when it cannot be
    read."""
    try:
        with open(f"/proc/{node.proc.pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def peak_rss(node):
    return status_bytes(node, "VmHWM:")


def start_all(nodes, flags):
    """Starts every node with `flags` at once (a server waits for its peers)."""
    for node in nodes:
        node.extra = flags
    threads = [threading.Thread(target=node.start) for node in nodes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(node.alive() for node in nodes), "a server did not start"


def stop(node):
    """SIGTERM; seconds until the server exited (with 0)."""
    t0 = time.monotonic()
    s.stop(node)
    return time.monotonic() - t0


def settled_snapshots(nodes, groups):
    """Every group on every server has a snapshot and the figures stay the same for 2 s."""
    last, since = None, time.monotonic()
    deadline = time.monotonic() + h.DEADLINE_S
    while time.monotonic() < deadline:
        now = [(n.id, g["id"], g["snapshot_bytes"]) for n in nodes
               for g in groups_of(n).values()]
        if len(now) != len(nodes) * groups or any(b == 0 for _, _, b in now):
            last, since = None, time.monotonic()
        elif now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= 2.0:
            return
        time.sleep(0.2)
    raise AssertionError("the snapshots did not settle")


def run_one(binary, groups, args):
    flags = COMMON + ["--groups", str(groups)]
    out = {"groups": groups, "load": os.getloadavg()[0]}
    peaks = {}
    # Under $TMPDIR (tempfile); servers killed and the directory removed on exit.
    with h.running_cluster(binary, 3, flags + FILLING) as cluster:
        leader = cluster.leader()
        wait_for("every server is ready", lambda: all(ready(n) for n in cluster.nodes))
        t0 = time.monotonic()
        fill(leader, args.entries, args.models)
        wait_for("every server applied the fill", lambda: all(
            sum(g["entries"] for g in groups_of(n).values()) == args.entries
            for n in cluster.nodes))
        out["fill_s"] = time.monotonic() - t0
        print(f"G={groups}: filled {args.entries:,} entries over {args.models} models in "
              f"{out['fill_s']:.1f} s (on every server)", flush=True)
        for node in cluster.nodes:
            peaks[node.id] = peak_rss(node)
            stop(node)

        # Every group on every server snapshots its whole state once (the log held > 64 KiB).
        start_all(cluster.nodes, flags + SNAPSHOTTING)
        settled_snapshots(cluster.nodes, groups)
        leader = cluster.leader()
        follower = next(n for n in cluster.nodes if n.id != leader.id)
        wait_for("every server is caught up",
                 lambda: all(caught_up(n, leader) for n in cluster.nodes if n is not leader))
        shown = groups_of(leader)
        out["snapshot_bytes"] = {g: shown[g]["snapshot_bytes"] for g in sorted(shown)}
        out["entries_per_group"] = {g: shown[g]["entries"] for g in sorted(shown)}
        out["applied"] = {g: shown[g]["applied_index"] for g in sorted(shown)}

        # Restart of a follower on its data directory.
        out["stop_s"] = stop(follower)
        t0 = time.monotonic()
        follower.start()  # returns once it listens (DATA_DIR/http.addr)
        out["restart_listening_s"] = time.monotonic() - t0
        wait_for("the restarted follower is ready", lambda: ready(follower))
        out["restart_ready_s"] = time.monotonic() - t0
        wait_for("the restarted follower caught up", lambda: caught_up(follower, leader))
        out["restart_s"] = time.monotonic() - t0
        print(f"G={groups}: restart of server {follower.id}: caught up after "
              f"{out['restart_s']:.2f} s", flush=True)
        for node in cluster.nodes:
            peaks[node.id] = max(peaks.get(node.id, 0), peak_rss(node))

        # Catch-up of a wiped follower: removed, replaced by a new id on an empty directory.
        stop(follower)
        shutil.rmtree(follower.data_dir)
        status, body = leader.request("DELETE", f"/v1/cluster/members/{follower.id}")
        assert status == 200, body
        wait_for(f"no group has server {follower.id}", lambda: all(
            all(m["id"] != follower.id for m in g["members"])
            for g in groups_of(leader).values()))
        new_id = max(n.id for n in cluster.nodes) + 1
        port = h.free_ports(1)[0]
        data = os.path.join(cluster.root, f"n{new_id}")
        os.makedirs(data)
        joiner = h.Node(binary, new_id, follower.peers, data, raft_listen=f"127.0.0.1:{port}",
                        auth=cluster.auth)
        joiner.extra = flags + SNAPSHOTTING
        cluster.nodes.append(joiner)
        t0 = time.monotonic()
        joiner.start()
        out["wiped_listening_s"] = time.monotonic() - t0
        added = threading.Event()
        out["adds"] = []

        def add():
            # Answered once promoted; a server still catching up when libraft gives the
            # promotion up stays a spare: adding it again promotes it (docs/api.md).
            body = json.dumps({"id": new_id, "raft_address": f"127.0.0.1:{port}"})
            while not added.is_set():
                status, answer = post(leader, "/v1/cluster/members", body)
                out["adds"].append(status if status == 200 else f"{status} {answer[:160]}")
                if status == 200:
                    return
                time.sleep(1.0)

        adder = threading.Thread(target=add, daemon=True)
        adder.start()
        wait_for("the new server holds every group's state", lambda: caught_up(joiner, leader))
        out["wiped_s"] = time.monotonic() - t0
        wait_for("the new server is a voter of every group",
                 lambda: caught_up(joiner, leader, voter_id=new_id))
        out["wiped_voter_s"] = time.monotonic() - t0
        added.set()
        print(f"G={groups}: wiped server replaced by server {new_id}: caught up after "
              f"{out['wiped_s']:.2f} s, a voter of every group after "
              f"{out['wiped_voter_s']:.2f} s", flush=True)
        answers = out["adds"]
        print(f"G={groups}: POST /v1/cluster/members answered {len(answers)} time(s): "
              + "; ".join(str(a) for a in answers[:3]) + ("; ..." if len(answers) > 3 else ""))
        joined = groups_of(joiner)
        out["joiner_snapshot_bytes"] = sum(g["snapshot_bytes"] for g in joined.values())
        for node in cluster.nodes:
            if node.alive():
                peaks[node.id] = max(peaks.get(node.id, 0), peak_rss(node))
        out["peak_rss"] = peaks
        return out


def mib(n):
    return f"{n / (1 << 20):,.1f} MiB"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--entries", type=int, default=12_000_000)
    parser.add_argument("--groups", default="1,12")
    parser.add_argument("--models", type=int, default=96)
    parser.add_argument("--dir", default=None, help="parent of the data directories")
    args = parser.parse_args()
    if args.dir:
        os.environ["TMPDIR"] = args.dir
    counts = [int(g) for g in args.groups.split(",")]
    print("caught up = GET /readyz 200 and, for every group, GET /v1/groups applied_index >= "
          "the leader's in the same poll (every 20 ms); the wiped server also a voter of "
          "every group where said. Times from the process's start; no writes meanwhile.")
    print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])} "
          f"({os.cpu_count()} cores)", flush=True)
    results = [run_one(args.binary, g, args) for g in counts]

    for r in results:
        sizes = r["snapshot_bytes"]
        print(f"\nG={r['groups']}: snapshot bytes per group (leader): "
              + ", ".join(f"{g}: {mib(b)}" for g, b in sizes.items()))
        print("  entries per group: " + ", ".join(f"{g}: {e:,}"
                                                   for g, e in r["entries_per_group"].items()))
        print(f"  total {mib(sum(sizes.values()))} ({sum(sizes.values()) / args.entries:.1f} B "
              f"per entry); the new server received {mib(r['joiner_snapshot_bytes'])}; "
              f"peak RSS per server: "
              + ", ".join(f"{i}: {mib(b)}" for i, b in sorted(r["peak_rss"].items()))
              + f" (sum {mib(sum(r['peak_rss'].values()))})")

    rows = [("load average (1 min) before the fill", "load"),
            ("fill (3 servers, s)", "fill_s"),
            ("snapshot bytes, all groups (MiB)", "snap"),
            ("restart: SIGTERM to exit (s)", "stop_s"),
            ("restart: start to listening (s)", "restart_listening_s"),
            ("restart: start to /readyz 200 (s)", "restart_ready_s"),
            ("restart: start to caught up (s)", "restart_s"),
            ("wiped: start to listening (s)", "wiped_listening_s"),
            ("wiped: start to caught up (s)", "wiped_s"),
            ("wiped: start to caught up + voter (s)", "wiped_voter_s")]
    first, last = results[0], results[-1]
    for r in results:
        r["snap"] = sum(r["snapshot_bytes"].values()) / (1 << 20)
    head = "".join(f"{'G=' + str(r['groups']):>10}" for r in results)
    ratio = f"G={last['groups']} / G={first['groups']}"
    print(f"\n{args.entries:,} entries, 3 servers, every group on every server\n"
          f"{'':40}{head}{ratio:>14}")
    for label, key in rows:
        values = "".join(f"{r[key]:>10.2f}" for r in results)
        quotient = f"{last[key] / first[key]:.2f}" if first[key] else "-"
        print(f"{label:40}{values}{quotient:>14}")


if __name__ == "__main__":
    main()
