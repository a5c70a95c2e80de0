"""The change feed against the history (docs/feed.md): every server's `GET /v1/watch`,
followed for the whole run, must be the same sequence of records, in revision order, and
account for every write exactly once.

Every store of the workload carries a location of its own (`chk:<op id>`), and the server
reports every store of a copy that has a location as a `stored` record with it (docs/feed.md
§Records), so stores are visible one for one: an acknowledged store appears exactly once on
every server, at the revision it was acknowledged with; a store answered as failed never
appears; one of unknown outcome at most once. A remove is reported only when it takes the
copy's last reference (`removed`); the reference counts are replayed per copy from the
stores the feed shows and the removes of the history (an acknowledged remove at its
revision, an unknown one anywhere or never) and every `removed` record must be explained.
Reads are checked against the state the feed gives at the revision they answered with.
"""

import bisect
import http.client
import json
import re
import threading
import time

from . import model
from .model import FAILED, INF, OK, UNKNOWN

OLDEST = re.compile(r"oldest revision to watch from is (\d+)")


class Segment:
    """Records of one watch stream: revisions after `start`, whole up to `last`."""

    def __init__(self, start):
        self.start, self.last, self.records = start, start, []

    def to_json(self):
        return {"start": self.start, "last": self.last, "records": self.records}


class Watcher(threading.Thread):
    """Follows one server's feed (`GET /v1/watch`, filtered to the test's context) from
    revision `start`, resuming after every break where it stopped; a resume the server
    cannot serve (`410 compacted`: it restarted with a newer window) starts a new segment
    at the oldest revision it has. `node.base` is read at every (re)connection."""

    def __init__(self, node, start, params, log):
        super().__init__(daemon=True)
        self.node, self.params, self.log = node, params, log
        self.segments = [Segment(start)]
        self.stop_at = None            # stop once `last` reaches this revision
        self.stopping = threading.Event()
        self.reconnects = 0
        self.lock = threading.Lock()

    @property
    def last(self):
        with self.lock:
            return self.segments[-1].last

    def run(self):
        while not self.stopping.is_set():
            if self.stop_at is not None and self.last >= self.stop_at:
                return
            try:
                self.follow()
            except (OSError, http.client.HTTPException, ValueError):
                pass
            self.reconnects += 1
            self.stopping.wait(0.2)

    def follow(self):
        host, port = self.node.base.split("//")[1].rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=4)
        try:
            conn.request("GET", f"/v1/watch?from={self.last}&{self.params}")
            resp = conn.getresponse()
            if resp.status == 410:
                m = OLDEST.search(resp.read().decode(errors="replace"))
                if m:
                    with self.lock:
                        self.segments.append(Segment(int(m.group(1))))
                    self.log(f"feed of server {self.node.id}: compacted, gap up to "
                             f"revision {m.group(1)}")
                return
            if resp.status != 200:
                resp.read()
                return  # e.g. 400 `from` in the future: a restarted server catching up
            pending, event = [], {}
            while not self.stopping.is_set():
                line = resp.fp.readline()
                if not line:
                    return
                line = line.decode().rstrip("\r\n")
                if self.stop_at is not None and self.last >= self.stop_at:
                    return
                if line.startswith(":"):
                    continue
                if line:
                    name, _, value = line.partition(":")
                    event[name] = value.lstrip(" ")
                    continue
                if event.get("event") == "error":
                    return
                if "data" in event:
                    pending.append(json.loads(event["data"]))
                if "id" in event:
                    whole = int(event["id"])
                    with self.lock:
                        seg = self.segments[-1]
                        seg.records += [r for r in pending if r["revision"] <= whole]
                        seg.last = max(seg.last, whole)
                    pending = [r for r in pending if r["revision"] > whole]
                    if self.stop_at is not None and whole >= self.stop_at:
                        return
                event = {}
        finally:
            conn.close()

    def result(self):
        with self.lock:
            return [s.to_json() for s in self.segments]


