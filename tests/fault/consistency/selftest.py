"""The checker checked: histories known to be linearizable and known not to be, feeds with
known faults, and the outcome table. Fast (no server), run by `consistency_test.py
--self-test` (ctest consistency_selftest).
"""

import random
import time

from . import feed_check, model, outcomes, wgl
from .model import FAILED, INF, OK, UNKNOWN, Op

GPU0, CPU0, GPU1 = 0, 1, 2  # copy indices: i0/GPU, i0/CPU, i1/GPU


class H:
    """A hand-written history of one key: H().store(GPU0, 0, 1).read({GPU0}, 2, 3) ..."""

    def __init__(self):
        self.ops = []

    def _add(self, kind, call, ret, outcome, copy=None, observed=None):
        op = Op(len(self.ops), 0, "rest", kind, 0, copy, f"L{len(self.ops)}", call)
        op.ret = INF if outcome == UNKNOWN else ret
        op.outcome, op.observed = outcome, observed
        self.ops.append(op)
        return self

    def store(self, copy, call, ret, outcome=OK):
        return self._add("store", call, ret, outcome, copy=copy)

    def remove(self, copy, call, ret, outcome=OK):
        return self._add("remove", call, ret, outcome, copy=copy)

    def read(self, held, call, ret):
        mask = 0
        for c in held:
            mask |= 1 << c
        return self._add("read", call, ret, OK, observed=mask)

    def linearizable(self):
        results = wgl.check_history(self.ops)
        assert all(not r.undecided for r in results), [r.report for r in results]
        return all(r.ok for r in results), "\n".join(r.report for r in results if r.report)


GOOD = {
    "sequential store then read": H().store(GPU0, 0, 1).read({GPU0}, 2, 3),
    "read concurrent with a store may miss it": H().store(GPU0, 0, 10).read(set(), 1, 2),
    "read concurrent with a store may see it": H().store(GPU0, 0, 10).read({GPU0}, 1, 2),
    "add, add, remove still holds the block":
        H().store(GPU0, 0, 1).store(GPU0, 2, 3).remove(GPU0, 4, 5).read({GPU0}, 6, 7),
    "add, remove, remove: gone": H().store(GPU0, 0, 1).remove(GPU0, 2, 3).remove(GPU0, 4, 5)
        .read(set(), 6, 7),
    "removing an unheld copy is a no-op":
        H().remove(GPU0, 0, 1).store(GPU0, 2, 3).read({GPU0}, 4, 5),
    "copies are per holder and tier":
        H().store(GPU0, 0, 1).store(CPU0, 2, 3).remove(GPU0, 4, 5).read({CPU0}, 6, 7),
    "an unknown write may take effect later": H().store(GPU0, 0, 0, UNKNOWN)
        .read(set(), 1, 2).read({GPU0}, 3, 4),
    "an unknown write may never take effect": H().store(GPU0, 0, 0, UNKNOWN)
        .read(set(), 1, 2).read(set(), 30, 31),
    "a failed write is left out": H().store(GPU0, 0, 1, FAILED).read(set(), 2, 3),
    "concurrent writes in either order": H().store(GPU0, 0, 10).remove(GPU0, 1, 9)
        .read(set(), 11, 12),
    "two unknown stores, one remove, seen held then not": H().store(GPU0, 0, 0, UNKNOWN)
        .store(GPU0, 1, 0, UNKNOWN).read({GPU0}, 2, 3).remove(GPU0, 4, 5).read(set(), 6, 7),
}

BAD = {
    "stale read after an acknowledged write": H().store(GPU0, 0, 1).read(set(), 2, 3),
    "lost write: seen, then gone without a remove":
        H().store(GPU0, 0, 1).read({GPU0}, 2, 3).read(set(), 4, 5),
    "a read sees a write before its invocation": H().read({GPU0}, 0, 1).store(GPU0, 2, 3),
    "add, remove, remove still seen": H().store(GPU0, 0, 1).remove(GPU0, 2, 3)
        .remove(GPU0, 4, 5).read({GPU0}, 6, 7),
    "add, add, remove seen gone": H().store(GPU0, 0, 1).store(GPU0, 2, 3).remove(GPU0, 4, 5)
        .read(set(), 6, 7),
    "an unknown write takes effect at most once": H().store(GPU0, 0, 0, UNKNOWN)
        .read({GPU0}, 1, 2).read(set(), 3, 4),
    "a failed write must not be seen": H().store(GPU0, 0, 1, FAILED).read({GPU0}, 2, 3),
    "reads disagree on the order of two writes": H().store(GPU0, 0, 10).store(GPU1, 0, 10)
        .read({GPU0}, 1, 9).read({GPU1}, 1, 9),
    "an unheld remove must not cancel a later store":
        H().remove(GPU0, 0, 1).store(GPU0, 2, 3).read(set(), 4, 5),
}


