"""The run's figures: operations by kind and outcome, faults by kind, the longest window
without a successful operation after each kind of fault, the known anomalies."""

import bisect
from collections import Counter

from .model import FAILED, INF, OK, UNKNOWN

SETTLE_S = 5.0  # a fault's window: from its start to this long after it was undone


def operation_lines(ops):
    lines = []
    by_kind = Counter(o.kind for o in ops)
    by_outcome = Counter(o.outcome for o in ops)
    lines.append(f"operations: {len(ops)} ("
                 + ", ".join(f"{k} {by_kind[k]}" for k in ("store", "remove", "read", "sread"))
                 + f"); ok {by_outcome[OK]}, failed {by_outcome[FAILED]}, "
                 f"unknown {by_outcome[UNKNOWN]}")
    for transport in sorted({o.transport for o in ops}):
        mine = [o for o in ops if o.transport == transport]
        reads = Counter(o.outcome for o in mine if o.kind not in ("store", "remove"))
        for once in (False, True):
            writes = [o for o in mine if o.kind in ("store", "remove") and
                      bool(o.exactly_once) == once]
            if not writes:
                continue
            c = Counter(o.outcome for o in writes)
            resent = [o for o in writes if o.attempts > 1]
            lines.append(
                f"  {transport} {'exactly-once' if once else 'plain'} writes: {len(writes)}, ok "
                f"{c[OK]}, failed {c[FAILED]}, unknown {c[UNKNOWN]}"
                + (f"; resent {len(resent)}, settled {sum(o.outcome != UNKNOWN for o in resent)}"
                   if once else ""))
        lines.append(f"  {transport} reads: ok {reads[OK]}, failed {reads[FAILED]}")
    failures = Counter(o.detail.split(":", 1)[-1].strip()[:70] for o in ops
                       if o.outcome != OK)
    if failures:
        lines.append("  most frequent failures: " + "; ".join(
            f"{n}× {d}" for d, n in failures.most_common(6)))
    return lines


def fault_lines(faults, ops, workload_end=None):
    """Faults by kind and, per kind, the longest stretch without an acknowledged operation
    between a fault's start and SETTLE_S after it was undone (or the next fault's start).
    Clients call one operation at a time, so a client waiting on a stopped server counts as
    unavailable for as long as it waits: this is what clients see, not the cluster alone."""
    if not faults:
        return ["faults: none"]
    done = sorted(o.ret for o in ops if o.outcome == OK and o.ret != INF)
    kinds = Counter(f["kind"] for f in faults)
    roles = Counter((f["kind"], f["role"]) for f in faults)
    lines = ["faults injected: " + ", ".join(
        f"{k} {n} (leader {roles[(k, 'leader')]}, follower {roles[(k, 'follower')]})"
        for k, n in sorted(kinds.items()))]
    worst = {}
    starts = sorted(f["start"] for f in faults)
    last_call = workload_end or max(o.call for o in ops)  # when the clients stopped
    for f in faults:
        end = (f["end"] if f["end"] is not None else f["start"]) + SETTLE_S
        later = [s for s in starts if s > f["start"]]
        gap = longest_gap(done, f["start"], min([end, last_call] + later))
        if gap > worst.get(f["kind"], (0, None))[0]:
            worst[f["kind"]] = (gap, f)
    lines.append("longest window without a successful operation, per fault kind: " + ", ".join(
        f"{k} {g:.2f}s ({f['role']} {f['server']} at t={f['start']:.1f}s)"
        for k, (g, f) in sorted(worst.items())))
    slow = Counter()
    slowest = {}
    for o in ops:
        if o.outcome != OK or o.ret == INF or o.ret - o.call <= 3.0:
            continue
        f = fault_of(faults, starts, o.call)
        kind = f["kind"] if f else "none"
        slow[kind] += 1
        slowest[kind] = max(slowest.get(kind, 0), o.ret - o.call)
    if slow:
        lines.append("successful operations that took over 3 s, by the fault they began in: "
                     + ", ".join(f"{k} {n} (slowest {slowest[k]:.2f}s)"
                                 for k, n in sorted(slow.items())))
    return lines


def fault_of(faults, starts, t):
    """The fault whose window (its start to SETTLE_S after it ended, or the next start)
    holds time t, or None."""
    for f in faults:
        end = (f["end"] if f["end"] is not None else f["start"]) + SETTLE_S
        later = [s for s in starts if s > f["start"]]
        if f["start"] <= t < min([end] + later):
            return f
    return None


def longest_gap(done, start, end):
    i = bisect.bisect_right(done, start)
    prev, gap = start, 0.0
    while i < len(done) and done[i] <= end:
        gap = max(gap, done[i] - prev)
        prev = done[i]
        i += 1
    nxt = done[i] if i < len(done) else end
    return max(gap, min(nxt, end) - prev) if prev < end else gap


def anomaly_lines(anomalies):
    lines = [f"known anomalies: linearizable reads answered 421 naming the asked server as "
             f"leader: {anomalies['lin_read_421_self']}; successful operations that took "
             f"over 3 s: {anomalies['slow_ok_ops']} (slowest {anomalies['slowest_ok_op']:.2f}s)"]
    if anomalies.get("slowest_ok_op_desc"):
        lines.append("  slowest: " + anomalies["slowest_ok_op_desc"])
    return lines