class Feeds:
    """The feeds of all servers: coverage, agreement, and the merged sequence."""

    def __init__(self, feeds):
        self.feeds = {int(k): v for k, v in feeds.items()}   # server -> [segment dicts]
        self.problems = []
        self.by_rev = {}      # server -> revision -> [record]
        for server, segs in self.feeds.items():
            revs = self.by_rev.setdefault(server, {})
            for seg in segs:
                prev = seg["start"]
                for r in seg["records"]:
                    rev = r["revision"]
                    if rev < prev or rev <= seg["start"] or rev > seg["last"]:
                        self.problems.append(
                            f"server {server}: feed record at revision {rev} out of order "
                            f"(after {prev}, segment ({seg['start']}, {seg['last']}])")
                    if rev != prev and rev in revs:
                        self.problems.append(f"server {server}: revision {rev} delivered twice")
                    revs.setdefault(rev, []).append(r)
                    prev = rev

    def covers(self, server, rev):
        return any(s["start"] < rev <= s["last"] for s in self.feeds[server])

    def covered_range(self, server, lo, hi):
        """Whether the server's feed covers every revision in (lo, hi]."""
        for s in sorted(self.feeds[server], key=lambda s: s["start"]):
            if s["start"] <= lo < s["last"]:
                lo = s["last"]
        return lo >= hi

    def records_at(self, rev):
        """The records of `rev` from some server covering it, or None if none does."""
        for server in self.feeds:
            if self.covers(server, rev):
                return self.by_rev[server].get(rev, [])
        return None

    def check_agreement(self):
        revs = sorted({r for revs in self.by_rev.values() for r in revs})
        compared = 0
        for rev in revs:
            seen = {}
            for server in self.feeds:
                if self.covers(server, rev):
                    seen[server] = [json.dumps(r, sort_keys=True)
                                    for r in self.by_rev[server].get(rev, [])]
            if len(set(map(tuple, seen.values()))) > 1:
                self.problems.append(f"servers disagree on the records of revision {rev}: " +
                                     "; ".join(f"server {s}: {v}" for s, v in seen.items()))
            compared += len(seen) > 1
        return compared

    def merged(self, start, end):
        """[(rev, records)] for every revision in (start, end] with records, and the first
        revision no server covers (None when the range is whole)."""
        out, gap = [], None
        covered = [(s["start"], s["last"]) for segs in self.feeds.values() for s in segs]
        lo = start
        for a, b in sorted(covered):
            if a <= lo < b:
                lo = b
        if lo < end:
            gap = lo + 1
        revs = sorted({r for revs in self.by_rev.values() for r in revs if start < r <= end})
        for rev in revs:
            if gap is not None and rev >= gap:
                break
            out.append((rev, self.records_at(rev)))
        return out, gap


def copy_of(record, keys):
    """(key index, copy index) pairs a record is about (keys outside the test: skipped)."""
    tier = record.get("medium")
    try:
        c = model.COPIES.index((record["backend_id"], tier))
    except ValueError:
        return []
    return [(keys.index(k), c) for k in record["keys"] if k in keys]


