#!/usr/bin/python3
"""A live cluster's /metrics passes `promtool check metrics`, carries the cluster metrics
(docs/operations.md §Metrics and alerts), and every metric the Grafana dashboard and the
alert rules query exists.

usage: metrics_test.py KVATLAS_SERVER_BINARY KVATLAS_CLI SOURCE_DIR

A 3-server cluster on loopback (snapshots every 16 entries), an engine stream with one gap
on the leader, REST and binary-protocol ingests and lookups, so that the histograms are not
empty; then each server's /metrics goes through promtool. Exits 77 (skipped) only when
promtool is not installed (scripts/setup installs the Debian `prometheus` package).
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fault"))
sys.path.insert(0, HERE)
import cluster_fault_test as h  # noqa: E402 - the cluster harness
import zmq_ingest_test as z  # noqa: E402 - the fake engine driver

SKIP = 77


def fetch_metrics(node):
    with urllib.request.urlopen(node.base + "/metrics", timeout=5) as resp:
        assert resp.status == 200, resp.status
        return resp.read().decode()


def samples(text):
    """{(name, labels-string): value} of every sample line."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", line)
        assert m, f"unparsable sample line: {line!r}"
        out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def value(s, name, labels=""):
    assert (name, labels) in s, f"no sample {name}{labels}"
    return s[(name, labels)]


def families(text):
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def queried_names(text):
    """Metric names a PromQL text uses, histogram suffixes stripped."""
    names = set(re.findall(r"\bkvatlas_[a-z0-9_]+", text))
    return {re.sub(r"_(bucket|sum|count)$", "", n) if n.endswith(("_bucket", "_sum", "_count"))
            else n for n in names}


def promtool_check(promtool, text, what):
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), (
        f"promtool check metrics on {what}: rc {done.returncode}\n{done.stdout}{done.stderr}")


def exercise(cluster, leader, cli):
    fake = z.Fake()
    try:
        fake.register_on(leader)
        fake.store(z.PROMPT[:z.BS])
        fake.cmd(op="drop_next")  # a sequence gap, repaired over replay
        fake.store(z.PROMPT[:2 * z.BS], from_block=1)
        fake.store(z.PROMPT[:3 * z.BS], from_block=2)
        # 40 REST writes: past the snapshot threshold of 16 entries.
        for i in range(40):
            assert h.write(leader, i) is not None, leader.log_tail()
        follower = next(n for n in cluster.nodes if n is not leader)
        events = "\n".join(json.dumps({"event_type": "stored", "model_name": "m",
                                       "block_size": h.BS, "backend_id": "r",
                                       "token_ids": h.prompt(100 + i)}) for i in range(5))
        code, out, err = h.run_cli(cli, "--server", h.addr_of(leader, "rpc.addr"), "ingest",
                                   "-", stdin=events + "\n")
        assert code == 0, (code, out, err)
        code, out, err = h.run_cli(cli, "--server", h.addr_of(leader, "rpc.addr"), "lookup",
                                   "--model", "m", "--block-size", str(h.BS), "--tokens",
                                   ",".join(map(str, h.prompt(100))))
        assert code == 0, (code, out, err)
        deadline = time.time() + h.DEADLINE_S
        while time.time() < deadline:
            if all(h.holds(n, 39) for n in cluster.nodes):
                break
            time.sleep(0.05)
        for i in range(4):  # REST lookups on the leader: hits
            assert h.holds(leader, i), leader.log_tail()
        status, streams = leader.request("GET", "/v1/streams")
        assert streams["streams"] and streams["streams"][0]["gaps"] >= 1, streams
        return follower
    finally:
        fake.close()


