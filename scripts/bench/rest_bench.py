"""REST benchmark driver for scripts/bench/rest (standard library only)."""
import argparse
import http.client
import json
import os
import random
import shutil
import signal
import subprocess
import tempfile
import threading
import time


def start_server(binary, sync):
    data = tempfile.mkdtemp(prefix="kvatlas-bench-")
    args = [binary, "--data-dir", data, "--http-listen", "127.0.0.1:0", "--rpc-listen", "127.0.0.1:0",
            "--storage-sync", "true" if sync else "false", "--log-level", "warning"]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    addr_file = os.path.join(data, "http.addr")
    deadline = time.time() + 30
    while not os.path.exists(addr_file):
        if proc.poll() is not None or time.time() > deadline:
            raise SystemExit("kvatlas-server did not start")
        time.sleep(0.05)
    with open(addr_file) as f:
        return proc, data, f.read().strip()


def chain(c, length):
    rng = random.Random(c)
    return [rng.getrandbits(64) for _ in range(length)]


def post(conn, path, body):
    """POSTs and reads the answer; True when the server asked to close the connection
    (http.client then reconnects on the next request)."""
    conn.request("POST", path, body=body, headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        raise SystemExit(f"{path}: HTTP {resp.status}: {data[:200]!r}")
    return resp.will_close
    return data


def pct(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", required=True)
    ap.add_argument("--server")
    ap.add_argument("--batches", type=int, default=200)
    ap.add_argument("--events-per-batch", type=int, default=64)
    ap.add_argument("--chain", type=int, default=128)
    ap.add_argument("--holders", type=int, default=100)
    ap.add_argument("--lookups", type=int, default=5000)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--lookup-clients", type=int, default=8)
    ap.add_argument("--no-sync", action="store_true")
    a = ap.parse_args()

    proc = data = None
    if a.server:
        addr = a.server
    else:
        proc, data, addr = start_server(a.binary, not a.no_sync)
    host, port = addr.rsplit(":", 1)
    try:
        # Bodies are built before timing so that only the server is measured.
        bodies = []
        for b in range(a.batches):
            events = []
            for e in range(a.events_per_batch):
                c = b * a.events_per_batch + e
                events.append({"event_type": "stored", "model_name": "bench", "block_size": 16,
                               "backend_id": f"instance-{c % a.holders}", "medium": "gpu",
                               "seq_hashes": chain(c, a.chain)})
            bodies.append(json.dumps(events))
        total_blocks = a.batches * a.events_per_batch * a.chain

        next_batch = [0]
        lock = threading.Lock()

        def ingest_worker():
            conn = http.client.HTTPConnection(host, int(port), timeout=60)
            while True:
                with lock:
                    i = next_batch[0]
                    next_batch[0] += 1
                if i >= len(bodies):
                    return
                post(conn, "/v1/events", bodies[i])

        t0 = time.perf_counter()
        workers = [threading.Thread(target=ingest_worker) for _ in range(a.clients)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        print(f"REST ingest: {total_blocks} block events in {a.batches} batches of "
              f"{a.events_per_batch} events x {a.chain} blocks, {a.clients} clients, "
              f"sync={'off' if a.no_sync else 'on'}: {elapsed:.2f} s = "
              f"{total_blocks / elapsed / 1e3:.0f} k block events/s")

        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        rng = random.Random(7)
        lat = []
        n_chains = a.batches * a.events_per_batch
        for _ in range(a.lookups):
            body = json.dumps({"model_name": "bench", "block_size": 16,
                               "seq_hashes": chain(rng.randrange(n_chains), a.chain)})
            t = time.perf_counter()
            post(conn, "/v1/lookup", body)
            lat.append((time.perf_counter() - t) * 1e6)
        print(f"REST lookup ({a.chain}-block chain, one client, keep-alive, includes the "
              f"Python client): p50 {pct(lat, 0.5):.0f} us, p99 {pct(lat, 0.99):.0f} us")

        # Persistent connections from several clients at once: every answer should keep its
        # connection (a server that closes after N requests makes clients reconnect, which
        # shows as closes and as latency outliers).
        per_client = max(1, a.lookups // a.lookup_clients)
        lats = [[] for _ in range(a.lookup_clients)]
        closes = [0] * a.lookup_clients

        def lookup_worker(k):
            conn = http.client.HTTPConnection(host, int(port), timeout=10)
            r = random.Random(100 + k)
            for _ in range(per_client):
                body = json.dumps({"model_name": "bench", "block_size": 16,
                                   "seq_hashes": chain(r.randrange(n_chains), a.chain)})
                t = time.perf_counter()
                closes[k] += post(conn, "/v1/lookup", body)
                lats[k].append((time.perf_counter() - t) * 1e6)
            conn.close()

        t0 = time.perf_counter()
        workers = [threading.Thread(target=lookup_worker, args=(k,))
                   for k in range(a.lookup_clients)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        elapsed = time.perf_counter() - t0
        every = [v for l in lats for v in l]
        print(f"REST lookup, {a.lookup_clients} clients each on one keep-alive connection "
              f"({per_client} lookups each): {len(every) / elapsed:.0f} lookups/s, p50 "
              f"{pct(every, 0.5):.0f} us, p99 {pct(every, 0.99):.0f} us, max "
              f"{max(every) / 1e3:.1f} ms; connections the server closed: {sum(closes)}")
    finally:
        if proc:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            shutil.rmtree(data, ignore_errors=True)


if __name__ == "__main__":
    main()
