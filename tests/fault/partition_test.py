#!/usr/bin/python3
"""Network partition: isolate the leader of a 3-server cluster, then heal.

usage: partition_test.py KVATLAS_SERVER_BINARY

Topology (all created by the test, in network namespaces named kvpart<pid>-*; the host's
own interfaces are never touched):

    hub namespace: bridge br0 10.76.0.254/24 --- veth r<i> --- server i's eth0 10.76.0.<i>
                   veth c<i> 10.77.<i>.1/24  --- server i's ctl0 10.77.<i>.2

Raft runs over the bridge (10.76.0.0/24); the test's HTTP client runs in the hub namespace
(this process setns()es into it) and reaches each server over its own point-to-point ctl
link, which the partition leaves up, so the test can keep writing to the isolated server.
The hub does not forward IP between links. Isolating server i = `ip link set r<i> down` in
the hub (no packet crosses the bridge to or from it); healing = `up` again.

Checks: during the isolation the majority elects a new leader within a bounded time and
keeps acknowledging writes; the isolated old leader acknowledges no write sent to it (its
writes fail, are refused or time out); it stops claiming leadership; after healing it
rejoins as a follower of the new leader and catches up, every acknowledged write (all acks
are recorded) is present on all three servers and their index sizes are equal.

Skips (exit 0, printing why) where network namespaces cannot be created (not root, no `ip`,
no netns support). Bounded in time; every process, namespace and directory it creates is
removed at the end, also on failure; namespaces left by a killed earlier run are removed at
start.
"""

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_fault_test as h  # noqa: E402 - the shared harness

CLONE_NEWNET = 0x40000000
PREFIX = "kvpart"
RAFT_NET = "10.76.0"
CTL_NET = "10.77"
ELECTION_BOUND_S = 10.0   # the majority must elect a new leader within this
STEP_DOWN_BOUND_S = 10.0  # the isolated leader must stop claiming leadership within this
ISOLATION_S = 4.0         # writes to both sides after the new leader is known


class Skip(Exception):
    pass


def ip(*args, check=True):
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip()}")
    return r


_libc = ctypes.CDLL(None, use_errno=True)


def setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, "setns: " + os.strerror(err))


def remove_stale_namespaces():
    """Namespaces of an earlier run that was killed (its pid is gone): kill what runs in
    them and delete them."""
    r = ip("netns", "list", check=False)
    for line in r.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(PREFIX + r"(\d+)-\w+", name)
        if not m or os.path.exists(f"/proc/{m.group(1)}"):
            continue
        for pid in ip("netns", "pids", name, check=False).stdout.split():
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        ip("netns", "del", name, check=False)


