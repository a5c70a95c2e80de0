#!/usr/bin/python3
"""Shared in-flight load of a router fleet (docs/routing.md §Shared load).

usage: router_fleet_test.py KVATLAS_SERVER_BINARY

A 3-server cluster and three router processes, each reporting its absolute in-flight load
to a different server every 0.1 s (POST /v1/load; followers forward it to the leader) with
a 1.5 s lease. Every server must sum the three reports (GET /v1/load) and score route
candidates that give no load with the sum; once router r1 is SIGKILLed its load must
disappear from every server after its lease, and the route's pick must change with it.
Bad reports get 4xx JSON errors naming the field. Loopback only, bounded, cleaned up.
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

BOUND_S = 20.0
TTL_MS = 1500

# What each router has in flight: instance -> (prefill blocks, decode blocks).
ROUTERS = {
    "r1": {"a": (20, 200)},
    "r2": {"b": (5, 50)},
    "r3": {"b": (5, 50)},
}

# A router process: reports its (fixed) in-flight table every 0.1 s until killed.
REPORTER = r"""
import json, sys, time, urllib.request
base, router, loads = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
body = json.dumps({"router_id": router, "ttl_ms": %d, "loads": [
    {"instance_id": i, "prefill_blocks": p, "decode_blocks": d} for i, (p, d) in loads.items()]})
while True:
    try:
        req = urllib.request.Request(base + "/v1/load", data=body.encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=2).read()
    except Exception as e:  # an election: the next report goes through
        print("report failed:", e, file=sys.stderr, flush=True)
    time.sleep(0.1)
""" % TTL_MS


def sums(node):
    """instance -> (prefill, decode, routers) as `node` sums the live reports."""
    status, body = node.request("GET", "/v1/load")
    assert status == 200, (status, body)
    return {x["instance_id"]: (x["prefill_blocks"], x["decode_blocks"], x["routers"])
            for x in body["instances"]}


def route(node):
    """The route's ranking of a and b (no load given, nothing cached) on `node`."""
    status, body = node.request("POST", "/v1/route", {
        "model_name": "m", "block_size": h.BS, "token_ids": list(range(4 * h.BS)),
        "candidates": [{"instance_id": "a"}, {"instance_id": "b"}]})
    assert status == 200, (status, body)
    return [(c["instance_id"], c["queued_prefill_blocks"]) for c in body["candidates"]]


def post(node, path, body):
    """POST with a long timeout: a debug build parses the 220 kB body of 10,001 entries
    slowly on a loaded machine (Node.request gives up after 5 s)."""
    req = urllib.request.Request(node.base + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=BOUND_S) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def check_errors(node):
    cases = [
        ({"loads": []}, 400, "router_id: is required"),
        ({"router_id": "x" * 300, "loads": []}, 400, "router_id: at most 256 bytes"),
        ({"router_id": "r", "ttl_ms": 5, "loads": []}, 400, "ttl_ms: must be an integer from 100"),
        ({"router_id": "r", "loads": [{"instance_id": "a", "decode_blocks": -3}]}, 400,
         "loads[0].decode_blocks: must be an integer from 0"),
        ({"router_id": "r", "loads": [{"instance_id": 7}]}, 400,
         "loads[0].instance_id: must be a non-empty string"),
        ({"router_id": "r", "loads": [{"instance_id": "a"}] * 10001}, 413,
         "one report holds at most 10000"),
    ]
    for body, want_status, want_message in cases:
        status, answer = post(node, "/v1/load", body)
        assert status == want_status, (body if len(str(body)) < 200 else "big", status, answer)
        assert want_message in answer["message"], (want_message, answer)


def main():
    binary = sys.argv[1]
    cluster = h.Cluster(binary)
    routers = {}
    try:
        check_errors(cluster.leader())
        for (name, loads), node in zip(ROUTERS.items(), cluster.nodes):
            routers[name] = subprocess.Popen(
                [sys.executable, "-c", REPORTER, node.base, name, json.dumps(loads)])
        full = {"a": (20, 200, 1), "b": (10, 100, 2)}
        for node in cluster.nodes:
            h.wait_until(f"server {node.id} sums the three routers", lambda n=node: sums(n) == full)
            # Candidates without a load take the fleet's: b (10 queued) beats a (20 queued).
            assert route(node) == [("b", 10), ("a", 20)], (node.id, route(node))

        routers["r1"].send_signal(signal.SIGKILL)
        routers["r1"].wait(timeout=BOUND_S)
        killed_at = time.time()
        for node in cluster.nodes:
            h.wait_until(f"r1's load gone from server {node.id}",
                       lambda n=node: sums(n) == {"b": (10, 100, 2)})
            assert route(node) == [("a", 0), ("b", 10)], (node.id, route(node))
        print(f"r1's load gone everywhere {time.time() - killed_at:.2f} s after its kill "
              f"(lease {TTL_MS} ms)", flush=True)
        print("fleet load: ok", flush=True)
    except BaseException:
        for node in cluster.nodes:
            print(f"--- server {node.id} log tail ---\n{node.log_tail()}", file=sys.stderr)
        raise
    finally:
        for proc in routers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        cluster.cleanup()


if __name__ == "__main__":
    main()
