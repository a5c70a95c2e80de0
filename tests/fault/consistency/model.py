"""The history's vocabulary: operations, their outcomes, and the model of one block key.

An operation is one client call on one block key of the test's context:

  store   a `stored` event: holder H now has one more copy of the block in tier T
  remove  a `removed` event: one copy fewer (a no-op when H holds none in T)
  read    a lookup with "consistency": "linearizable" that observes which (H, T) hold it
  sread   a session read: consistency "any" with `min_revision` = the newest revision this
          client has seen (read your writes; checked against the feed, not by the search)

The model is the index's own (server/index/index.cc ApplyStore/ApplyRemove): per key, one
reference count per copy (holder, tier). A store adds a reference, a remove takes one away
and removing an unheld copy changes nothing (the server counts it in `unheld_removes`). A
lookup of a one-block prompt shows, per instance and medium, whether the block is held there
(docs/api.md `media`), so a read observes the set of copies with a non-zero count.
"""

import json
import math

OK, FAILED, UNKNOWN = "ok", "failed", "unknown"
WRITES = ("store", "remove")
INF = math.inf

# The copies of every key: holders × tiers. Small on purpose: reads then see conflicts.
HOLDERS = ("i0", "i1")
TIERS = ("GPU", "CPU")
COPIES = tuple((h, t) for h in HOLDERS for t in TIERS)


class Op:
    """One call. Times are seconds since the run started (time.monotonic based); `ret` is
    INF for an operation whose outcome is unknown (it may take effect at any time after
    `call`, or never)."""

    __slots__ = ("id", "client", "transport", "kind", "key", "copy", "location", "call",
                 "ret", "outcome", "revision", "attempts", "server", "observed", "detail",
                 "min_revision", "exactly_once")

    def __init__(self, id, client, transport, kind, key, copy=None, location=None, call=0.0):
        self.id, self.client, self.transport, self.kind = id, client, transport, kind
        self.key, self.copy, self.location, self.call = key, copy, location, call
        self.ret = INF
        self.outcome = UNKNOWN
        self.revision = None    # the answer's revision (writes: where it was applied)
        self.attempts = 1       # sends of the same batch (exactly-once writers resend)
        self.server = None      # REST: the server asked; binary: the client's first endpoint
        self.observed = None    # reads: bitmask of COPIES observed holding the key
        self.detail = ""        # the answer or error that decided the outcome
        self.min_revision = None
        self.exactly_once = False  # a write with (writer_id, writer_sequence), resent

    def to_json(self):
        d = {s: getattr(self, s) for s in self.__slots__}
        if d["ret"] == INF:
            d["ret"] = None
        return d

    @staticmethod
    def from_json(d):
        op = Op(d["id"], d["client"], d["transport"], d["kind"], d["key"], d["copy"],
                d["location"], d["call"])
        for s in Op.__slots__:
            setattr(op, s, d.get(s))
        if op.ret is None:
            op.ret = INF
        return op

    def describe(self):
        """One readable line: what was asked and what came back."""
        what = self.kind
        if self.kind in WRITES:
            h, t = COPIES[self.copy]
            what += f" {h}/{t}"
        elif self.observed is not None:
            what += " -> " + show_mask(self.observed)
        ret = "  ?   " if self.ret == INF else f"{self.ret * 1000:9.1f}"
        rev = "" if self.revision is None else f" rev {self.revision}"
        tries = f" ({self.attempts} sends)" if self.attempts > 1 else ""
        return (f"#{self.id:<6} c{self.client} {self.transport:<4} {self.call * 1000:9.1f} .. "
                f"{ret} ms  {what:<28} {self.outcome}{rev}{tries}  {self.detail[:90]}")


def show_mask(mask):
    held = [f"{h}/{t}" for i, (h, t) in enumerate(COPIES) if mask >> i & 1]
    return "{" + ",".join(held) + "}"


def show_state(state):
    return "{" + ", ".join(f"{h}/{t}:{n}" for (h, t), n in zip(COPIES, state) if n) + "}"


def initial_state():
    return (0,) * len(COPIES)


def held_mask(state):
    mask = 0
    for i, n in enumerate(state):
        if n:
            mask |= 1 << i
    return mask


def step(state, op):
    """(ok, next state) of `op` applied to `state` (a tuple of reference counts)."""
    if op.kind == "store":
        s = list(state)
        s[op.copy] += 1
        return True, tuple(s)
    if op.kind == "remove":
        if state[op.copy] == 0:
            return True, state  # an unheld remove is a no-op
        s = list(state)
        s[op.copy] -= 1
        return True, tuple(s)
    return held_mask(state) == op.observed, state


def save_history(path, meta, ops, feeds, faults):
    with open(path, "w") as f:
        json.dump({"meta": meta, "ops": [op.to_json() for op in ops], "feeds": feeds,
                   "faults": faults}, f)


def load_history(path):
    with open(path) as f:
        d = json.load(f)
    return d["meta"], [Op.from_json(o) for o in d["ops"]], d.get("feeds", {}), d.get(
        "faults", [])