class Network:
    """The namespaces and links above; delete() removes them all (idempotent)."""

    def __init__(self, n):
        self.n = n
        self.hub = f"{PREFIX}{os.getpid()}-hub"
        self.nodes = [f"{PREFIX}{os.getpid()}-n{i}" for i in range(1, n + 1)]
        self.created = []
        self.host_ns = os.open("/proc/self/ns/net", os.O_RDONLY)
        self.entered = False

    def create(self):
        # Only the very first namespace decides whether namespaces are available here; a
        # later failure is a failure of the test.
        r = ip("netns", "add", self.hub, check=False)
        if r.returncode != 0:
            raise Skip(f"cannot create a network namespace: {r.stderr.strip()}")
        self.created.append(self.hub)
        for ns in self.nodes:
            ip("netns", "add", ns)
            self.created.append(ns)
        ip("-n", self.hub, "link", "set", "lo", "up")
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "addr", "add", f"{RAFT_NET}.254/24", "dev", "br0")
        ip("-n", self.hub, "link", "set", "br0", "up")
        for i, ns in enumerate(self.nodes, start=1):
            ip("-n", ns, "link", "set", "lo", "up")
            # Raft link into the bridge.
            ip("-n", self.hub, "link", "add", f"r{i}", "type", "veth", "peer", "name", "eth0",
               "netns", ns)
            ip("-n", self.hub, "link", "set", f"r{i}", "master", "br0")
            ip("-n", self.hub, "link", "set", f"r{i}", "up")
            ip("-n", ns, "addr", "add", f"{RAFT_NET}.{i}/24", "dev", "eth0")
            ip("-n", ns, "link", "set", "eth0", "up")
            # Control link: the test's client only.
            ip("-n", self.hub, "link", "add", f"c{i}", "type", "veth", "peer", "name", "ctl0",
               "netns", ns)
            ip("-n", self.hub, "addr", "add", f"{CTL_NET}.{i}.1/24", "dev", f"c{i}")
            ip("-n", self.hub, "link", "set", f"c{i}", "up")
            ip("-n", ns, "addr", "add", f"{CTL_NET}.{i}.2/24", "dev", "ctl0")
            ip("-n", ns, "link", "set", "ctl0", "up")

    def enter_hub(self):
        fd = os.open(f"/run/netns/{self.hub}", os.O_RDONLY)
        try:
            setns(fd)
        finally:
            os.close(fd)
        self.entered = True

    def isolate(self, i):
        ip("-n", self.hub, "link", "set", f"r{i}", "down")

    def heal(self, i):
        ip("-n", self.hub, "link", "set", f"r{i}", "up")

    def delete(self):
        if self.entered:
            setns(self.host_ns)
            self.entered = False
        for ns in reversed(self.created):
            for pid in ip("netns", "pids", ns, check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            ip("netns", "del", ns, check=False)
        self.created = []


class NsNode(h.Node):
    """A harness Node run inside its own network namespace: raft on the bridge address
    (from --peers), REST on the control link, the binary protocol on the namespace's
    loopback."""

    def __init__(self, binary, node_id, peers, data_dir, netns, auth):
        super().__init__(binary, node_id, peers, data_dir, auth=auth)
        self.netns = netns

    def command(self, http_listen="127.0.0.1:0"):
        # `ip netns exec` execs the server, so proc.pid is the server's. The namespaces'
        # addresses are not loopback: without tokens the server runs only with --insecure
        # (docs/security.md), which is what this test of partitions means.
        return ["ip", "netns", "exec", self.netns,
                *super().command(http_listen=f"{CTL_NET}.{self.id}.2:0"), "--insecure"]


def cluster_view(node):
    status, body = node.request("GET", "/v1/cluster")
    return body if status == 200 else None


def leader_among(nodes, deadline_s):
    """The node that reports itself leader and that every other node of `nodes` follows."""
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        views = {n.id: cluster_view(n) for n in nodes}
        for n in nodes:
            v = views[n.id]
            if v and v["state"] == "leader" and all(
                    views[o.id] and views[o.id]["leader_id"] == n.id for o in nodes):
                return n
        time.sleep(0.05)
    return None


def run(binary):
    root = tempfile.mkdtemp(prefix="kvatlas-partition-")
    net = Network(3)
    nodes = []
    stop = threading.Event()
    threads = []
    try:
        net.create()
        net.enter_hub()
        peers = ",".join(f"{i}@{RAFT_NET}.{i}:7100" for i in range(1, 4))
        # Non-loopback addresses: the servers refuse to start without a cluster secret.
        auth = h.make_auth(root)
        for i in range(1, 4):
            d = os.path.join(root, f"n{i}")
            os.makedirs(d)
            nodes.append(NsNode(binary, i, peers, d, net.nodes[i - 1], auth))
        for node in nodes:
            node.start()
        old = leader_among(nodes, h.DEADLINE_S)
        assert old, "no leader elected:\n" + "\n".join(n.log_tail() for n in nodes)
        majority = [n for n in nodes if n is not old]

        acked, lock = [], threading.Lock()  # (prompt number, revision) of every ack
        counter = [0]
        targets = [nodes]           # where the majority writer looks for the leader
        isolated_acks = []          # acks from the isolated server: must stay empty
        isolated_answers = {}       # status -> count, of writes sent to the isolated server
        during = [0]                # majority acks while the old leader is isolated
        phase = ["before"]

        def next_prompt():
            with lock:
                counter[0] += 1
                return counter[0]

        def majority_writer():
            target = None
            while not stop.is_set():
                if target is None:
                    for n in targets[0]:
                        v = cluster_view(n)
                        if v and v["state"] == "leader":
                            target = n
                            break
                    else:
                        time.sleep(0.02)
                        continue
                i = next_prompt()
                sent_phase = phase[0]
                rev = h.write(target, i)
                if rev:
                    with lock:
                        acked.append((i, rev))
                        if sent_phase == "isolated" and phase[0] == "isolated":
                            during[0] += 1
                else:
                    target = None

        def isolated_writer():
            while not stop.is_set():
                i = next_prompt()
                event = {"event_type": "stored", "model_name": "m", "block_size": h.BS,
                         "backend_id": "w", "token_ids": h.prompt(i)}
                status, body = old.request("POST", "/v1/events", {"events": [event]})
                with lock:
                    isolated_answers[status] = isolated_answers.get(status, 0) + 1
                    if status == 200:
                        isolated_acks.append((i, body))
                        acked.append((i, body["revision"]))  # checked everywhere too
                if status != 0:
                    time.sleep(0.02)

        threads.append(threading.Thread(target=majority_writer, daemon=True))
        threads[0].start()
        time.sleep(1.0)

        # Isolate the leader. From here on no write sent to it may be acknowledged.
        targets[0] = majority
        net.isolate(old.id)
        isolated_at = time.time()
        phase[0] = "isolated"
        threads.append(threading.Thread(target=isolated_writer, daemon=True))
        threads[1].start()
        new = leader_among(majority, ELECTION_BOUND_S)
        assert new, (f"the majority elected no leader within {ELECTION_BOUND_S}s:\n" +
                     "\n".join(n.log_tail() for n in majority))
        elected = time.time() - isolated_at
        stepped_down = None
        deadline = time.time() + max(ISOLATION_S, STEP_DOWN_BOUND_S)
        end = time.time() + ISOLATION_S
        while time.time() < end or (stepped_down is None and time.time() < deadline):
            v = cluster_view(old)
            if stepped_down is None and v and v["state"] != "leader":
                stepped_down = time.time() - isolated_at
            time.sleep(0.05)
        assert stepped_down is not None, (
            f"the isolated leader still claims leadership {STEP_DOWN_BOUND_S}s later")
        with lock:
            acks_during = during[0]
        assert acks_during >= 10, f"the majority acknowledged only {acks_during} writes"

        # Heal. The old leader must rejoin as a follower of the new one and catch up.
        stop.set()
        threads[1].join(timeout=h.DEADLINE_S)
        assert not threads[1].is_alive(), "the isolated writer hangs"
        stop.clear()
        phase[0] = "healed"
        net.heal(old.id)
        healed_at = time.time()
        threads[1] = threading.Thread(target=majority_writer, daemon=True)
        threads[1].start()  # a second writer on the majority while the old leader rejoins
        rejoined = None
        deadline = time.time() + h.DEADLINE_S
        while time.time() < deadline:
            v = cluster_view(old)
            if v and v["state"] == "follower" and v["leader_id"] not in (0, old.id):
                rejoined = time.time() - healed_at
                break
            time.sleep(0.05)
        assert rejoined is not None, ("the old leader did not rejoin as a follower: "
                                      f"{cluster_view(old)}\n" + old.log_tail())
        time.sleep(1.0)
        stop.set()
        for t in threads:
            t.join(timeout=h.DEADLINE_S)
        assert not isolated_acks, f"the isolated old leader acknowledged {isolated_acks[:5]}"
        assert acked, "no write was acknowledged"
        h.check_acked(None, acked, nodes)
        v = cluster_view(old)
        assert v["state"] == "follower", v
        print(f"  old leader {old.id} isolated: new leader {new.id} in {elected:.2f}s, "
              f"old leader stepped down after {stepped_down:.2f}s; {acks_during} writes "
              f"acked by the majority meanwhile; writes to the isolated server answered "
              f"{dict(sorted(isolated_answers.items()))} (0 = timeout/connection error); "
              f"rejoined {rejoined:.2f}s after healing; {len(acked)} acked writes present "
              f"on all 3 servers", flush=True)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=h.DEADLINE_S)
        for node in nodes:
            try:
                node.kill(signal.SIGKILL)
            except Exception:  # noqa: BLE001 - best effort
                pass
        net.delete()
        shutil.rmtree(root, ignore_errors=True)


def main():
    binary = sys.argv[1]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # run the cleanup
    if os.geteuid() != 0:
        print("SKIP partition: network namespaces need root", flush=True)
        return 0
    if shutil.which("ip") is None:
        print("SKIP partition: no `ip` command (iproute2)", flush=True)
        return 0
    remove_stale_namespaces()
    start = time.time()
    try:
        run(binary)
    except Skip as e:
        print(f"SKIP partition: {e}", flush=True)
        return 0
    except Exception as e:  # noqa: BLE001 - report the failure with its trace
        print(f"FAIL partition: {e!r}", flush=True)
        import traceback
        traceback.print_exc()
        return 1
    print(f"PASS partition ({time.time() - start:.1f}s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
