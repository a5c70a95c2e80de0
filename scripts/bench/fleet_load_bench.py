#!/usr/bin/python3
"""The figures of scripts/bench/fleet_load (docs/routing.md §Shared load).

1. Writes per routed request: a kvatlas.LoadReporter (interval 10 ms, the default; --interval-ms) driven at --rate
   routed requests/s for --seconds (each request started, then finished a few requests
   later); its reports are the log writes it costs, checked against the server's revision.
2. Route latency with shared load ÷ without, in one run: four routers' reports cover the
   candidates' instances; a route whose candidates give no load is filled from them, one
   whose candidates give their own loads is not. The two kinds alternate in blocks of 50.
"""

import argparse
import json
import statistics
import time
import urllib.request

import kvatlas

CTX = kvatlas.Context("m", 16)
INSTANCES = [f"engine-{i}" for i in range(16)]


def http(base, method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def writes_per_request(client, base, rate, seconds, interval_ms):
    before = http(base, "GET", "/v1/stats")["revision"]
    reporter = kvatlas.LoadReporter(client, "bench-router", interval_s=interval_ms / 1000, ttl_ms=2000)
    started, open_tokens = 0, []
    t0 = time.perf_counter()
    while True:
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds:
            break
        due = int(elapsed * rate)
        while started < due:
            open_tokens.append(reporter.route_started(INSTANCES[started % 16], 0, 64, 80))
            if len(open_tokens) > 32:
                reporter.route_finished(open_tokens.pop(0))
            started += 1
        time.sleep(0.0005)
    elapsed = time.perf_counter() - t0
    sent = reporter.reports_sent
    reporter.close()  # + its leaving report
    after = http(base, "GET", "/v1/stats")["revision"]
    return started, elapsed, sent, after - before


def route_latency(client, base, n):
    for r in range(4):
        http(base, "POST", "/v1/load", {"router_id": f"router-{r}", "ttl_ms": 600000, "loads": [
            {"instance_id": i, "prefill_blocks": 10 + r, "decode_blocks": 100 + r}
            for i in INSTANCES]})
    tokens = list(range(64 * 16))
    shared = [kvatlas.Candidate(i) for i in INSTANCES[:8]]
    own = [kvatlas.Candidate(i, queued_prefill_tokens=160, active_decode_blocks=100)
           for i in INSTANCES[:8]]
    answer = client.route(CTX, shared, tokens=tokens)
    assert answer.ranked[0].queued_prefill_blocks == 10 + 11 + 12 + 13, "shared load not used"
    times = {"shared": [], "own": []}
    for _ in range(20):  # warm-up
        client.route(CTX, own, tokens=tokens)
    for block in range(2 * n // 50):
        kind = "shared" if block % 2 == 0 else "own"
        candidates = shared if kind == "shared" else own
        for _ in range(50):
            t = time.perf_counter()
            client.route(CTX, candidates, tokens=tokens)
            times[kind].append(time.perf_counter() - t)
    return {k: (statistics.median(v) * 1e6, sorted(v)[int(0.99 * len(v))] * 1e6)
            for k, v in times.items()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rpc", required=True)
    p.add_argument("--http", required=True)
    p.add_argument("--rate", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--routes", type=int, default=4000)
    p.add_argument("--interval-ms", type=float, default=10.0)
    args = p.parse_args()
    base = "http://" + args.http
    client = kvatlas.Client([args.rpc])
    started, elapsed, sent, revisions = writes_per_request(client, base, args.rate, args.seconds, args.interval_ms)
    print(f"load reports, interval {args.interval_ms:g} ms: {started} routed requests in {elapsed:.2f} s "
          f"({started / elapsed:.0f}/s), {sent} reports (log revisions: {revisions}): "
          f"{sent / started:.5f} writes per routed request, {sent / elapsed:.1f} writes/s")
    lat = route_latency(client, base, args.routes)
    s, o = lat["shared"], lat["own"]
    print(f"route latency, 8 candidates, 64-block prompt, {args.routes} routes each: "
          f"shared load p50 {s[0]:.0f} us p99 {s[1]:.0f} us; caller's load p50 {o[0]:.0f} us "
          f"p99 {o[1]:.0f} us; shared / caller's p50 {s[0] / o[0]:.3f}, p99 {s[1] / o[1]:.3f}")


if __name__ == "__main__":
    main()
