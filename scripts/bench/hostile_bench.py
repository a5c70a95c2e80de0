"""Hostile-client benchmark driver for scripts/bench/hostile (standard library only).

Starts a kvatlas-server, measures fresh-connection GET /healthz and POST /query latency with
no attackers, then again while 1,000 idle connections and 100 slow-header connections (a
header byte every 2 s) are held open from other loopback addresses, and prints both with
their ratio and the server's RSS. Prints figures; asserts nothing.
"""
import argparse
import http.client
import json
import shutil
import signal
import socket
import threading
import time

from rest_bench import start_server  # this directory: the same server start

QUERY = json.dumps({"model": "m", "block_size": 4, "token_ids": list(range(64))})


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def percentile(values, q):
    """NaN when nothing succeeded (every request failed: see the failures line)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def measure(host, port, n):
    """Fresh-connection latencies (ms) of n GET /healthz and n POST /query; failures count."""
    out = {"healthz": [], "query": [], "failures": 0}
    for i in range(2 * n):
        method, path, body, key = (("GET", "/healthz", None, "healthz") if i % 2 == 0 else
                                   ("POST", "/query", QUERY, "query"))
        start = time.perf_counter()
        try:
            conn = http.client.HTTPConnection(host, port, timeout=5)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            conn.close()
            if resp.status != 200:
                out["failures"] += 1
                continue
        except OSError:
            out["failures"] += 1
            continue
        out[key].append((time.perf_counter() - start) * 1000)
    return out


def open_attackers(port, idle, slow, stop):
    """Idle and slow-header sockets from 127.0.0.2.. (at most 200 per source address)."""
    sockets = []
    for i in range(idle + slow):
        s = socket.socket()
        s.bind((f"127.0.{1 + i // 200}.{2 + i % 200}", 0))
        s.connect(("127.0.0.1", port))
        sockets.append(s)
    slow_ones = sockets[idle:]

    def trickle():
        header = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10000
        offset = 0
        while not stop.wait(2.0):
            for s in slow_ones:
                try:
                    s.send(header[offset % len(header):offset % len(header) + 1])
                except OSError:
                    pass
            offset += 1

    thread = threading.Thread(target=trickle, daemon=True)
    thread.start()
    return sockets, thread


def report(name, base, attacked):
    for key in ("healthz", "query"):
        b50, b99 = percentile(base[key], 0.5), percentile(base[key], 0.99)
        a50, a99 = percentile(attacked[key], 0.5), percentile(attacked[key], 0.99)
        print(f"{name} {key:8s} p50 {b50:6.2f} -> {a50:6.2f} ms, p99 {b99:6.2f} -> {a99:6.2f} ms "
              f"(p99 ratio {a99 / b99:.2f}x)")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--binary", required=True)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--idle", type=int, default=1000)
    parser.add_argument("--slow", type=int, default=100)
    args = parser.parse_args()
    proc, data, addr = start_server(args.binary, sync=False)
    host, port_text = addr.rsplit(":", 1)
    port = int(port_text)
    stop = threading.Event()
    try:
        measure(host, port, 20)  # warm-up
        rss_before = rss_mib(proc.pid)
        base = measure(host, port, args.requests)
        sockets, trickler = open_attackers(port, args.idle, args.slow, stop)
        time.sleep(2.5)  # every slow connection has sent at least one byte
        attacked = measure(host, port, args.requests)
        rss_during = rss_mib(proc.pid)
        print(f"attackers: {args.idle} idle + {args.slow} slow-header connections; "
              f"{args.requests} fresh-connection requests of each kind, sequential")
        report("fresh connection:", base, attacked)
        print(f"failures: {base['failures']} without attackers, {attacked['failures']} with")
        print(f"server RSS: {rss_before:.1f} MiB before, {rss_during:.1f} MiB under attack "
              f"(+{rss_during - rss_before:.1f} MiB)")
        stop.set()
        trickler.join()
        for s in sockets:
            s.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
