#!/usr/bin/python3
"""How fast a recovering server stops on SIGINT (docs/operations.md §Starting and stopping).

usage: recovery_bench.py KVATLAS_SERVER_BINARY [--entries N] [--dir DIR] [--crash]

Loads a single server (no --peers) with N entries (default 10,000,000: 1,000-block stored events of one
holder) and stops it (SIGTERM; with --crash, SIGKILL instead, so that RocksDB has lost its
last memtables and every start below, from a copy of that directory, replays the raft
log). Times a full restart (start to
DATA_DIR/http.addr) and prints the phases its log went through; then starts it again and
sends SIGINT at 10%, 30%, 50%, 70% and 90% of that time, and at 0 to 2.5 s after its
"raft: server" line (raft's part of the start), printing for each the phase the signal
found and the time from the signal to the process's exit; then checks that a last start
serves the same state digest. Data under DIR (default $TMPDIR), removed
at exit. Measure a release build (build/release/server/kvatlas-server).
"""

import argparse
import os
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "tests", "fault"))
import cluster_fault_test as h  # noqa: E402 - the test harness: Node, free ports
import startup_test as s  # noqa: E402 - load, digest, interrupted starts

h.DEADLINE_S = 600.0


def timed_start(node):
    offset = s.log_size(node)
    t0 = time.monotonic()
    node.start()
    took = time.monotonic() - t0
    s.wait_ready(node)
    return took, s.log_since(node, offset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--entries", type=int, default=10_000_000)
    parser.add_argument("--dir", default=None)
    parser.add_argument("--crash", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="kvatlas-recovery-bench-", dir=args.dir)
    try:
        data = os.path.join(root, "n1")
        os.makedirs(data)
        node = s.SingleNode(args.binary, data)
        node.start()
        s.wait_ready(node)
        t0 = time.monotonic()
        h.load_entries(node, args.entries)
        print(f"loaded {args.entries} entries in {time.monotonic() - t0:.1f} s")
        expected = s.digest(node)
        crashed = os.path.join(root, "crashed")
        if args.crash:
            node.kill()
            shutil.copytree(data, crashed)
        else:
            s.stop(node)

        def restore_crashed():
            # Every start replays the same log: the one after the crash.
            if args.crash:
                shutil.rmtree(data)
                shutil.copytree(crashed, data)
        print(f"load average: {' '.join(open('/proc/loadavg').read().split()[:3])} "
              f"({os.cpu_count()} cores)")

        full, log = timed_start(node)
        s.stop(node)
        print(f"full start: serving after {full:.2f} s; its log:")
        for line in log.splitlines():
            if "recover" in line or "raft: " in line or "listening" in line:
                print("  " + line)

        stops = []
        # Through the whole start, then through raft's part of it (from its log line on).
        trials = [("", full * fraction, 0.0) for fraction in (0.1, 0.3, 0.5, 0.7, 0.9)]
        trials += [("raft: server 1,", 0.0, after) for after in (0.0, 0.5, 1.0, 1.5, 2.0, 2.5)]
        for when, delay, after in trials:
            restore_crashed()
            code, log, took = s.interrupted_start(node, when, [signal.SIGINT], delay, after)
            phase = re.search(r"while starting(?:: stopping)? \(([^)]*)", log)
            served = "listening on" in log
            if not served:
                stops.append(took)
            where = f"{delay:.2f} s into the start" if not when else f"{after:.1f} s after {when!r}"
            print(f"SIGINT {where} "
                  f"({phase.group(1) if phase else 'after it started' if served else '?'}): "
                  f"exit {code} {took * 1000:.0f} ms after the signal")
            assert code == 0, log
        print(f"SIGINT to exit during the start ({len(stops)} starts): median "
              f"{statistics.median(stops) * 1000:.0f} ms, max {max(stops) * 1000:.0f} ms")

        node.start()
        s.wait_ready(node)
        assert s.digest(node) == expected, "the state changed across the interrupted starts"
        s.stop(node)
        print("the last start serves the same state digest")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
