#!/usr/bin/python3
"""An orderly stop is orderly every time: SIGTERM under load, and after the disk filled up.

usage: shutdown_test.py KVATLAS_SERVER_BINARY [CASE...]

Cases:
  sigterm_under_load  one server with its data directory on tmpfs and 1 MiB raft segments
                      (libraft finalises a segment every few hundred writes), four writers;
                      SIGTERM at a random moment, five rounds on the same directory: every
                      stop exits 0, and after each restart every acknowledged write is
                      there. (Before the fix, libraft's io close callback ran again after
                      the io was freed, and the stop crashed in most rounds.)
  disk_full           one server on a 64 MiB tmpfs the test mounts (root; skipped with a
                      message otherwise), with and without --storage-sync: writes for 2 s,
                      then another file takes the rest of the disk and the server gets
                      SIGTERM. It must exit 0, or 1 with the reason logged (a stop that
                      cannot flush its memtables says so), never by a signal: RocksDB as
                      Debian builds it asserts when a file writer that failed is written or
                      synced again (its own LOG file, the WAL at FlushWAL). After the space
                      returns, a restart has every acknowledged write.

Uses the harness of cluster_fault_test.py. Bounded in time; only 127.0.0.1 ports picked free;
every process, mount and directory it creates is removed at the end.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

BLOCKS = 16  # per write: large enough that segments fill in seconds


def prompt(i):
    return [3_000_000 + i * BLOCKS * h.BS + k for k in range(BLOCKS * h.BS)]


def write(node, i):
    event = {"event_type": "stored", "model_name": "m", "block_size": h.BS, "backend_id": "w",
             "token_ids": prompt(i)}
    status, body = node.request("POST", "/v1/events", {"events": [event]})
    return status, body


def holds(node, i):
    status, body = node.request("POST", "/query", {"model": "m", "token_ids": prompt(i),
                                                   "block_size": h.BS})
    return status == 200 and body.get("default", {}).get("w", {}).get("GPU") == BLOCKS * h.BS


class Writers:
    """`count` threads writing unique prompts to `node` until stopped or it goes away."""

    def __init__(self, node, first, count=4):
        self.node, self.next, self.acked = node, first, []
        self.lock, self.stop = threading.Lock(), threading.Event()
        self.statuses = {}
        self.latencies = []  # (start, end) of every acknowledged write, time.monotonic()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]
        for t in self.threads:
            t.start()

    def _run(self):
        while not self.stop.is_set():
            with self.lock:
                i, self.next = self.next, self.next + 1
            start = time.monotonic()
            status, _ = write(self.node, i)
            end = time.monotonic()
            with self.lock:
                self.statuses[status] = self.statuses.get(status, 0) + 1
                if status == 200:
                    self.acked.append(i)
                    self.latencies.append((start, end))
            if status == 0:
                if not self.node.alive():
                    return
                time.sleep(0.01)

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=h.DEADLINE_S)
        return self.acked


def stop(node, sig=signal.SIGTERM):
    """Signals `node` (if alive) and returns its exit status (negative: killed by a signal)."""
    if node.alive():
        node.proc.send_signal(sig)
    try:
        code = node.proc.wait(timeout=h.DEADLINE_S)
    except subprocess.TimeoutExpired:
        node.proc.kill()
        node.proc.wait()
        raise AssertionError("the server did not stop within the deadline:\n" + node.log_tail())
    node.log.close()
    return code


def check_present(node, acked):
    missing = [i for i in acked if not holds(node, i)]
    assert not missing, (f"{len(missing)} of {len(acked)} acknowledged writes lost, e.g. "
                         f"{missing[:5]}:\n" + node.log_tail())


def single_node(binary, data_dir, extra):
    port = h.free_ports(1)[0]
    node = h.Node(binary, 1, f"1@127.0.0.1:{port}", data_dir)
    node.extra = list(extra)
    return node


def tmpfs_root():
    """A directory on tmpfs: /dev/shm where it is writable, else the temp directory."""
    shm = "/dev/shm"
    if os.path.isdir(shm) and os.access(shm, os.W_OK):
        return tempfile.mkdtemp(prefix="kvatlas-stop-", dir=shm)
    return tempfile.mkdtemp(prefix="kvatlas-stop-")


def case_sigterm_under_load(binary):
    root = tmpfs_root()
    rng = random.Random(os.getpid())
    node = None
    acked, first = [], 0
    try:
        for rnd in range(5):
            node = single_node(binary, root, ["--raft-segment-bytes", str(1 << 20)])
            node.start()
            check_present(node, acked)  # everything acknowledged before the last stop
            writers = Writers(node, first)
            time.sleep(rng.uniform(0.8, 2.0))
            code = stop(node)
            acked += writers.finish()
            first = writers.next
            assert code == 0, (f"round {rnd}: SIGTERM under load exited with {code}:\n"
                               + node.log_tail())
        node = single_node(binary, root, [])
        node.start()
        check_present(node, acked)
        print(f"  5 stops under load on tmpfs exited 0; {len(acked)} acknowledged writes "
              f"present after the last restart", flush=True)
    finally:
        if node and node.alive():
            node.kill()
        shutil.rmtree(root, ignore_errors=True)


class Skip(Exception):
    pass


def fill(path):
    """Writes zeros to `path` until the filesystem is full."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError:
            pass
        try:  # the last few pages
            while True:
                f.write(b"\0" * 4096)
        except OSError:
            pass


