#!/usr/bin/python3
"""Five servers losing two at once, and leadership handed away when the leader's disk runs low.

usage: cluster5_test.py KVATLAS_SERVER_BINARY [CASE...]

Cases:
  five_kill_two      5 servers on loopback under three writers: kill -9 the leader and one
                     follower at once; the other three elect a leader and keep acknowledging
                     writes; both come back on their data directories; every acknowledged
                     write is present on all five and the index sizes are equal.
  disk_low_transfer  3 servers, each data directory on its own small tmpfs the test mounts
                     (root; skipped with a message otherwise): a balloon file takes the
                     leader below --min-free-disk-bytes; it must refuse writes with 429
                     "disk space low" and hand leadership to another server, to which writes
                     succeed; after the balloon is removed the old leader keeps following,
                     catches up, and every acknowledged write is present on all three.

Uses the harness of cluster_fault_test.py. Bounded in time; only 127.0.0.1 ports picked
free; every process, mount and directory it creates is removed at the end.
"""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness


class Writers:
    """`count` threads writing unique prompts to whichever live node leads (among
    `candidates()`), recording every ack as (prompt number, revision)."""

    def __init__(self, candidates, count=3):
        self.candidates = candidates
        self.acked, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.counter = 0
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(count)]
        for t in self.threads:
            t.start()

    def acks(self):
        with self.lock:
            return len(self.acked)

    def _run(self):
        target = None
        while not self.stop.is_set():
            if target is None or not target.alive():
                target = h.current_leader(self.candidates())
                if target is None:
                    time.sleep(0.02)
                    continue
            with self.lock:
                self.counter += 1
                i = self.counter
            rev = h.write(target, i)
            if rev:
                with self.lock:
                    self.acked.append((i, rev))
            else:
                target = None

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=h.DEADLINE_S)
        assert not any(t.is_alive() for t in self.threads), "a writer hangs"
        return list(self.acked)


def wait_follower(node, exclude_leader):
    """Waits until `node` follows a leader other than `exclude_leader`; its view."""
    deadline = time.time() + h.DEADLINE_S
    while time.time() < deadline:
        status, body = node.request("GET", "/v1/cluster")
        if status == 200 and body["state"] == "follower" and body["leader_id"] not in (
                0, exclude_leader):
            return body
        time.sleep(0.05)
    raise AssertionError(f"server {node.id} does not follow a leader: "
                         f"{node.request('GET', '/v1/cluster')}\n" + node.log_tail())


def case_five_kill_two(binary):
    cluster = h.Cluster(binary, n=5)
    writers = None
    try:
        leader = cluster.leader()
        writers = Writers(lambda: cluster.nodes)
        time.sleep(1.5)
        follower = next(n for n in cluster.nodes if n is not leader)
        before = writers.acks()
        assert before > 0, "no write acknowledged before the kills"
        killed_at = time.time()
        leader.kill(signal.SIGKILL)
        follower.kill(signal.SIGKILL)
        new_leader = cluster.leader(exclude=(leader.id, follower.id))
        failover = time.time() - killed_at
        time.sleep(2.0)
        after = writers.acks()
        assert after - before >= 10, f"only {after - before} writes acked by the three left"
        leader.start()
        follower.start()
        for node in (leader, follower):
            wait_follower(node, exclude_leader=node.id)
        time.sleep(1.0)  # writes go on while the two catch up
        acked = writers.finish()
        h.check_acked(cluster, acked, cluster.nodes)
        print(f"  {len(acked)} acked writes ({after - before} while two of five were down), "
              f"new leader {new_leader.id} {failover:.2f}s after the kill of leader "
              f"{leader.id} and follower {follower.id}; all on every server", flush=True)
        assert failover < 5, failover
    finally:
        if writers:
            writers.stop.set()
        cluster.cleanup()


class Skip(Exception):
    pass


