"""Samples every server every few seconds: process figures from /proc/PID (RSS, threads,
open fds), the index from GET /v1/stats, raft from GET /v1/cluster, and from /metrics the
apply lag and the commit-duration histogram (cumulative buckets, differenced per window by
the report)."""

import os
import re
import threading
import time

from cluster import Http

HIST = "kvatlas_raft_commit_duration_seconds"
_BUCKET = re.compile(r'^%s_bucket\{le="([^"]+)"\} (\S+)$' % HIST)
_GAUGE = re.compile(r"^(kvatlas_raft_apply_lag_entries|kvatlas_raft_leadership_changes_total|"
                    r"kvatlas_feed_window_bytes|kvatlas_raft_log_memory_bytes) (\S+)$")


def proc_figures(pid):
    """(rss_kb, threads, fds) of a live process; None when it is gone."""
    try:
        rss = threads = None
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    rss = int(line.split()[1])
                elif line.startswith("Threads:"):
                    threads = int(line.split()[1])
        fds = len(os.listdir("/proc/%d/fd" % pid))
        return rss, threads, fds
    except (OSError, ValueError):
        return None


def parse_metrics(text):
    buckets, gauges = {}, {}
    for line in text.splitlines():
        m = _BUCKET.match(line)
        if m:
            buckets[m.group(1)] = float(m.group(2))
            continue
        m = _GAUGE.match(line)
        if m:
            gauges[m.group(1)] = float(m.group(2))
    return buckets, gauges


class Sampler:
    def __init__(self, journal, cluster, interval):
        self.j, self.cluster, self.interval = journal, cluster, interval
        self.rows = []          # one dict per server per sample
        self.hist = []          # (t, node id, {le: cumulative count})
        self.stop = threading.Event()

    def sample_once(self, http):
        t = round(self.j.now(), 3)
        views = {}
        for node in self.cluster.nodes:
            status, body, _ = http.request(node.http, "GET", "/v1/cluster")
            views[node.id] = body if status == 200 else None
        leader_view = next((v for v in views.values() if v and v.get("state") == "leader"), None)
        repl_lag = {}
        if leader_view:
            for m in leader_view.get("members", []):
                repl_lag[m["id"]] = m.get("lag_entries")
        for node in self.cluster.nodes:
            row = {"t": t, "server": node.id}
            figures = proc_figures(node.proc.pid) if node.alive() else None
            if figures is None or figures[0] is None:  # gone, or a zombie not reaped yet
                row["alive"] = False
                self.rows.append(row)
                continue
            row.update(alive=True, rss_kb=figures[0], threads=figures[1], fds=figures[2])
            status, stats, _ = http.request(node.http, "GET", "/v1/stats")
            if status == 200:
                idx = stats.get("index", {})
                row.update(entries=idx.get("entries"), blocks=idx.get("blocks"),
                           index_bytes=idx.get("memory_bytes"), revision=stats.get("revision"),
                           storage_bytes=stats.get("storage", {}).get("approximate_bytes"))
                memory = stats.get("storage", {}).get("memory", {})
                row.update(storage_memory=memory.get("total_bytes"),
                           storage_budget=memory.get("budget_bytes"),
                           table_readers=memory.get("table_reader_bytes"))
                heap = stats.get("heap", {})
                row.update(heap_in_use=heap.get("in_use_bytes"), heap_free=heap.get("free_bytes"))
            view = views.get(node.id)
            if view:
                row.update(state=view.get("state"), leader_id=view.get("leader_id"),
                           applied_index=view.get("applied_index"),
                           commit_index=view.get("commit_index"))
            row["repl_lag"] = repl_lag.get(node.id)
            status, text = http.text(node.http, "/metrics")
            if status == 200:
                buckets, gauges = parse_metrics(text)
                row["apply_lag"] = gauges.get("kvatlas_raft_apply_lag_entries")
                row["leader_changes"] = gauges.get("kvatlas_raft_leadership_changes_total")
                row["feed_window_bytes"] = gauges.get("kvatlas_feed_window_bytes")
                row["raft_log_bytes"] = gauges.get("kvatlas_raft_log_memory_bytes")
                self.hist.append((t, node.id, buckets))
            if row.get("entries"):
                row["rss_per_entry"] = row["rss_kb"] * 1024.0 / row["entries"]
            if row.get("storage_memory") is not None and row.get("index_bytes") is not None:
                # What the bounded budgets do not explain: RSS less RocksDB's memory (held
                # under storage_memory_bytes), the index's tables, the feed's window and the
                # raft log in memory (under raft_snapshot_log_bytes).
                accounted = (row["storage_memory"] + row["index_bytes"] +
                             (row.get("feed_window_bytes") or 0) +
                             (row.get("raft_log_bytes") or 0))
                row["other_mib"] = (row["rss_kb"] * 1024.0 - accounted) / (1 << 20)
                # The same of what malloc says the program holds: RSS less this is memory
                # malloc keeps after it was freed (heap_free_mib), and code and stacks.
                if row.get("heap_in_use") is not None:
                    row["heap_other_mib"] = (row["heap_in_use"] - accounted) / (1 << 20)
                    row["heap_free_mib"] = row["heap_free"] / (1 << 20)
            self.rows.append(row)

    def run(self):
        http = Http(timeout=10)
        next_t = time.monotonic()
        while not self.stop.is_set():
            self.sample_once(http)
            next_t += self.interval
            self.stop.wait(max(0.0, next_t - time.monotonic()))
        http.close()
