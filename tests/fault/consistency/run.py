"""One checked run: a 3-server cluster, concurrent clients recording a history, a nemesis
injecting faults, then the checks (docs/consistency.md)."""

import argparse
import http.client
import json
import os
import random
import shutil
import sys
import tempfile
import time

from . import clients, feed_check, model, report, selftest, wgl
from .cluster import Cluster, Skip
from .nemesis import KINDS, Nemesis

BLOCK_SIZE = 4


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="consistency_test.py",
        description="Linearizability and change-feed checker of a kvatlas cluster under "
                    "faults (docs/consistency.md).")
    p.add_argument("binary", nargs="?", help="the kvatlas-server binary")
    p.add_argument("--duration", type=float, default=60.0, help="seconds of workload (60)")
    p.add_argument("--nemesis", default="kill,pause,partition,disk",
                   help="comma-separated fault kinds: kill, pause, partition, disk, or none")
    p.add_argument("--clients", type=int, default=6,
                   help="concurrent clients, half REST and half binary protocol (6)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: random)")
    p.add_argument("--keys", type=int, default=5, help="block keys operated on (5)")
    p.add_argument("--think-ms", type=float, default=10.0,
                   help="each client waits up to this long between operations (10)")
    p.add_argument("--read-transports", default="rest,binary",
                   help="transports whose clients also read (rest,binary); the others "
                        "only write")
    p.add_argument("--history", help="write the history (JSON) here")
    p.add_argument("--check-only", metavar="HISTORY",
                   help="check a history written by --history; starts nothing")
    p.add_argument("--self-test", action="store_true",
                   help="check the checker on known histories (no server) and exit")
    p.add_argument("--budget", type=int, default=20_000_000,
                   help="search steps per key before the verdict is 'undecided'")
    a = p.parse_args(argv)
    a.nemesis = [] if a.nemesis in ("", "none") else a.nemesis.split(",")
    for k in a.nemesis:
        if k not in KINDS:
            p.error(f"--nemesis: unknown fault kind '{k}' (kinds: {', '.join(KINDS)})")
    a.read_transports = set(a.read_transports.split(",")) - {""}
    if a.read_transports - {"rest", "binary"}:
        p.error("--read-transports: only rest and binary")
    if a.clients < 1 or a.keys < 1 or a.duration <= 0:
        p.error("--clients, --keys and --duration must be positive")
    if not (a.self_test or a.check_only or a.binary):
        p.error("the kvatlas-server binary is required")
    if a.seed is None:
        a.seed = random.randrange(1 << 31)
    return a


class Clock:
    def __init__(self):
        self.t0 = time.monotonic()

    def __call__(self):
        return time.monotonic() - self.t0


def log(msg):
    print(msg, flush=True)


def load_kvatlas():
    """The binary protocol's Python client, or (None, why) when it is not built."""
    try:
        import kvatlas
    except ImportError as e:
        return None, str(e)
    finally:
        # The servers and tools this process starts must not inherit a sanitizer preload
        # the ctest environment gave the interpreter for the (instrumented) module.
        os.environ.pop("LD_PRELOAD", None)
    return kvatlas, None


def rest_call(server, method, path, body=None):
    host, port = server.base.split("//")[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"null")
    finally:
        conn.close()


def capabilities(kinds):
    """The fault kinds this machine allows, printing why others are skipped."""
    kept = []
    for k in kinds:
        if k in ("partition", "disk") and os.geteuid() != 0:
            why = "network namespaces" if k == "partition" else "a tmpfs mount"
            log(f"SKIP nemesis {k}: needs root ({why})")
        elif k == "partition" and shutil.which("ip") is None:
            log("SKIP nemesis partition: no `ip` command (iproute2)")
        else:
            kept.append(k)
    return kept


def start_cluster(a, kinds):
    """A started cluster with what `kinds` need; drops the kinds the machine refuses."""
    while True:
        cluster = Cluster(a.binary, partitions="partition" in kinds, disk="disk" in kinds)
        try:
            cluster.start()
            return cluster, kinds
        except Skip as e:
            cluster.cleanup()
            kind = str(e).split(":")[0]
            log(f"SKIP nemesis {kind}: {e}")
            kinds = [k for k in kinds if k != kind]
        except BaseException:
            cluster.cleanup()
            raise