def check_leader(s, node_ids):
    for name in ["kvatlas_raft_term", "kvatlas_raft_commit_index", "kvatlas_raft_applied_index",
                 "kvatlas_raft_leader_id", "kvatlas_raft_leadership_changes_total",
                 "kvatlas_disk_free_bytes", "kvatlas_disk_size_bytes"]:
        value(s, name)
    assert value(s, "kvatlas_raft_is_leader") == 1
    assert value(s, "kvatlas_raft_term") >= 1
    # The one raft group, labelled group="1", and the directory's epoch (0: no directory).
    assert value(s, "kvatlas_placement_epoch") == 0
    assert value(s, "kvatlas_group_leader_id", '{group="1"}') == value(s, "kvatlas_raft_leader_id")
    assert value(s, "kvatlas_group_members", '{group="1"}') == len(node_ids)
    assert value(s, "kvatlas_group_entries", '{group="1"}') > 0
    assert value(s, "kvatlas_group_contexts", '{group="1"}') >= 1
    assert value(s, "kvatlas_group_applied_index", '{group="1"}') >= 40
    assert value(s, "kvatlas_group_accepting", '{group="1"}') == 1
    assert value(s, "kvatlas_raft_commit_index") >= 40
    assert value(s, "kvatlas_disk_free_bytes") > 0
    assert value(s, "kvatlas_raft_commit_duration_seconds_count") >= 40
    assert value(s, "kvatlas_raft_commit_duration_seconds_bucket", '{le="+Inf"}') >= 40
    for i in node_ids:
        assert value(s, "kvatlas_raft_member_lag_entries", f'{{member="{i}"}}') >= 0
        assert value(s, "kvatlas_raft_member_match_index", f'{{member="{i}"}}') > 0
    assert value(s, "kvatlas_rpc_request_duration_seconds_count", '{type="ingest"}') >= 1
    assert value(s, "kvatlas_rpc_request_duration_seconds_count", '{type="lookup"}') >= 1
    assert value(s, "kvatlas_lookups_total") >= 4
    assert value(s, "kvatlas_lookup_blocks_matched_total") >= 1
    assert value(s, "kvatlas_lookup_blocks_queried_total") >= \
        value(s, "kvatlas_lookup_blocks_matched_total")
    gaps = [v for (n, _), v in s.items() if n == "kvatlas_zmq_gaps_total"]
    assert gaps and max(gaps) >= 1, gaps
    assert any(n == "kvatlas_zmq_stream_lag_seconds" for (n, _) in s)


def main():
    binary, cli, source = sys.argv[1], sys.argv[2], sys.argv[3]
    promtool = shutil.which("promtool")
    if promtool is None:
        print("SKIP metrics_test: promtool not installed (Debian package prometheus; "
              "scripts/setup installs it)", flush=True)
        sys.exit(SKIP)
    # Snapshots every 16 entries, so that they are counted too.
    cluster = h.Cluster(binary, extra=["--raft-snapshot-threshold", "16",
                                       "--raft-snapshot-trailing", "4"])
    try:
        leader = cluster.leader()
        follower = exercise(cluster, leader, cli)
        texts = {n.id: fetch_metrics(n) for n in cluster.nodes}
        for node_id, text in texts.items():
            promtool_check(promtool, text, f"server {node_id}")
        leader_s = samples(texts[leader.id])
        check_leader(leader_s, [n.id for n in cluster.nodes])
        follower_s = samples(texts[follower.id])
        assert value(follower_s, "kvatlas_raft_is_leader") == 0
        assert value(follower_s, "kvatlas_raft_leader_id") == leader.id
        assert not any(n == "kvatlas_raft_member_lag_entries" for (n, _) in follower_s)
        snapshots = sum(value(samples(t), "kvatlas_raft_snapshots_total") for t in texts.values())
        assert snapshots >= 1, "no snapshot counted past the threshold"
        exported = set().union(*(families(t) for t in texts.values()))

        with open(os.path.join(source, "deploy", "prometheus", "alerts.yml")) as f:
            alerts = f.read()
        missing = queried_names(alerts) - exported
        assert not missing, f"alerts.yml uses metrics no server exports: {sorted(missing)}"
        with open(os.path.join(source, "deploy", "grafana", "kvatlas.json")) as f:
            dashboard = json.load(f)
        exprs = []

        def walk(v):
            if isinstance(v, dict):
                for k, x in v.items():
                    if k in ("expr", "query") and isinstance(x, str):
                        exprs.append(x)
                    else:
                        walk(x)
            elif isinstance(v, list):
                for x in v:
                    walk(x)
        walk(dashboard)
        assert len(exprs) >= 10, f"only {len(exprs)} queries in the dashboard"
        used = set().union(*(queried_names(e) for e in exprs))
        missing = used - exported - queried_names(alerts)
        assert not missing, f"the dashboard queries metrics nobody exports: {sorted(missing)}"
        commits = value(leader_s, "kvatlas_raft_commit_duration_seconds_count")
        mean_ms = value(leader_s, "kvatlas_raft_commit_duration_seconds_sum") / commits * 1e3
        print(f"  {len(exported)} metric families; promtool passed on 3 servers; dashboard: "
              f"{len(exprs)} queries over {len(used)} metrics; leader: {commits:.0f} commits, "
              f"mean {mean_ms:.2f} ms; {snapshots:.0f} snapshots; prefix-hit rate "
              f"{value(leader_s, 'kvatlas_lookup_blocks_matched_total')}/"
              f"{value(leader_s, 'kvatlas_lookup_blocks_queried_total')}", flush=True)
    finally:
        cluster.cleanup()
    print("PASS metrics_test", flush=True)


if __name__ == "__main__":
    main()
