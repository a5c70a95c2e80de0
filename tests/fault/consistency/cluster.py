"""A 3-server cluster for the checker: on loopback, or — for partitions — each server in a
network namespace of its own (tests/fault/partition_test.py's topology, reused from there),
optionally each data directory on a small tmpfs of its own (the disk nemesis fills one).

Servers listen on fixed addresses (free ports picked once, or fixed ports on each
namespace's own address), so a restarted server is where clients and peers expect it.
"""

import os
import shutil
import signal
import subprocess
import tempfile
import time

import cluster_fault_test as h      # the fault tests' harness (Node, free_ports, make_auth)
import partition_test as netns      # network namespaces (Network, setns, stale cleanup)

TMPFS_MB = 64
MIN_FREE = 12 << 20        # --min-free-disk-bytes: the disk nemesis goes below it
SEGMENT = 1 << 20          # --raft-segment-bytes: small, for a small disk


class Skip(Exception):
    pass


class Server(h.Node):
    """h.Node on fixed REST and binary-protocol addresses, optionally in a namespace.
    `listen` is what it binds, `reach` the (REST, binary) addresses the test uses."""

    def __init__(self, binary, node_id, peers, data_dir, auth, listen, reach, ns=None):
        super().__init__(binary, node_id, peers, data_dir, auth=auth)
        (self.http_addr, self.rpc_addr), self.reach, self.ns = listen, reach, ns
        self.paused = False
        self.exit_codes = []   # of every end of the process: what a fault did to it

    def command(self, http_listen=None):
        cmd = super().command(http_listen=self.http_addr)
        cmd[cmd.index("--rpc-listen") + 1] = self.rpc_addr
        if self.ns is None:
            return cmd
        # Addresses that are not loopback: only with --insecure without tokens (as in
        # partition_test.py); peers still prove the cluster secret.
        return ["ip", "netns", "exec", self.ns, *cmd, "--insecure"]

    def start(self):
        super().start()
        self.base = "http://" + self.reach[0]
        self.paused = False

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        if self.paused and self.alive():
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def crash(self):
        """SIGKILL (a paused process too) and wait for it."""
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=h.DEADLINE_S)
        self.paused = False
        self.note_exit()

    def note_exit(self):
        if self.proc is not None and self.proc.poll() is not None:
            if not self.exit_codes or self.exit_codes[-1][0] is not self.proc:
                self.exit_codes.append((self.proc, self.proc.returncode))
            try:
                self.log.close()
            except Exception:  # noqa: BLE001 - already closed
                pass

    def cluster_view(self):
        status, body = self.request("GET", "/v1/cluster")
        return body if status == 200 else None


class Cluster:
    """start() raises Skip when namespaces or a tmpfs cannot be had; cleanup() (always
    call it) removes every process, namespace, mount and directory."""

    def __init__(self, binary, n=3, partitions=False, disk=False):
        self.binary, self.n, self.partitions, self.disk = binary, n, partitions, disk
        self.root = tempfile.mkdtemp(prefix="kvatlas-consistency-")
        self.net = None
        self.mounts = []
        self.servers = []

    def start(self):
        binary, n, disk = self.binary, self.n, self.disk
        if self.partitions:
            netns.remove_stale_namespaces()
            self.net = netns.Network(n)
            try:
                self.net.create()
            except netns.Skip as e:
                raise Skip(f"partitions: {e}")
            self.net.enter_hub()
            peers = ",".join(f"{i}@{netns.RAFT_NET}.{i}:7100" for i in range(1, n + 1))
            # Listening on every address, a server announces its raft network's (peers
            # forward to it there, and a partition cuts that too); the test reaches each
            # over its own control link, which a partition leaves up.
            listen = [("0.0.0.0:7200", "0.0.0.0:7300")] * n
            reach = [(f"{netns.CTL_NET}.{i}.2:7200", f"{netns.CTL_NET}.{i}.2:7300")
                     for i in range(1, n + 1)]
        else:
            ports = h.free_ports(3 * n)
            peers = ",".join(f"{i + 1}@127.0.0.1:{ports[i]}" for i in range(n))
            listen = reach = [(f"127.0.0.1:{ports[n + i]}", f"127.0.0.1:{ports[2 * n + i]}")
                              for i in range(n)]
        auth = h.make_auth(self.root)
        for i in range(1, n + 1):
            d = os.path.join(self.root, f"n{i}")
            os.makedirs(d)
            if disk:
                self.mount_tmpfs(d)
            ns = self.net.nodes[i - 1] if self.net else None
            s = Server(binary, i, peers, d, auth, listen[i - 1], reach[i - 1], ns=ns)
            if disk:
                # The log lives off the small disk: a full disk must not lose it.
                os.symlink(os.path.join(self.root, f"n{i}.log"), os.path.join(d, "server.log"))
                s.extra = ["--min-free-disk-bytes", str(MIN_FREE),
                           "--raft-segment-bytes", str(SEGMENT)]
            self.servers.append(s)
        for s in self.servers:
            s.start()

    def mount_tmpfs(self, d):
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", d],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise Skip(f"disk: cannot mount a tmpfs (needs root): {r.stderr.strip()}")
        self.mounts.append(d)

    def server(self, i):
        return self.servers[i - 1]

    def leader(self, among=None):
        """The server that says it leads with the highest term right now, or None."""
        best = None
        for s in among or self.servers:
            if not s.alive() or s.paused:
                continue
            v = s.cluster_view()
            if v and v["state"] == "leader" and (best is None or v["term"] > best[1]):
                best = (s, v["term"])
        return best[0] if best else None

    def wait_converged(self, deadline_s=60, quiet=True):
        """Until every server runs and follows one leader and — when `quiet` (no client
        writes any more) — all have applied the same revision, the leader's commit.
        Returns the revision, or raises."""
        deadline = time.monotonic() + deadline_s
        last = None
        while time.monotonic() < deadline:
            views = [s.cluster_view() for s in self.servers]
            last = views
            if all(views):
                leaders = {v["leader_id"] for v in views}
                revs = {v["revision"] for v in views}
                commit = max(v["commit_index"] for v in views)
                if len(leaders) == 1 and 0 not in leaders and (not quiet or (
                        len(revs) == 1 and min(v["applied_index"] for v in views) >= commit)):
                    return max(revs)
            time.sleep(0.1)
        raise AssertionError(f"the cluster did not converge within {deadline_s}s: {last}")

    def cleanup(self):
        for s in self.servers:
            try:
                s.resume()
                s.crash()
            except Exception:  # noqa: BLE001 - best effort
                pass
        if self.net:
            self.net.delete()
        for d in self.mounts:
            subprocess.run(["umount", "-l", d], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)