def run(a):
    kinds = capabilities(a.nemesis)
    kv, why = load_kvatlas()
    if kv is None:
        log(f"NOTE: no binary-protocol clients (the kvatlas Python package: {why}); "
            f"all clients use REST")
    rng = random.Random(a.seed)
    cluster, kinds = start_cluster(a, kinds)
    clock = Clock()
    n_bin = a.clients // 2 if kv else 0
    log(f"== consistency run: {a.duration:.0f}s, nemesis {','.join(kinds) or 'none'}, "
        f"{a.clients} clients ({a.clients - n_bin} REST, {n_bin} binary), {a.keys} keys, "
        f"seed {a.seed}; data in {cluster.root}")
    workers, watchers, nemesis = [], [], None
    ok = False
    try:
        import cluster_fault_test as h
        h.wait_addresses_known(None, cluster.servers)
        leader = cluster.leader()
        keys = [rng.getrandbits(63) for _ in range(a.keys)]
        sentinel = rng.getrandbits(63)
        name = f"chk-{a.seed}"
        work = clients.Workload(name, keys, BLOCK_SIZE, clock, think=a.think_ms / 1000)
        start_rev = leader.cluster_view()["revision"]
        params = f"model_name={name}&block_size={BLOCK_SIZE}"
        for s in cluster.servers:
            watchers.append(feed_check.Watcher(s, start_rev, params, log))
            watchers[-1].start()
        for i in range(a.clients):
            seed = rng.getrandbits(32)
            if i >= a.clients - n_bin:
                order = [cluster.servers[(i + j) % 3].reach[1] for j in range(3)]
                c = clients.BinaryClient(i, work, seed, i % 2 == 0, order, kv,
                                         "binary" in a.read_transports)
            else:
                c = clients.RestClient(i, work, seed, i % 2 == 0, cluster.servers,
                                       "rest" in a.read_transports)
            workers.append(c)
        for c in workers:
            c.start()
        if kinds:
            nemesis = Nemesis(cluster, kinds, rng.getrandbits(32), clock, log)
            nemesis.start()
        time.sleep(a.duration)
        if nemesis:
            nemesis.stop()
        for s in cluster.servers:   # everything undone: nothing paused, cut off or down
            s.resume()
            if cluster.net:
                cluster.net.heal(s.id)
            if not s.alive():
                s.note_exit()
                s.start()
        cluster.wait_converged(quiet=False)
        time.sleep(1.0)             # a little traffic on the healed cluster
        work.stopping.set()
        workload_end = clock()
        for c in workers:
            c.join(timeout=60)
            assert not c.is_alive(), f"client {c.index} hangs"
        cluster.wait_converged()
        # Final reads of every key (the search's last word on lost writes), then a
        # sentinel store whose revision ends the feeds.
        final = clients.RestClient(a.clients, work, 0, False, [cluster.leader()])
        for k in range(len(keys)):
            final.one("read", k)
        status, body = rest_call(cluster.leader(), "POST", "/v1/events", {"events": [{
            "event_type": "stored", "model_name": name, "block_size": BLOCK_SIZE,
            "backend_id": "sentinel", "seq_hashes": [sentinel]}]})
        assert status == 200, (status, body)
        end_rev = body["revision"]
        for wt in watchers:
            wt.stop_at = end_rev
        for wt in watchers:
            wt.join(timeout=30)
            wt.stopping.set()
        cluster.wait_converged()
        final_counts = final_copies(cluster, name, keys)
        ops = sorted(work.ops, key=lambda o: o.id)
        faults = [f.to_json() for f in nemesis.faults] if nemesis else []
        feeds = {s.id: wt.result() for s, wt in zip(cluster.servers, watchers)}
        meta = {"seed": a.seed, "keys": keys, "start": start_rev, "end": end_rev,
                "duration": a.duration, "nemesis": kinds, "clients": a.clients,
                "final_counts": [[k, c, n] for (k, c), n in (final_counts or {}).items()],
                "anomalies": work.anomalies, "workload_end": workload_end,
                "final_counts_agree": final_counts is not None}
        if a.history:
            model.save_history(a.history, meta, ops, feeds, faults)
        for c in workers:
            if c.error:
                raise AssertionError(f"client {c.index} failed: {c.error!r}")
        if nemesis and nemesis.error:
            raise AssertionError(f"the nemesis failed: {nemesis.error!r}")
        if nemesis:
            log("faults:")
            for f in nemesis.faults:
                log("  " + f.describe())
        ok = check(meta, ops, feeds, faults, a.budget)
        if not ok and not a.history:
            path = os.path.join(tempfile.gettempdir(), f"kvatlas-history-{a.seed}.json")
            model.save_history(path, meta, ops, feeds, faults)
            log(f"history written to {path} (re-check: --check-only {path})")
        return ok
    finally:
        for c in workers:
            c.work.stopping.set()
        for wt in watchers:
            wt.stopping.set()
        if nemesis and nemesis.is_alive():
            nemesis.stop()
        for c in workers:
            if isinstance(c, clients.BinaryClient):
                c.close()
        if not ok:
            for s in cluster.servers:
                log(f"--- server {s.id} log tail ---\n{s.log_tail()[-1500:]}")
        cluster.cleanup()


