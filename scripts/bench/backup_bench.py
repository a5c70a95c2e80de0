#!/usr/bin/python3
"""Backup and restore figures (docs/operations.md §Backup and restore).

usage: backup_bench.py KVATLAS_SERVER_BINARY [--entries N] [--dir DIR]

Loads one server with N entries (default 1,000,000: 1,000-block stored events of one
holder), then, while a probe writes one 8-block event every 5 ms, takes an online backup
(POST /v1/admin/backup) and prints its time, size and the probe's write latency before and
during the backup (the backup runs on an HTTP worker; the raft loop and the applying thread
do nothing for it, so a stall shows as latency here). Then stops the server and times an
offline backup, verify-backup, restore, and the restored server's start; checks the
restored digest. Data under DIR (default $TMPDIR), removed at exit.
"""

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fault"))
import cluster_fault_test as h  # noqa: E402 - the test harness: Node, free ports

h.DEADLINE_S = 120.0


def start(binary, data_dir, extra=()):
    port = h.free_ports(1)[0]
    node = h.Node(binary, 1, f"1@127.0.0.1:{port}", data_dir)
    node.extra = list(extra)
    node.start()
    while node.request("GET", "/readyz")[0] != 200:
        time.sleep(0.05)
    return node


def stop(node):
    node.proc.send_signal(signal.SIGTERM)
    node.proc.wait(timeout=120)
    node.log.close()


class Probe:
    """One small write every 5 ms; (start, latency) of each."""

    def __init__(self, node):
        self.node, self.samples, self.stop = node, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        rng = random.Random(11)
        while not self.stop.is_set():
            event = {"event_type": "stored", "model_name": "probe", "block_size": 16,
                     "backend_id": "p", "parent_hash": rng.getrandbits(63),
                     "seq_hashes": [rng.getrandbits(63) for _ in range(8)]}
            t0 = time.monotonic()
            status, _ = self.node.request("POST", "/v1/events", {"events": [event]})
            t1 = time.monotonic()
            if status == 200:
                self.samples.append((t0, t1 - t0))
            time.sleep(max(0.0, 0.005 - (t1 - t0)))

    def window(self, start, end):
        return [lat * 1000 for t0, lat in self.samples if start <= t0 + lat and t0 <= end]


def summary(latencies):
    if not latencies:
        return "no writes"
    s = sorted(latencies)
    return (f"{len(s)} writes, p50 {statistics.median(s):.1f} ms, "
            f"p99 {s[min(len(s) - 1, int(0.99 * len(s)))]:.1f} ms, max {s[-1]:.1f} ms")


def long_request(node, method, path, body=None):
    """Node.request with a timeout long enough for a backup of a large state."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(node.base + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=600) as resp:
        return resp.status, json.loads(resp.read())


def timed(*argv):
    t0 = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return time.monotonic() - t0, done.stdout.strip()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--dir", default=None)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="kvatlas-backup-bench-", dir=args.dir)
    try:
        backups = os.path.join(root, "backups")
        os.makedirs(backups)
        data = os.path.join(root, "src")
        os.makedirs(data)
        node = start(args.binary, data, ["--backup-dir", backups])
        t0 = time.monotonic()
        h.load_entries(node, args.entries)
        print(f"loaded {args.entries} entries in {time.monotonic() - t0:.1f} s")
        probe = Probe(node)
        time.sleep(3)
        before_end = time.monotonic()
        status, answer = long_request(node, "POST", "/v1/admin/backup", {"to": "online"})
        assert status == 200, (status, answer)
        after = time.monotonic()
        time.sleep(1)
        probe.stop.set()
        probe.thread.join()
        print(f"online backup: applied index {answer['applied_index']}, {answer['records']} "
              f"records, {answer['bytes'] / 1e6:.1f} MB, capture {answer['capture_micros']} us, "
              f"total {answer['total_micros'] / 1e3:.0f} ms")
        print(f"  probe writes before: {summary(probe.window(before_end - 3, before_end))}")
        print(f"  probe writes during: {summary(probe.window(before_end, after))}")
        stop(node)
        seconds, _ = timed(args.binary, "backup", "--data-dir", data, "--to",
                           os.path.join(root, "offline"))
        print(f"offline backup (whole command): {seconds:.2f} s")
        seconds, _ = timed(args.binary, "verify-backup", "--from", os.path.join(backups, "online"))
        print(f"verify-backup: {seconds:.2f} s")
        restored = os.path.join(root, "restored")
        seconds, _ = timed(args.binary, "restore", "--from", os.path.join(backups, "online"),
                           "--data-dir", restored)
        print(f"restore: {seconds:.2f} s")
        t0 = time.monotonic()
        node = start(args.binary, restored)
        print(f"restored server ready in {time.monotonic() - t0:.2f} s")
        status, digest = long_request(node, "GET", "/v1/admin/digest")
        assert status == 200 and digest["state_digest"] == answer["state_digest"], digest
        print("restored state digest equals the backup's")
        stop(node)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
