"""The soak's figures: a table per window, least-squares slopes over the second half of the
load (after warm-up), the resource verdicts, a plot, and the samples as CSV and JSON."""

import csv
import json
import math
import os
import statistics

# Resource bounds, judged per server over the second half of the load phase (the first half
# is warm-up: RocksDB's memtables and block cache, the feed window and the allocator's
# arenas fill there):
RSS_SLOPE_PCT_PER_HOUR = 10.0   # the floor of RSS ÷ index entries may grow at most this % of
                                # its value at the start of the second half, per hour (least
                                # squares over the second half)
RSS_FLOOR_WINDOW_S = 360.0      # the floor: the minimum over the trailing 6 minutes. RSS is
                                # a sawtooth with the default storage settings (RocksDB's
                                # 32 MiB memtables fill and flush every ~5 minutes at the
                                # soak's write rate: ~30 MiB up and down); a leak lifts the
                                # floor, a memtable does not
RSS_JUDGED_MIN_S = 900.0        # ... judged only over a second half at least this long (runs
                                # of 30 minutes or more: several sawtooth periods)
OTHER_SLOPE_PCT_PER_HOUR = 10.0 # the floor of the RSS the budgets do not explain (RSS less
                                # RocksDB's memory, the index's tables, the feed window and
                                # the raft log in memory, each bounded or proportional to the
                                # state) may grow at most this % of its value at the start
                                # of the second half, per hour. RSS ÷ entries alone also moves
                                # with those parts filling and emptying, which is no leak: it
                                # is printed, not judged, and RocksDB's budget checked apart
                                # The same bound holds for the heap malloc says is in use
                                # beyond those parts (/v1/stats heap.in_use_bytes): a leak
                                # lifts it, memory malloc keeps after a free does not
STORAGE_OVER_BUDGET_MAX = 1.05  # RocksDB's memory (its cache, which the memtables are charged
                                # to) at most this times storage_memory_bytes, plus its table
                                # readers
FD_GROWTH_MAX = 16              # open fds: median of the last quarter of the load minus the
                                # median of the first quarter of its second half, samples of
                                # one raft role compared with each other (a leader holds ~12
                                # more: the engine streams' ZMQ sockets), the larger growth