def final_copies(cluster, name, keys):
    """{(key, copy): references} on the servers (which must all agree), or None."""
    answers = []
    for s in cluster.servers:
        counts = {}
        for k, key in enumerate(keys):
            status, body = rest_call(s, "GET", f"/v1/blocks/{key}?model_name={name}"
                                               f"&block_size={BLOCK_SIZE}")
            assert status == 200, (status, body)
            for c in body["copies"]:
                copy = (c["holder_id"], c["tier"])
                if copy in model.COPIES:
                    counts[(k, model.COPIES.index(copy))] = c["refcount"]
        answers.append(counts)
    if any(a != answers[0] for a in answers):
        log("PROBLEM: the servers end with different copies: " + "; ".join(
            f"server {s.id}: {a}" for s, a in zip(cluster.servers, answers)))
        return None
    return answers[0]


def check(meta, ops, feeds, faults, budget):
    """Runs every check on a recorded history, prints the report; True when all pass."""
    for line in report.operation_lines(ops):
        log(line)
    for line in report.fault_lines(faults, ops, meta.get("workload_end")):
        log(line)
    if meta.get("anomalies"):
        for line in report.anomaly_lines(meta["anomalies"]):
            log(line)
    started = time.monotonic()
    results = wgl.check_history(ops, budget)
    searched = time.monotonic() - started
    bad = [r for r in results if not r.ok]
    log(f"linearizability: {len(results)} keys, {sum(r.ops for r in results)} operations "
        f"searched in {searched:.2f}s ({sum(r.steps for r in results)} steps): "
        + ("OK" if not bad else f"{len(bad)} key(s) NOT linearizable"
           if not any(r.undecided for r in bad) else "UNDECIDED"))
    for r in bad:
        log(r.report)
    started = time.monotonic()
    final_counts = None
    if meta.get("final_counts_agree"):
        final_counts = {(k, c): n for k, c, n in meta["final_counts"]}
    problems, figures = feed_check.check(ops, feeds, meta["keys"], meta["start"], meta["end"],
                                         final_counts)
    if not meta.get("final_counts_agree", True):
        problems.append("the servers ended with different copies (see above)")
    log(f"feeds: {len(feeds)} servers, revisions ({meta['start']}, {meta['end']}], checked in "
        f"{time.monotonic() - started:.2f}s: " + ", ".join(
            f"{k} {v}" for k, v in sorted(figures.items())) + ": "
        + ("OK" if not problems else f"{len(problems)} PROBLEM(S)"))
    for p in problems[:30]:
        log("  " + p)
    if len(problems) > 30:
        log(f"  ... {len(problems) - 30} more")
    ok = not bad and not problems
    log(f"verdict: {'PASS' if ok else 'FAIL'}")
    return ok


def main(argv):
    a = parse_args(argv)
    if a.self_test:
        return selftest.run()
    if a.check_only:
        meta, ops, feeds, faults = model.load_history(a.check_only)
        return 0 if check(meta, ops, feeds, faults, a.budget) else 1
    started = time.monotonic()
    try:
        ok = run(a)
    except Exception as e:  # noqa: BLE001 - report the failure with its trace
        log(f"FAIL consistency: {e!r}")
        import traceback
        traceback.print_exc()
        return 1
    log(f"{'PASS' if ok else 'FAIL'} consistency ({time.monotonic() - started:.1f}s, seed "
        f"{a.seed})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