def check(ops, feeds_json, keys, start, end, final_counts=None, log=print):
    """Problems found (a list of strings) and figures, comparing the history `ops` with the
    servers' feeds over revisions (start, end]."""
    feeds = Feeds(feeds_json)
    figures = {"compared_revisions": feeds.check_agreement()}
    stores = {o.location: o for o in ops if o.kind == "store"}
    # 1. Stores, one for one, on every server.
    for server, revs in feeds.by_rev.items():
        seen = {}
        for rev, records in revs.items():
            for r in records:
                if r["op"] != "stored":
                    continue
                for loc in r.get("locations", []):
                    op = stores.get(loc)
                    if op is None:
                        if loc.startswith("chk:"):
                            feeds.problems.append(f"server {server}: revision {rev} stores "
                                                  f"{loc}, which no client wrote")
                        continue
                    if loc in seen:
                        feeds.problems.append(f"server {server}: store {op.id} applied twice "
                                              f"(revisions {seen[loc]} and {rev})")
                    seen[loc] = rev
                    if op.outcome == FAILED:
                        feeds.problems.append(f"server {server}: store {op.id}, answered as "
                                              f"failed ({op.detail}), applied at {rev}")
                    elif op.outcome == OK and (rev > op.revision or (
                            op.attempts == 1 and rev != op.revision)):
                        feeds.problems.append(f"server {server}: store {op.id} acknowledged "
                                              f"at revision {op.revision} appears at {rev}")
        checked = 0
        for op in stores.values():
            if op.outcome != OK:
                continue
            lo = op.revision - 1 if op.attempts == 1 else start
            if not feeds.covered_range(server, lo, op.revision):
                continue
            checked += 1
            if op.location not in seen:
                feeds.problems.append(f"server {server}: acknowledged store {op.id} (revision "
                                      f"{op.revision}) is missing from its feed")
        figures[f"stores_checked_server_{server}"] = checked
    # 2. Reference counts replayed per copy; removed records explained.
    merged, gap = feeds.merged(start, end)
    if gap is not None:
        feeds.problems.append(f"no server's feed covers revision {gap}: the replay stops there")
    counts, skipped = replay(ops, merged, keys, start, feeds.problems)
    figures["copies_replayed"] = len(counts)
    figures["copies_not_replayed"] = skipped
    if final_counts is not None and gap is None:
        for kc, possible in counts.items():
            if final_counts.get(kc, 0) not in possible:
                feeds.problems.append(
                    f"key {kc[0]} copy {model.COPIES[kc[1]]}: the servers end with "
                    f"{final_counts.get(kc, 0)} references, the history allows {sorted(possible)}")
    # 3. Reads against the state the feed gives at their revision.
    figures["reads_checked"] = check_reads(ops, merged, gap, keys, feeds.problems)
    return feeds.problems, figures


def replay(ops, merged, keys, start, problems, max_windowed=12):
    """Per (key, copy), the reference counts the history allows at the end, replaying the
    feed's stores and removals with the history's removes. Returns ({(key, copy): {counts}},
    copies skipped because too many resent removes have only a revision window).

    A state is (count, unknown removes used, bitmask of resent removes used): unknown
    removes of one copy are interchangeable (any revision, or never), so only their number
    matters; a resent acknowledged remove took effect once at or before its answer."""
    exact, unknown, windowed = {}, {}, {}
    for o in ops:
        if o.kind != "remove" or o.outcome == FAILED:
            continue
        kc = (o.key, o.copy)
        if o.outcome == OK and o.attempts == 1:
            exact.setdefault(kc, {}).setdefault(o.revision, 0)
            exact[kc][o.revision] += 1
        elif o.outcome == OK:
            windowed.setdefault(kc, []).append(o.revision)
        else:
            unknown[kc] = unknown.get(kc, 0) + 1
    events = {}
    for rev, records in merged:
        for r in records:
            for kc in copy_of(r, keys):
                if r["op"] in ("stored", "removed"):
                    events.setdefault(kc, {}).setdefault(rev, []).append(r["op"])
    result, skipped = {}, 0
    for kc in set(events) | set(exact) | set(unknown) | set(windowed):
        his = windowed.get(kc, [])
        if len(his) > max_windowed:
            skipped += 1
            continue
        removes = Removes(unknown.get(kc, 0), start, his)
        revs = sorted(set(events.get(kc, {})) | set(exact.get(kc, {})))
        states = {(0, 0, 0)}
        prev = start
        for rev in revs + [INF]:
            states = removes.between(states, prev, rev)
            if rev == INF:
                break
            states = removes.at(states, events.get(kc, {}).get(rev, []),
                                exact.get(kc, {}).get(rev, 0), rev)
            if not states:
                problems.append(f"key {kc[0]} copy {model.COPIES[kc[1]]}: the feed's records "
                                f"at revision {rev} ({events.get(kc, {}).get(rev, [])}) cannot "
                                f"follow from the history's writes")
                break
            prev = rev
        must = (1 << len(his)) - 1
        final = {n for n, _, mask in states if mask == must}
        if states and not final:
            problems.append(f"key {kc[0]} copy {model.COPIES[kc[1]]}: an acknowledged remove "
                            f"never took effect")
        result[kc] = final
    return result, skipped


