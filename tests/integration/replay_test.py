#!/usr/bin/env python3
"""A short trace replay against a real kvatlas-server: the first 300 requests of the
Mooncake trace (tests/data/) under round-robin and the kvatlas policy, which routes with the
server's binary kRoute over the index the simulated instances publish to. Checks the JSON:
kvatlas reuses more prefix than round-robin, its index never disagreed with the simulator,
and route latencies were measured. Also checks POST /v1/route over REST on that index.

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
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)
    print("ok")


if __name__ == "__main__":
    main()