def disk_full_round(binary, sync):
    root = tempfile.mkdtemp(prefix="kvatlas-full-")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", root],
                       capture_output=True, text=True)
    if r.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise Skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
    data_dir = os.path.join(root, "n1")
    os.makedirs(data_dir)
    # The log goes outside the full disk, so that the reason for the stop is kept.
    log_dir = tempfile.mkdtemp(prefix="kvatlas-full-log-")
    log_path = os.path.join(log_dir, "server.log")
    os.symlink(log_path, os.path.join(data_dir, "server.log"))
    node = None
    try:
        extra = ["--min-free-disk-bytes", str(2 << 20), "--raft-segment-bytes", str(1 << 20),
                 "--storage-sync", "true" if sync else "false"]
        node = single_node(binary, data_dir, extra)
        node.start()
        writers = Writers(node, 0)
        time.sleep(2.0)
        acked = writers.finish()
        statuses = dict(writers.statuses)
        assert acked, f"no write was acknowledged: {statuses}"
        # Another process takes the rest of the disk: the server refuses writes, and its
        # stop finds no room for what it still has in memory.
        balloon = os.path.join(root, "balloon")
        fill(balloon)
        time.sleep(1.0)
        code = stop(node)
        with open(log_path, errors="replace") as f:
            log = f.read()
        assert code in (0, 1), f"the server ended with status {code} on a full disk:\n{log[-3000:]}"
        if code == 1:
            assert "ERROR shutdown" in log, "exit status 1 without a logged reason:\n" + log[-3000:]
        os.remove(balloon)
        node = single_node(binary, data_dir, extra)
        node.start()
        check_present(node, acked)
        code_after = stop(node)
        assert code_after == 0, f"a stop after the space returned exited {code_after}"
        return code, len(acked), statuses
    finally:
        if node and node.alive():
            node.kill()
        subprocess.run(["umount", root], capture_output=True)
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(log_dir, ignore_errors=True)


def case_disk_full(binary):
    for sync in (True, False):
        try:
            code, acked, statuses = disk_full_round(binary, sync)
        except Skip as e:
            print(f"  SKIP disk_full: {e}", flush=True)
            return
        print(f"  storage_sync={str(sync).lower()}: {acked} acknowledged writes, then the disk "
              f"filled; SIGTERM exited {code}; every acknowledged write present after the "
              f"space returned and a restart", flush=True)


CASES = {
    "sigterm_under_load": case_sigterm_under_load,
    "disk_full": case_disk_full,
}


if __name__ == "__main__":
    h.run_cases(CASES)