THREAD_GROWTH_MAX = 4           # threads: the same
COUNT_JUDGED_MIN_S = 120.0      # fds and threads judged over a second half at least this long
                                # (shorter ones see keep-alive connections come and go)


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def slope(points):
    """Least-squares slope of [(t, y)] per second; None with fewer than 3 points."""
    points = [(t, y) for t, y in points if y is not None]
    if len(points) < 3:
        return None
    mt = statistics.fmean(t for t, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return sum((t - mt) * (y - my) for t, y in points) / den if den else None


def hist_quantile(buckets, q):
    """Quantile of a Prometheus histogram given as {le: cumulative count}."""
    items = sorted(((float("inf") if le == "+Inf" else float(le)), c) for le, c in buckets.items())
    if not items or items[-1][1] <= 0:
        return None
    rank = q * items[-1][1]
    prev_le, prev_c = 0.0, 0.0
    for le, c in items:
        if c >= rank:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((rank - prev_c) / (c - prev_c) if c > prev_c else 1)
        prev_le, prev_c = le, c
    return prev_le


def server_commit_window(hist, t0, t1):
    """The servers' commit-duration histogram over (t0, t1]: per server the last sample in
    the window minus the last one at or before t0, summed over servers."""
    total = {}
    for sid in {h[1] for h in hist}:
        mine = [h for h in hist if h[1] == sid]
        before = [h for h in mine if h[0] <= t0]
        inside = [h for h in mine if t0 < h[0] <= t1]
        if not inside:
            continue
        end = inside[-1][2]
        start = before[-1][2] if before else {}
        for le, c in end.items():
            total[le] = total.get(le, 0.0) + c - start.get(le, 0.0)
    return total


def ms(x):
    return "-" if x is None else ("%.1f" % (x * 1000) if x < 10 else "%.0f" % (x * 1000))


def windows_table(journal, sampler, load_s, window_s, server_ids):
    rows = []
    n = max(1, math.ceil(load_s / window_s - 1e-9))
    for k in range(n):
        t0, t1 = k * window_s, min(load_s, (k + 1) * window_s)
        row = {"window": k + 1, "from_s": round(t0, 1), "to_s": round(t1, 1)}
        for kind in ("lookup", "lookup_rpc", "route", "commit"):
            vals = [v for t, v in journal.latency.get(kind, []) if t0 <= t < t1]
            row[kind + "_n"] = len(vals)
            row[kind + "_p50"] = percentile(vals, 0.5)
            row[kind + "_p99"] = percentile(vals, 0.99)
        h = server_commit_window(sampler.hist, t0, t1)
        row["server_commit_p50"] = hist_quantile(h, 0.5)
        row["server_commit_p99"] = hist_quantile(h, 0.99)
        samples = [r for r in sampler.rows if t0 <= r["t"] < t1 and r.get("alive")]
        for sid in server_ids:
            mine = [r for r in samples if r["server"] == sid]
            last = mine[-1] if mine else {}
            row["rss_mib_%d" % sid] = last.get("rss_kb", 0) / 1024.0 if last else None
            row["rss_per_entry_%d" % sid] = last.get("rss_per_entry")
            row["rocksdb_mib_%d" % sid] = (last["storage_memory"] / (1 << 20)
                                           if last.get("storage_memory") is not None else None)
            row["other_mib_%d" % sid] = last.get("other_mib")
            row["heap_other_mib_%d" % sid] = last.get("heap_other_mib")
            row["heap_free_mib_%d" % sid] = last.get("heap_free_mib")
            row["entries_%d" % sid] = last.get("entries")
            row["fds_max_%d" % sid] = max((r["fds"] for r in mine), default=None)
            row["threads_max_%d" % sid] = max((r["threads"] for r in mine), default=None)
        row["apply_lag_max"] = max((r.get("apply_lag") or 0 for r in samples), default=None)
        row["repl_lag_max"] = max((r.get("repl_lag") or 0 for r in samples), default=None)
        row["transient"] = sum(1 for e in journal.transient if t0 <= e[0] < t1)
        row["errors"] = sum(1 for e in journal.errors if t0 <= e[0] < t1)
        rows.append(row)
    return rows


def print_table(rows, server_ids, out):
    def per(row, key, fmt):
        vals = [row.get("%s_%d" % (key, s)) for s in server_ids]
        return "/".join("-" if v is None else fmt % v for v in vals)
    has_rpc = any(r["lookup_rpc_n"] for r in rows)
    head = ["win", "t(s)", "lookup p50/p99 ms", "route p50/p99", "commit p50/p99",
            "srv-commit p50/p99", "RSS MiB", "RocksDB MiB", "other MiB", "heap other/free MiB",
            "RSS/entry B",
            "entries", "fds max",
            "threads max", "lag a/r", "retry", "err"]
    if has_rpc:
        head.insert(3, "rpc lookup p50/p99")
    lines = []
    for r in rows:
        cells = ["%d" % r["window"], "%.0f-%.0f" % (r["from_s"], r["to_s"]),
                 "%s/%s" % (ms(r["lookup_p50"]), ms(r["lookup_p99"])),
                 "%s/%s" % (ms(r["route_p50"]), ms(r["route_p99"])),
                 "%s/%s" % (ms(r["commit_p50"]), ms(r["commit_p99"])),
                 "%s/%s" % (ms(r["server_commit_p50"]), ms(r["server_commit_p99"])),
                 per(r, "rss_mib", "%.0f"), per(r, "rocksdb_mib", "%.0f"),
                 per(r, "other_mib", "%.0f"),
                 "%s | %s" % (per(r, "heap_other_mib", "%.0f"), per(r, "heap_free_mib", "%.0f")),
                 per(r, "rss_per_entry", "%.0f"),
                 per(r, "entries", "%d"), per(r, "fds_max", "%d"),
                 per(r, "threads_max", "%d"),
                 "%s/%s" % (r["apply_lag_max"], r["repl_lag_max"]),
                 "%d" % r["transient"], "%d" % r["errors"]]
        if has_rpc:
            cells.insert(3, "%s/%s" % (ms(r["lookup_rpc_p50"]), ms(r["lookup_rpc_p99"])))
        lines.append(cells)
    widths = [max(len(head[i]), *(len(l[i]) for l in lines)) for i in range(len(head))]
    fmt = "  ".join("%%-%ds" % w for w in widths)
    out.append(fmt % tuple(head))
    for l in lines:
        out.append(fmt % tuple(l))
    out.append("(per-server columns are servers %s; lag a/r = max apply lag (commit − applied "
               "entries, /metrics) / max replication lag (leader's lag_entries); retry = "
               "answers 429/503/504 retried; srv-commit = kvatlas_raft_commit_duration_seconds "
               "of all servers)" % "/".join(str(s) for s in server_ids))


def quarter_median(rows, key, t0, t1, role):
    """role: "leader", "follower" (any other state) or None (every sample)."""
    vals = [r[key] for r in rows if t0 <= r["t"] < t1 and r.get(key) is not None
            and (role is None or (r.get("state") == "leader") == (role == "leader"))]
    return statistics.median(vals) if vals else None


def resource_verdicts(sampler, load_s, server_ids):
    """[(server, figure, value, bound, failed, text)] and the slopes for the summary."""
    half = load_s / 2
    judged_span = load_s - half
    verdicts, slopes = [], {}
    for sid in server_ids:
        rows = [r for r in sampler.rows if r["server"] == sid and r.get("alive")
                and half <= r["t"] <= load_s]
        s = {}
        for key, scale in (("rss_kb", 1 / 1024.0 * 3600), ("rss_per_entry", 3600),
                           ("other_mib", 3600), ("heap_other_mib", 3600), ("heap_free_mib", 3600),
                           ("fds", 3600), ("threads", 3600), ("entries", 3600)):
            v = slope([(r["t"], r.get(key)) for r in rows])
            s[key + "_per_hour"] = None if v is None else v * scale
        slopes[sid] = s
        judged = judged_span >= RSS_JUDGED_MIN_S
        not_judged = "" if judged else "not judged: second half %.0f s < %.0f s" % (
            judged_span, RSS_JUDGED_MIN_S)
        for key, name, bound in (("rss_per_entry", "RSS/entry floor", None),
                                 ("other_mib", "RSS beyond budgets, floor",
                                  OTHER_SLOPE_PCT_PER_HOUR),
                                 ("heap_other_mib", "heap in use beyond budgets, floor",
                                  OTHER_SLOPE_PCT_PER_HOUR)):
            every = [r for r in sampler.rows if r["server"] == sid and r.get(key)]
            floor = [(r["t"], min(x[key] for x in every
                                  if r["t"] - RSS_FLOOR_WINDOW_S <= x["t"] <= r["t"]))
                     for r in rows if r.get(key)]
            v = slope(floor)
            s[key + "_floor_per_hour"] = None if v is None else v * 3600
            base = floor[0][1] if floor else None
            per_h = s[key + "_floor_per_hour"]
            if base and base > 0 and per_h is not None:
                pct = 100.0 * per_h / base
                # RSS per entry is shown, not judged (RSS_SLOPE_PCT_PER_HOUR as a reference)
                verdicts.append((sid, name, "%+.1f%%/h" % pct,
                                 "%.0f%%/h" % (bound or RSS_SLOPE_PCT_PER_HOUR),
                                 bound is not None and judged and pct > bound,
                                 not_judged if bound is not None else "shown, not judged"))
        over = [r for r in rows if r.get("storage_memory") is not None and r.get("storage_budget")]
        if over:
            worst = max(over, key=lambda r: r["storage_memory"] - (r.get("table_readers") or 0))
            limit = worst["storage_budget"] * STORAGE_OVER_BUDGET_MAX + (worst.get("table_readers") or 0)
            verdicts.append((sid, "RocksDB memory max", "%.0f MiB" % (worst["storage_memory"] / (1 << 20)),
                             "%.0f MiB" % (limit / (1 << 20)), worst["storage_memory"] > limit, ""))
        for key, bound in (("fds", FD_GROWTH_MAX), ("threads", THREAD_GROWTH_MAX)):
            growth = []
            for role in ("leader", "follower", None):
                if role is None and growth:
                    break  # all samples together only when no role has both quarters
                a = quarter_median(rows, key, half, half + judged_span / 4, role)
                b = quarter_median(rows, key, load_s - judged_span / 4, load_s + 1, role)
                if a is not None and b is not None:
                    growth.append(b - a)
            if growth:
                judged = judged_span >= COUNT_JUDGED_MIN_S
                verdicts.append((sid, key + " growth", "%+g" % max(growth), "%d" % bound,
                                 judged and max(growth) > bound,
                                 "" if judged else "not judged: second half %.0f s < %.0f s"
                                 % (judged_span, COUNT_JUDGED_MIN_S)))
    return verdicts, slopes


def write_outputs(out_dir, sampler, journal, rows, summary):
    keys = []
    for r in sampler.rows:
        for k in r:
            if k not in keys:
                keys.append(k)
    with open(os.path.join(out_dir, "samples.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(sampler.rows)
    with open(os.path.join(out_dir, "windows.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["window"])
        w.writeheader()
        w.writerows(rows)
    with open(os.path.join(out_dir, "samples.json"), "w") as f:
        json.dump({"samples": sampler.rows, "windows": rows,
                   "latency": {k: v for k, v in journal.latency.items()},
                   "events": journal.events, "errors": journal.errors,
                   "transient": journal.transient}, f)
    with open(os.path.join(out_dir, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


def plot(out_dir, sampler, journal, rows, server_ids, load_s):
    """A PNG of the samples; returns its path, or a note why there is none."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None, "matplotlib is not installed for %s: no plot" % "python3"
    fig, axes = plt.subplots(2, 4, figsize=(20, 8.5))
    panels = [("rss_kb", "RSS (MiB)", 1 / 1024.0), ("other_mib", "RSS beyond budgets (MiB)", 1),
              ("storage_memory", "RocksDB memory (MiB)", 1 / (1 << 20)),
              ("rss_per_entry", "RSS / index entry (bytes)", 1),
              ("entries", "index entries", 1), ("fds", "open fds", 1), ("threads", "threads", 1)]
    top = max((r.get("entries") or 0 for r in sampler.rows), default=0)
    for ax, (key, title, scale) in zip(axes.flat, panels):
        for sid in server_ids:
            # RSS per entry of a nearly empty index is no figure: left out
            pts = [(r["t"] / 60, r[key] * scale) for r in sampler.rows
                   if r["server"] == sid and r.get(key) is not None and
                   (key != "rss_per_entry" or r.get("entries", 0) >= top / 10)]
            if pts:
                ax.plot(*zip(*pts), label="server %d" % sid, lw=1)
        ax.set_title(title)
        ax.set_xlabel("minutes")
        ax.axvline(load_s / 120, color="grey", ls=":", lw=1)
        for t, what in journal.events:
            ax.axvline(t / 60, color="red" if "transfer" in what else "orange", alpha=0.25, lw=0.8)
        ax.legend(fontsize=7)
    ax = axes.flat[7]
    mids = [(r["from_s"] + r["to_s"]) / 120 for r in rows]
    for key, label in (("lookup", "lookup"), ("lookup_rpc", "rpc lookup"), ("route", "route"),
                       ("commit", "commit (client)"), ("server_commit", "commit (server)")):
        for q, style in (("p50", "-"), ("p99", "--")):
            vals = [r.get("%s_%s" % (key, q)) for r in rows]
            if any(v is not None for v in vals):
                ax.plot(mids, [None if v is None else v * 1000 for v in vals], style,
                        label="%s %s" % (label, q), lw=1, marker=".")
    ax.set_yscale("log")
    ax.set_title("latency per window (ms)")
    ax.set_xlabel("minutes")
    ax.legend(fontsize=6)
    fig.suptitle("kvatlas soak (red: leader transfers, orange: engine restarts; dotted: "
                 "start of the judged second half)")
    fig.tight_layout()
    path = os.path.join(out_dir, "soak.png")
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path, None