class Removes:
    """The removes of one copy whose revision is not known: `unknown` ones (at any
    revision after `start`, or never) and resent acknowledged ones (once, after `start`
    and at or before the revision of their answer, `his`)."""

    def __init__(self, unknown, start, his):
        self.unknown, self.start, self.his = unknown, start, his

    @staticmethod
    def fewest(states):
        """Of states that differ only in unknown removes used, the one that used fewest:
        it can do whatever the others can (they are interchangeable, and optional)."""
        best = {}
        for n, k, mask in states:
            if best.get((n, mask), k + 1) > k:
                best[(n, mask)] = k
        return {(n, k, mask) for (n, mask), k in best.items()}

    def steps(self, state, lo, hi):
        """States after one more remove applied at a revision in [lo, hi], with the
        count unchanged (the caller applies it): (k, mask) pairs."""
        _, k, mask = state
        out = [(k + 1, mask)] if k < self.unknown else []
        out += [(k, mask | 1 << i) for i, h in enumerate(self.his)
                if not mask >> i & 1 and max(lo, self.start + 1) <= min(hi, h)]
        return out

    def between(self, states, a, b):
        """Removes applied silently in revisions strictly between a and b: only where
        they report nothing (count 0: a no-op; count 2 or more: one less)."""
        todo, out = list(states), set(states)
        while todo:
            s = todo.pop()
            if s[0] == 1:
                continue
            for k, mask in self.steps(s, a + 1, b - 1):
                t = (max(s[0] - 1, 0), k, mask)
                if t not in out:
                    out.add(t)
                    todo.append(t)
        return self.fewest(out)

    def at(self, states, records, n_exact, rev):
        """The records of one revision for one copy, in order, interleaved with the removes
        applied at it: `n_exact` acknowledged there, and removes of unknown revision."""
        todo = [(s, 0, 0) for s in states]
        seen = set(todo)
        out = set()
        while todo:
            s, r, e = todo.pop()
            n = s[0]
            if r == len(records) and e == n_exact:
                out.add(s)
            nxt = []
            if r < len(records) and records[r] == "stored":
                nxt.append(((n + 1, s[1], s[2]), r + 1, e))
            removers = [(s[1], s[2], e + 1)] if e < n_exact else []
            removers += [(k, mask, e) for k, mask in self.steps(s, rev, rev)]
            for k, mask, ee in removers:
                if r < len(records) and records[r] == "removed" and n == 1:
                    nxt.append(((0, k, mask), r + 1, ee))
                if n != 1:  # a remove that reports nothing
                    nxt.append(((max(n - 1, 0), k, mask), r, ee))
            for t in nxt:
                if t not in seen:
                    seen.add(t)
                    todo.append(t)
        return self.fewest(out)


def check_reads(ops, merged, gap, keys, problems):
    """Every successful read shows exactly the copies the feed holds at the read's revision
    (docs/api.md §Conventions: a read reflects every write up to its revision and none
    after); a session read answers at or after its min_revision."""
    history = []   # (revision, {key: mask} after it)
    held = {}      # (key, copy) -> present
    masks = {}
    for rev, records in merged:
        for r in records:
            for k, c in copy_of(r, keys):
                held[(k, c)] = r["op"] == "stored"
                masks[k] = sum(1 << cc for (kk, cc), h in held.items() if h and kk == k)
        history.append((rev, dict(masks)))
    revs = [rev for rev, _ in history]
    checked = 0
    for o in ops:
        if o.kind not in ("read", "sread") or o.outcome != OK:
            continue
        if o.kind == "sread" and o.min_revision is not None and o.revision < o.min_revision:
            problems.append(f"session read {o.id} (client {o.client}, {o.transport}, server "
                            f"{o.server}) asked min_revision {o.min_revision} and was answered "
                            f"at revision {o.revision}: it went back")
        if o.revision is None or (gap is not None and o.revision >= gap):
            continue  # the Conductor dialect answers without a revision
        i = bisect.bisect_right(revs, o.revision) - 1
        want = history[i][1].get(o.key, 0) if i >= 0 else 0
        checked += 1
        if o.observed != want:
            later = history[i + 1] if i + 1 < len(history) else None
            problems.append(f"{o.kind} {o.id} (client {o.client}, {o.transport}, server "
                            f"{o.server}) at revision {o.revision} saw key {o.key} held by "
                            f"{model.show_mask(o.observed)}; the feed has "
                            f"{model.show_mask(want)} there" +
                            (f" ({model.show_mask(later[1].get(o.key, 0))} at revision "
                             f"{later[0]})" if later else ""))
    return checked


