"""Linearizability of a history: the Wing–Gong–Lowe search, one block key at a time.

Keys are independent objects (P-compositionality: a history is linearizable iff each key's
sub-history is), so each key is searched alone. The search (Wing & Gong 1993, with Lowe's
2017 memoization) walks the history's events in time order, keeping a partial linearization:
at each point the candidates are the operations invoked before the earliest return of an
operation not yet linearized; it linearizes one whose model step accepts it and goes on, and
backtracks when none is left. A configuration (set of linearized operations, model state)
already explored is not explored again (Lowe's cache), which makes the search polynomial on
histories of bounded concurrency.

Unknown outcomes (a write whose answer never came: timeout, reset, 503/504 ...) have no
return event: they may be linearized at any point after their call, or never. Two unknown
writes of the same kind on the same copy are interchangeable, so only the earliest-invoked
one of each such class is a candidate (a symmetry reduction that keeps many unknown writes
from multiplying the search); completed operations are tried before unknown ones.

The cache keys on a 128-bit Zobrist hash of the linearized set (an exact set would cost
O(n) bits per entry) plus the exact model state; a collision could only make the search
miss a linearization (a false violation), with probability ~2^-128 per pair.
"""

import random
import time

from . import model
from .model import INF


class Result:
    def __init__(self, key, ok, ops, steps, seconds, undecided=False, report=""):
        self.key, self.ok, self.ops, self.steps = key, ok, ops, steps
        self.seconds, self.undecided, self.report = seconds, undecided, report


def check_key(key, ops, budget=20_000_000):
    """Searches one key's sub-history (completed writes and reads, unknown writes; failed
    operations and unknown reads left out by the caller). Result.ok is True when a
    linearization exists; Result.undecided when the search ran out of `budget` steps."""
    started = time.monotonic()
    ops = sorted(ops, key=lambda o: (o.call, o.id))
    n = len(ops)
    # Events: 2i = call of op i, 2i+1 = its return (absent for unknown outcomes). Calls sort
    # before returns at equal times, which treats such operations as concurrent (lenient).
    events = [(o.call, 0, 2 * i) for i, o in enumerate(ops)]
    events += [(o.ret, 1, 2 * i + 1) for i, o in enumerate(ops) if o.ret != INF]
    events.sort()
    head, NIL = -1, -2
    nxt, prv = {head: NIL}, {}
    last = head
    for _, _, e in events:
        nxt[last], prv[e] = e, last
        last = e
    nxt[last] = NIL

    def unlink(e):
        p, q = prv[e], nxt[e]
        nxt[p] = q
        if q != NIL:
            prv[q] = p

    def relink(e):
        p, q = prv[e], nxt[e]
        nxt[p] = e
        if q != NIL:
            prv[q] = e

    unknown = [o.ret == INF for o in ops]
    cls = [(o.kind, o.copy) for o in ops]
    rng = random.Random(key * 7919 + n)
    zobrist = [rng.getrandbits(128) for _ in range(n)]

    def candidates():
        """(candidate op indices, the op of the first return event or None when none is
        left)."""
        known, unknowns, seen = [], [], set()
        e = nxt[head]
        while e != NIL and e % 2 == 0:
            i = e // 2
            if not unknown[i]:
                known.append(i)
            elif cls[i] not in seen:
                seen.add(cls[i])
                unknowns.append(i)
            e = nxt[e]
        return known + unknowns, (None if e == NIL else e // 2)

    state, lin_hash, lin_done = model.initial_state(), 0, 0
    visited = {(0, state)}
    # (op linearized, state before it, candidates there, next one to try, first return there)
    stack = []
    cands, first_return = candidates()
    idx = 0
    steps = 0
    best = (-1, None)  # (completed ops linearized, snapshot for the report)
    while True:
        if first_return is None:
            return Result(key, True, n, steps, time.monotonic() - started)
        if lin_done > best[0]:
            best = (lin_done, (state, [f[0] for f in stack[-8:]], first_return))
        advanced = False
        while idx < len(cands):
            i = cands[idx]
            idx += 1
            steps += 1
            ok, new_state = model.step(state, ops[i])
            if not ok:
                continue
            h = lin_hash ^ zobrist[i]
            if (h, new_state) in visited:
                continue
            visited.add((h, new_state))
            stack.append((i, state, cands, idx, first_return))
            unlink(2 * i)
            if not unknown[i]:
                unlink(2 * i + 1)
                lin_done += 1
            state, lin_hash = new_state, h
            cands, first_return = candidates()
            idx = 0
            advanced = True
            break
        if advanced:
            continue
        if steps > budget:
            return Result(key, False, n, steps, time.monotonic() - started, undecided=True,
                          report=f"key {key}: search budget of {budget} steps exhausted "
                                 f"({n} operations); the verdict is unknown")
        if not stack:
            return Result(key, False, n, steps, time.monotonic() - started,
                          report=explain(key, ops, best[1]))
        i, state, cands, idx, first_return = stack.pop()
        if not unknown[i]:
            relink(2 * i + 1)
            lin_done -= 1
        relink(2 * i)
        lin_hash ^= zobrist[i]


def explain(key, ops, snapshot):
    """The violation, readably: the longest partial linearization found, the operation that
    could not be placed after it, and every operation of the key overlapping that one."""
    state, tail, first_return = snapshot
    # The operation whose return the search could not pass: the earliest-returning one not
    # linearized (it must be linearized before it returned).
    stuck = ops[first_return]
    lo, hi = stuck.call, stuck.ret
    window = [o for o in ops if o.call <= hi and o.ret >= lo]
    lines = [f"key {key}: NOT linearizable ({len(ops)} operations on this key).",
             f"  Longest linearization found ends with (state after it: "
             f"{model.show_state(state)}):"]
    lines += ["    " + ops[i].describe() for i in tail] or ["    (nothing)"]
    lines.append("  then no order places this operation before it returned:")
    lines.append("    " + stuck.describe())
    lines.append(f"  every operation of the key overlapping it ({len(window)}; times in ms "
                 f"since the start, '?' = unknown outcome):")
    lines += ["    " + o.describe() for o in window[:40]]
    if len(window) > 40:
        lines.append(f"    ... {len(window) - 40} more")
    return "\n".join(lines)


def check_history(ops, budget=20_000_000):
    """Results per key of the linearizable part of `ops`: reads that succeeded, and writes
    that succeeded or whose outcome is unknown."""
    by_key = {}
    for o in ops:
        if o.kind == "read" and o.outcome == model.OK:
            by_key.setdefault(o.key, []).append(o)
        elif o.kind in model.WRITES and o.outcome != model.FAILED:
            by_key.setdefault(o.key, []).append(o)
    return [check_key(k, by_key[k], budget) for k in sorted(by_key)]