class TmpfsCluster(h.Cluster):
    """h.Cluster whose servers each keep their data directory on a tmpfs of `size_mb`."""

    def __init__(self, binary, n, size_mb, extra):  # noqa: super().__init__ starts too early
        self.root = tempfile.mkdtemp(prefix="kvatlas-cluster-")
        self.mounts = []
        self.nodes = []
        ports = h.free_ports(n)
        peers = ",".join(f"{i + 1}@127.0.0.1:{p}" for i, p in enumerate(ports))
        self.auth = h.make_auth(self.root)
        for i in range(n):
            d = os.path.join(self.root, f"n{i + 1}")
            os.makedirs(d)
            r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", d],
                               capture_output=True, text=True)
            if r.returncode != 0:
                self.cleanup()
                raise Skip(f"cannot mount a tmpfs here (needs root): {r.stderr.strip()}")
            self.mounts.append(d)
            node = h.Node(binary, i + 1, peers, d, auth=self.auth)
            node.extra = list(extra)
            self.nodes.append(node)
        for node in self.nodes:
            node.start()

    def cleanup(self):
        for node in self.nodes:
            try:
                node.kill(signal.SIGKILL)
            except Exception:  # noqa: BLE001 - best effort
                pass
        for d in self.mounts:
            subprocess.run(["umount", d], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def case_disk_low_transfer(binary):
    watermark = 64 << 20
    try:
        # A small disk wants small raft segments (libraft preallocates ~3 of them).
        cluster = TmpfsCluster(binary, 3, 256, ["--min-free-disk-bytes", str(watermark),
                                                "--raft-segment-bytes", str(8 << 20)])
    except Skip as e:
        print(f"  SKIP disk_low_transfer: {e}", flush=True)
        return
    writers = None
    try:
        old = cluster.leader()
        acked = [(i, h.write(old, i)) for i in range(1, 21)]
        assert all(rev for _, rev in acked), acked
        # Writers on whoever leads, from before the balloon to after the recovery.
        writers = Writers(lambda: cluster.nodes, count=2)
        writers.counter = 1000
        time.sleep(0.5)
        # The balloon leaves the old leader 24 MiB below its watermark.
        st = os.statvfs(old.data_dir)
        size = st.f_bavail * st.f_frsize - (watermark - (24 << 20))
        balloon = os.path.join(old.data_dir, "balloon")
        with open(balloon, "wb") as f:
            chunk = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                f.write(chunk)
        filled_at = time.time()
        # The old leader refuses writes with 429 (it answers so even after handing over:
        # the refusal comes before the leadership check).
        refused = None
        deadline = time.time() + h.DEADLINE_S
        n = 2000
        while refused is None:
            event = {"event_type": "stored", "model_name": "m", "block_size": h.BS,
                     "backend_id": "w", "token_ids": h.prompt(n)}
            status, body = old.request("POST", "/v1/events", {"events": [event]})
            if status == 200:
                acked.append((n, body["revision"]))  # before the watcher noticed
            elif status == 429 and "disk space low" in body.get("message", ""):
                refused = time.time() - filled_at
            assert time.time() < deadline, ("the low-disk leader did not refuse writes",
                                            status, body)
            n += 1
            time.sleep(0.02)
        # ... and hands leadership to another server, which takes writes.
        new = cluster.leader(exclude=(old.id,))
        moved = time.time() - filled_at
        rev = h.write(new, n)
        assert rev, "the new leader refuses writes"
        acked.append((n, rev))
        wait_follower(old, exclude_leader=old.id)  # it learns of the new term (status: 50 ms)
        time.sleep(1.0)  # the old leader follows, low on disk, while writes go on
        assert old.alive(), "the low-disk server died:\n" + old.log_tail()
        os.remove(balloon)
        time.sleep(1.0)
        acked += writers.finish()
        wait_follower(old, exclude_leader=old.id)
        h.check_acked(cluster, acked, cluster.nodes)
        assert old.alive(), old.log_tail()
        print(f"  leader {old.id} low on disk: refused writes {refused:.2f}s after the "
              f"balloon, leader {new.id} {moved:.2f}s after; {len(acked)} acked writes on "
              f"all 3 after the space returned", flush=True)
    finally:
        if writers:
            writers.stop.set()
        cluster.cleanup()


CASES = {
    "five_kill_two": case_five_kill_two,
    "disk_low_transfer": case_disk_low_transfer,
}


if __name__ == "__main__":
    h.run_cases(CASES)
