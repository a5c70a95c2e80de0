"""Faults, one at a time, each bounded and undone: a random healthy spell, then a fault of a
random enabled kind on the leader or a follower for a random while, then its undoing.

  kill       SIGKILL the server, restart it on its data directory
  pause      SIGSTOP, then SIGCONT
  partition  cut the server's raft link (partition_test.py's namespaces; clients keep
             reaching it over its own link), then restore it
  disk       fill the server's tmpfs: below --min-free-disk-bytes ("low": it refuses writes
             and hands leadership away) or to the last byte ("full": a storage write fails
             and the server stops); then free it, and restart the server if it stopped

Every fault is logged with its times (seconds since the run started, and the wall clock
to match the servers' logs) and kept for the report.
"""

import os
import random
import threading
import time

import shutdown_test  # fill(): a file that takes a file system's last byte

from .cluster import MIN_FREE

KINDS = ("kill", "pause", "partition", "disk")


class Fault:
    def __init__(self, kind, role, server, start):
        self.kind, self.role, self.server, self.start = kind, role, server, start
        self.end = None
        self.note = ""

    def to_json(self):
        return {"kind": self.kind, "role": self.role, "server": self.server,
                "start": self.start, "end": self.end, "note": self.note}

    def describe(self):
        end = "?" if self.end is None else f"{self.end:7.2f}s"
        return (f"{self.kind:<9} {self.role:<8} server {self.server}  t={self.start:7.2f}s .. "
                f"{end}  {self.note}")


class Nemesis(threading.Thread):
    def __init__(self, cluster, kinds, seed, clock, log, gap=(2.0, 4.0), hold=(1.5, 4.0)):
        super().__init__(daemon=True)
        self.cluster, self.kinds, self.clock, self.log = cluster, list(kinds), clock, log
        self.rng = random.Random(seed)
        self.gap, self.hold = gap, hold
        self.faults = []
        self.stopping = threading.Event()
        self.error = None

    def run(self):
        try:
            while not self.stopping.wait(self.rng.uniform(*self.gap)):
                self.one_fault()
        except Exception as e:  # noqa: BLE001 - reported by the run
            self.error = e
            self.log(f"nemesis failed: {e!r}")

    def stop(self):
        self.stopping.set()
        self.join(timeout=120)

    def one_fault(self):
        kind = self.rng.choice(self.kinds)
        role = self.rng.choice(("leader", "follower"))
        leader = self.cluster.leader()
        if leader is None:
            self.log(f"[{self.clock():7.2f}s] nemesis: no leader now; {kind} skipped")
            return
        if role == "leader":
            target = leader
        else:
            target = self.rng.choice([s for s in self.cluster.servers if s is not leader])
        fault = Fault(kind, role, target.id, self.clock())
        self.faults.append(fault)
        self.log(f"[{fault.start:7.2f}s {time.strftime('%H:%M:%S')}] fault: {kind} {role} "
                 f"server {target.id}")
        undo = getattr(self, "inject_" + kind)(target, fault)
        try:
            self.stopping.wait(self.rng.uniform(*self.hold))
        finally:
            undo()
            fault.end = self.clock()
            self.log(f"[{fault.end:7.2f}s {time.strftime('%H:%M:%S')}] healed: {kind} "
                     f"{role} server {target.id} {fault.note}")

    def inject_kill(self, s, fault):
        s.crash()
        fault.note = f"exit {s.exit_codes[-1][1] if s.exit_codes else '?'}"
        return lambda: s.start()

    def inject_pause(self, s, fault):
        s.pause()
        return s.resume

    def inject_partition(self, s, fault):
        self.cluster.net.isolate(s.id)
        return lambda: self.cluster.net.heal(s.id)

    def inject_disk(self, s, fault):
        full = self.rng.random() < 1 / 3
        balloon = os.path.join(s.data_dir, "balloon")
        st = os.statvfs(s.data_dir)
        free = st.f_bavail * st.f_frsize
        if full:
            shutdown_test.fill(balloon)
        else:
            write_zeros(balloon, max(free - MIN_FREE // 3, 0))
        st = os.statvfs(s.data_dir)
        fault.note = (f"{'full' if full else 'low'}: {st.f_bavail * st.f_frsize >> 10} KiB "
                      f"left")

        def undo():
            os.remove(balloon)
            if not s.alive():
                s.note_exit()
                fault.note += f"; the server stopped (exit {s.exit_codes[-1][1]}), restarted"
                s.start()
        return undo


def write_zeros(path, size):
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while size > 0:
            size -= f.write(chunk[:min(size, len(chunk))])