def self_test():
    """Feeds with known faults, each caught; a clean one accepted."""
    keys = [101]

    def store(i, rev, outcome=OK, attempts=1):
        o = model.Op(i, 0, "rest", "store", 0, 0, f"chk:{i}", 0.0)
        o.outcome, o.revision, o.attempts = outcome, rev, attempts
        return o

    def remove(i, rev, outcome=OK):
        o = model.Op(i, 0, "rest", "remove", 0, 0, None, 0.0)
        o.outcome, o.revision = outcome, rev
        return o

    def rec(rev, op, loc=None):
        r = {"revision": rev, "op": op, "backend_id": "i0", "medium": "GPU", "keys": [101]}
        if loc:
            r["locations"] = [loc]
        return r

    def feeds(*records, last=10):
        seg = {"start": 0, "last": last, "records": list(records)}
        return {1: [seg], 2: [dict(seg)]}

    good_ops = [store(1, 2), store(2, 3), remove(3, 4), remove(4, 5), remove(5, None, UNKNOWN)]
    good = feeds(rec(2, "stored", "chk:1"), rec(3, "stored", "chk:2"), rec(5, "removed"))
    problems, _ = check(good_ops, good, keys, 0, 10, final_counts={(0, 0): 0})
    assert not problems, problems
    cases = {
        "an acknowledged store missing": (good_ops, feeds(rec(3, "stored", "chk:2"),
                                                          rec(5, "removed"))),
        "a store applied twice": (good_ops, feeds(
            rec(2, "stored", "chk:1"), rec(3, "stored", "chk:2"), rec(4, "stored", "chk:2"),
            rec(5, "removed"))),
        "a store at another revision": (good_ops, feeds(
            rec(2, "stored", "chk:1"), rec(4, "stored", "chk:2"), rec(5, "removed"))),
        "a failed store applied": ([store(1, 2), store(2, None, FAILED)], feeds(
            rec(2, "stored", "chk:1"), rec(3, "stored", "chk:2"))),
        "a removal no remove explains": ([store(1, 2), store(2, 3), remove(3, 4)], feeds(
            rec(2, "stored", "chk:1"), rec(3, "stored", "chk:2"), rec(4, "removed"))),
        "records out of revision order": (good_ops, feeds(
            rec(3, "stored", "chk:2"), rec(2, "stored", "chk:1"), rec(5, "removed"))),
    }
    for name, (ops, fd) in cases.items():
        problems, _ = check(ops, fd, keys, 0, 10)
        assert problems, f"feed fault '{name}' not caught"
    # Replicas that disagree.
    fd = feeds(rec(2, "stored", "chk:1"), rec(3, "stored", "chk:2"), rec(5, "removed"))
    fd[2][0]["records"] = fd[2][0]["records"][:2]
    problems, _ = check(good_ops, fd, keys, 0, 10)
    assert any("disagree" in p for p in problems), problems
    # A read that saw what the feed did not have at its revision, and one that went back.
    # (Key 101 held by copy 1 never happens.)
    read = model.Op(9, 0, "rest", "sread", 0, None, None, 0.0)
    read.outcome, read.revision, read.observed, read.min_revision = OK, 4, 2, 5
    problems, _ = check(good_ops + [read], good, keys, 0, 10)
    assert any("went back" in p for p in problems) and any("the feed has" in p
                                                           for p in problems), problems
    # A read that already shows the next revision's change: copy 0 gone at revision 4, which
    # the removal of revision 5 takes away.
    read = model.Op(9, 0, "rest", "read", 0, None, None, 0.0)
    read.outcome, read.revision, read.observed = OK, 4, 0
    problems, _ = check(good_ops + [read], good, keys, 0, 10)
    assert any("the feed has" in p for p in problems), problems
    return len(cases) + 4