def random_history(rng, n_ops, clients, unknown_rate=0.0):
    """A history produced by a linearizable object: each op takes effect at a random instant
    inside its interval, applied in that order to the model; reads report what they saw."""
    ops, events = [], []
    free_at = [0.0] * clients
    for i in range(n_ops):
        c = rng.randrange(clients)
        call = free_at[c] + rng.random()
        ret = call + rng.random() * 3
        free_at[c] = ret
        kind = rng.choice(("store", "store", "remove", "read", "read"))
        op = Op(i, c, "rest", kind, 0, rng.randrange(len(model.COPIES)) if kind != "read"
                else None, f"L{i}", call)
        op.ret, op.outcome = ret, OK
        ops.append(op)
        events.append((rng.uniform(call, ret), op))
    state = model.initial_state()
    for _, op in sorted(events, key=lambda e: e[0]):
        if op.kind == "read":
            op.observed = model.held_mask(state)
        else:
            _, state = model.step(state, op)
    for op in ops:
        if op.kind != "read" and rng.random() < unknown_rate:
            op.outcome, op.ret = UNKNOWN, INF  # its effect happened: allowed
    return ops


def test_known_histories():
    for name, h in GOOD.items():
        ok, report = h.linearizable()
        assert ok, f"linearizable history '{name}' rejected:\n{report}"
    for name, h in BAD.items():
        ok, report = h.linearizable()
        assert not ok, f"non-linearizable history '{name}' accepted"
        assert "NOT linearizable" in report and "overlapping it" in report, report
    return len(GOOD) + len(BAD)


def test_random_histories():
    rng = random.Random(7)
    caught = 0
    for trial in range(30):
        ops = random_history(rng, 200, 6, unknown_rate=0.03 if trial % 2 else 0.0)
        results = wgl.check_history(ops)
        assert all(r.ok for r in results), "\n".join(r.report for r in results)
        # Flip what one read saw: a history that stays linearizable only by chance.
        reads = [o for o in ops if o.kind == "read"]
        victim = rng.choice(reads)
        victim.observed ^= 1 << rng.randrange(len(model.COPIES))
        if not all(r.ok for r in wgl.check_history(ops)):
            caught += 1
    assert caught >= 15, f"only {caught} of 30 corrupted histories were caught"
    return caught


def test_many_unknowns_stay_fast():
    """30 unknown stores on one copy, then reads that need exactly 3 of them, and a history
    with a read no subset of them explains: the symmetry reduction decides both in a few
    thousand steps instead of 2^30 subsets."""
    h = H()
    for i in range(30):
        h.store(GPU0, i * 0.01, 0, UNKNOWN)
    h.read({GPU0}, 1, 2).remove(GPU0, 3, 4).remove(GPU0, 5, 6).remove(GPU0, 7, 8)
    h.read(set(), 9, 10)
    bad = H()
    for i in range(30):
        bad.store(GPU0, i * 0.01, 0, UNKNOWN)
    bad.read({GPU1}, 1, 2)
    started = time.monotonic()
    results = wgl.check_history(h.ops, budget=200_000)
    assert results[0].ok, results[0].report
    results = wgl.check_history(bad.ops, budget=200_000)
    assert not results[0].ok and not results[0].undecided, results[0].report
    return time.monotonic() - started


def run():
    started = time.monotonic()
    n = test_known_histories()
    caught = test_random_histories()
    fast = test_many_unknowns_stay_fast()
    m = feed_check.self_test()
    k = outcomes.self_test()
    print(f"PASS self-test: {n} known histories ({len(GOOD)} linearizable, {len(BAD)} not) "
          f"judged right; 30 random linearizable histories accepted and {caught} of 30 with "
          f"one read corrupted caught; 30 unknown writes decided in {fast * 1000:.0f} ms; "
          f"{m} feed cases; {k} outcome rules ({time.monotonic() - started:.1f}s)", flush=True)
    return 0
