#!/usr/bin/env python3
"""A short trace replay against a real kvatlas-server: the first 300 requests of the
Mooncake trace (tests/data/) under round-robin and the kvatlas policy, which routes with the
server's binary kRoute over the index the simulated instances publish to. Checks the JSON:
kvatlas reuses more prefix than round-robin, its index never disagreed with the simulator,
and route latencies were measured. Also checks POST /v1/route over REST on that index, and
router replicas: --routers 2 with and without --shared-load (the shared run sends load
reports through LoadReporters, and its replicas leave the server's table when it ends).

usage: replay_test.py KVATLAS_SERVER_BINARY KVATLAS_REPLAY_BINARY TRACE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def http(addr, path, body):
    request = urllib.request.Request("http://" + addr + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def check_router_replicas(replay, rpc, http_addr, trace):
    """--routers 2: each replica routes with its own load; with --shared-load each reports
    through a LoadReporter and the server fills the fleet's sum."""
    rows = {}
    for mode in ([], ["--shared-load"]):
        out = subprocess.run([replay, "--server", rpc, "--trace", trace, "--limit", "200",
                              "--policies", "round-robin,kvatlas", "--routers", "2", *mode,
                              "--model", "ctest-routers" + "".join(mode), "--json"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        for row in map(json.loads, out.stdout.splitlines()):
            rows[row["policy"]] = row
    print(json.dumps({k: {f: v[f] for f in ("hit_ratio", "ttft_p50_ms", "load_reports")}
                      for k, v in rows.items()}))
    own, shared, rr = rows["kvatlas@2r"], rows["kvatlas@2r+shared"], rows["round-robin@2r"]
    for row in (own, shared):
        assert row["requests"] == 200 and row["routers"] == 2, row
        assert row["index_mismatches"] == 0, row
        assert row["hit_ratio"] > rr["hit_ratio"], (row["hit_ratio"], rr["hit_ratio"])
        assert 0 < row["ttft_p50_ms"] <= row["ttft_p99_ms"], row
    assert not own["shared_load"] and own["load_reports"] == 0, own
    assert shared["shared_load"] and shared["load_reports"] > 0, shared
    # The replicas' reporters sent their leaving reports: nothing of theirs counts now.
    with urllib.request.urlopen("http://" + http_addr + "/v1/load", timeout=10) as answer:
        assert json.loads(answer.read())["routers"] == [], "replicas left no report behind"

    # Bad flags are clear errors.
    out = subprocess.run([replay, "--server", rpc, "--trace", trace, "--shared-load"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--shared-load: needs --routers" in out.stderr, out.stderr
    out = subprocess.run([replay, "--server", rpc, "--trace", trace, "--routers", "0"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--routers: must be at least 1" in out.stderr, out.stderr
    # The relative cost terms' flags, through the server (the route API carries them) and
    # scored in process (docs/routing.md §The cost).
    for policy in ("kvatlas", "kvatlas-local"):
        out = subprocess.run([replay, "--server", rpc, "--trace", trace, "--limit", "200",
                              "--policies", policy, "--replica-credit", "0",
                              "--excess-queue-scale", "0.5", "--excess-queue-epsilon", "1",
                              "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout.splitlines()[0])["requests"] == 200, out.stdout
    out = subprocess.run([replay, "--trace", trace, "--policies", "kvatlas-local",
                          "--replica-credit", "2"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "replica_credit: must be a number from 0 to 1" in out.stderr, \
        out.stderr


def main():
    server, replay, trace = sys.argv[1:4]
    data = tempfile.mkdtemp(prefix="kvatlas-replay-test-")
    proc = subprocess.Popen([server, "--data-dir", data, "--http-listen", "127.0.0.1:0",
                             "--rpc-listen", "127.0.0.1:0", "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 30
        while not os.path.exists(os.path.join(data, "http.addr")):
            assert proc.poll() is None, "the server exited"
            assert time.time() < deadline, "the server did not start"
            time.sleep(0.05)
        rpc = open(os.path.join(data, "rpc.addr")).read().strip()
        http_addr = open(os.path.join(data, "http.addr")).read().strip()
        out = subprocess.run([replay, "--server", rpc, "--trace", trace, "--limit", "300",
                              "--policies", "round-robin,kvatlas", "--model", "ctest", "--json"],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        rows = {row["policy"]: row for row in map(json.loads, out.stdout.splitlines())}
        print(json.dumps(rows, indent=1))
        rr, kv = rows["round-robin"], rows["kvatlas"]
        for row in (rr, kv):
            for key in ("hit_ratio", "load_imbalance", "ttft_p50_ms", "ttft_p99_ms",
                        "lookup_p99_us"):
                assert key in row, key
            assert row["requests"] == 300
        assert kv["hit_ratio"] > rr["hit_ratio"], (kv["hit_ratio"], rr["hit_ratio"])
        assert kv["index_mismatches"] == 0, kv["index_mismatches"]
        assert kv["lookup_p99_us"] is not None and kv["lookup_p99_us"] > 0
        assert rr["lookup_p99_us"] is None

        # The replay left instances' blocks in context (ctest-kvatlas, 512): a route over REST
        # with an instance that holds nothing and one that holds the first request's prompt.
        first = json.loads(open(trace).readline())
        status, holders = 0, None
        with urllib.request.urlopen("http://" + http_addr + "/v1/holders", timeout=10) as a:
            holders = json.loads(a.read())["holders"]
        assert any(h["holder_id"].startswith("inst-") for h in holders), holders
        status, answer = http(http_addr, "/v1/route", {
            "model_name": "ctest-kvatlas", "block_size": 512,
            "token_ids": [1, 2, 3], "candidates": [{"instance_id": "nobody"}]})
        assert status == 200, answer
        assert answer["instance_id"] == "nobody" and answer["prompt_blocks"] == 1, answer
        status, answer = http(http_addr, "/v1/route", {
            "model_name": "ctest-kvatlas", "block_size": 512, "token_ids": [1],
            "candidates": [{"instance_id": "a", "queued_prefill_tokens": -1}]})
        assert status == 400 and answer["message"].startswith(
            "candidates[0].queued_prefill_tokens"), answer
        assert first["hash_ids"], first

        check_router_replicas(replay, rpc, http_addr, trace)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
