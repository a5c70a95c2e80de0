#!/usr/bin/python3
"""A server recovering a large state logs its progress and stops at once when told to.

usage: startup_test.py KVATLAS_SERVER_BINARY [--entries N]

One single server (no --peers: a one-voter cluster) is loaded with N entries (default
2,000,000: a recovery of seconds on a debug or sanitizer build) and stopped. Then:
  - a full restart: serves the same state (GET /v1/admin/digest) and logs how many
    entries it loaded; when that took 2.5 s or more, its log shows "recovering: loading
    the state from RocksDB" progress lines (every 2 s);
  - SIGINT as soon as it logs "recovering state from": it exits 0 without ever serving
    (no "listening" line, no http.addr), saying it stopped while recovering;
  - SIGINT once it logs that raft starts: exits 0 (it may have finished starting);
  - SIGINT and SIGTERM delivered together while it loads (the process stopped with SIGSTOP
    meanwhile): the second exits at once with 128 + its number;
  - a last restart serves the same state digest as before the first stop.
No timed assertion: every wait is bounded by a generous deadline and the test prints how
long each interrupted start took to exit after its signal. Only 127.0.0.1 ports picked
free; every process and directory it creates is removed at the end.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

# Recovering a million entries takes a while under a sanitizer.
h.DEADLINE_S = 180.0
EXIT_DEADLINE_S = 60.0


class SingleNode(h.Node):
    """A single server: no --peers (a one-voter cluster that waits, as it starts, until it
    has replayed its log)."""

    def __init__(self, binary, data_dir):
        super().__init__(binary, 1, "", data_dir)

    def command(self, http_listen="127.0.0.1:0"):
        argv = super().command(http_listen)
        at = argv.index("--peers")
        return argv[:at] + argv[at + 2:]


def wait_ready(node):
    deadline = time.time() + h.DEADLINE_S
    while node.request("GET", "/readyz")[0] != 200:
        assert time.time() < deadline, "not ready:\n" + node.log_tail()
        time.sleep(0.05)


def digest(node):
    """The state digest: it reads the whole state, longer than Node.request waits."""
    with urllib.request.urlopen(node.base + "/v1/admin/digest", timeout=300) as resp:
        return json.loads(resp.read())["state_digest"]


def stop(node):
    node.proc.send_signal(signal.SIGTERM)
    assert node.proc.wait(timeout=EXIT_DEADLINE_S) == 0, node.log_tail()
    node.log.close()


def log_size(node):
    return os.path.getsize(os.path.join(node.data_dir, "server.log"))


def log_since(node, offset):
    with open(os.path.join(node.data_dir, "server.log"), "rb") as f:
        f.seek(offset)
        return f.read().decode(errors="replace")


def interrupted_start(node, when, signals, delay=0.0, after=0.0):
    """Starts the server, waits (bounded) until its log since now contains `when`, `after`
    seconds more, and `delay` seconds since the start, sends `signals` (a list) and waits
    for the exit. Returns (exit code, log of this run, seconds from the first signal to the
    exit)."""
    offset = log_size(node)
    addr = os.path.join(node.data_dir, "http.addr")
    if os.path.exists(addr):
        os.remove(addr)
    log = open(os.path.join(node.data_dir, "server.log"), "ab")
    proc = subprocess.Popen(node.command(), stdout=log, stderr=log)
    started = time.monotonic()
    try:
        deadline = time.time() + h.DEADLINE_S
        while when not in log_since(node, offset):
            assert proc.poll() is None, "exited early:\n" + log_since(node, offset)
            assert time.time() < deadline, f"no {when!r} in the log:\n" + log_since(node, offset)
            time.sleep(0.005)
        time.sleep(max(after, started + delay - time.monotonic()))
        if len(signals) > 1:
            # Both pending when it runs again: it reads SIGINT first (the lower number).
            proc.send_signal(signal.SIGSTOP)
        sent = time.monotonic()
        for s in signals:
            proc.send_signal(s)
        if len(signals) > 1:
            proc.send_signal(signal.SIGCONT)
        code = proc.wait(timeout=EXIT_DEADLINE_S)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    return code, log_since(node, offset), took


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--entries", type=int, default=2_000_000)
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="kvatlas-startup-")
    try:
        data = os.path.join(root, "n1")
        os.makedirs(data)
        node = SingleNode(args.binary, data)
        node.start()
        wait_ready(node)
        t0 = time.monotonic()
        h.load_entries(node, args.entries)
        print(f"loaded {args.entries} entries in {time.monotonic() - t0:.1f} s")
        expected = digest(node)
        stop(node)

        offset = log_size(node)
        t0 = time.monotonic()
        node.start()
        wait_ready(node)
        full = time.monotonic() - t0
        print(f"full restart: serving after {full:.1f} s")
        assert digest(node) == expected
        stop(node)
        log = log_since(node, offset)
        loaded = re.search(r"recovered at revision \d+: (\d+) entries loaded in (\d+) ms", log)
        assert loaded and int(loaded.group(1)) == args.entries, log
        if int(loaded.group(2)) >= 2500:  # progress is logged every 2 s
            assert "recovering: loading the state from RocksDB: " in log, log

        code, log, took = interrupted_start(node, "recovering state from", [signal.SIGINT])
        print(f"SIGINT while loading the state: exit {code} {took * 1000:.0f} ms after it")
        assert code == 0, log
        assert "received SIGINT while starting: stopping" in log, log
        assert "stopped (SIGINT or SIGTERM) while" in log, log
        assert "listening on" not in log, log
        assert not os.path.exists(os.path.join(data, "http.addr"))

        code, log, took = interrupted_start(node, "raft: server 1,", [signal.SIGINT])
        print(f"SIGINT as raft starts: exit {code} {took * 1000:.0f} ms after it")
        assert code == 0, log

        code, log, took = interrupted_start(node, "recovering state from",
                                            [signal.SIGINT, signal.SIGTERM])
        print(f"SIGINT then SIGTERM while loading the state: exit {code} "
              f"{took * 1000:.0f} ms after them")
        assert code in (128 + signal.SIGINT, 128 + signal.SIGTERM), log
        assert "received a second stop signal" in log, log

        node.start()
        wait_ready(node)
        assert digest(node) == expected, "the state changed across the interrupted starts"
        stop(node)
        print("ok: every interrupted start exited cleanly and the state recovered whole")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
