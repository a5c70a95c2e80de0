"""The soak's end: once the load stopped and the servers converged, nothing acknowledged may
be missing and nothing removed may be back — on every server — and every watcher must have
seen every acknowledged write exactly once, at its revision, in revision order."""

import random
import re
import time

import load
from cluster import Http

MASK = (1 << 64) - 1
CONVERGE_S = 120.0


def wait_until(what, fn, deadline_s, failures):
    deadline = time.time() + deadline_s
    last = None
    while time.time() < deadline:
        ok, last = fn()
        if ok:
            return True
        time.sleep(0.2)
    failures.append("%s: not within %.0f s (last seen: %s)" % (what, deadline_s, last))
    return False


def snapshot(http, node):
    status, body, _ = http.request(node.http, "GET", "/v1/snapshot?model_name=%s&block_size=%d"
                                   % (load.MODEL, load.BS))
    if status != 200:
        raise RuntimeError("GET /v1/snapshot on server %d: %s" % (node.id, load.describe(status, body)))
    return body


def final_checks(journal, cluster, engines, writer, watchers, leader_http_of, result):
    failures, checks = result["failures"], result["checks"]
    http = Http(timeout=60)
    # 1. The leader has handed on every batch each engine published.
    for e in engines:
        if load.wait_stream(journal, leader_http_of, e, CONVERGE_S):
            checks.append("the leader followed %s to its last batch (sequence %d; %d restarts)"
                          % (e.instance, e.last_seq(), e.restarts))

    # 2. Every server applied the same log.
    def converged():
        views = [http.request(n.http, "GET", "/v1/cluster")[1] for n in cluster.nodes]
        if not all(isinstance(v, dict) and "applied_index" in v for v in views):
            return False, views
        leader = [v for v in views if v.get("state") == "leader"]
        idx = {v["applied_index"] for v in views}
        ok = len(leader) == 1 and idx == {leader[0]["commit_index"]}
        return ok, [(v["id"], v.get("state"), v["applied_index"], v.get("commit_index"))
                    for v in views]
    if wait_until("every server applies the leader's commit index", converged, CONVERGE_S,
                  failures):
        checks.append("every server converged to one applied index")

    # 3. Watchers caught up.
    last_rev = max((w["revision"] for w in journal.acked), default=0)
    for w in watchers:
        wait_until("watcher %d reaches revision %d" % (w.idx, last_rev),
                   lambda w=w: (w.last >= last_rev, w.last), CONVERGE_S, failures)
        w.stop.set()

    # 4. Each server's whole context equals what the writes and the engines left in it.
    live_rest = {k & MASK for w in writer.live for k in w["keys"]}
    expect = {(load.REST_HOLDER, "GPU"): live_rest}
    for e in engines:
        expect[(e.instance, "GPU")] = {h & MASK for p in e.prompts for h in p["hashes"]}
        expect[(e.instance, "CPU")] = {h & MASK for p in e.prompts if p["cpu"]
                                       for h in p["hashes"]}
    for node in cluster.nodes:
        snap = snapshot(http, node)
        got, bad_refs = {}, []
        for c in snap["copies"]:
            key = c["key"] if c["backend_id"] == load.REST_HOLDER else c.get("engine_hash", c["key"])
            got.setdefault((c["backend_id"], c["medium"]), set()).add(key)
            if c.get("refcount") != 1:
                bad_refs.append(c)
        problems = []
        for holder in sorted(set(expect) | set(got)):
            want, have = expect.get(holder, set()), got.get(holder, set())
            if want != have:
                problems.append("%s %s: %d expected, %d held, %d missing (e.g. %s), %d not "
                                "expected (e.g. %s)" % (holder[0], holder[1], len(want),
                                                        len(have), len(want - have),
                                                        sorted(want - have)[:3],
                                                        len(have - want), sorted(have - want)[:3]))
        if bad_refs:
            problems.append("%d copies with a refcount other than 1 (a write applied twice?), "
                            "e.g. %s" % (len(bad_refs), bad_refs[:2]))
        if problems:
            failures.append("server %d's state at revision %s is not what was acknowledged: %s"
                            % (node.id, snap.get("revision"), "; ".join(problems)))
        else:
            checks.append("server %d at revision %s holds exactly the %d live acknowledged REST "
                          "keys and every engine's current blocks (%d copies, each refcount 1)"
                          % (node.id, snap["revision"], len(live_rest), len(snap["copies"])))

    # 5. Lookups agree, on every server: a sample of live writes and prompts found, evicted
    # prompts not.
    rng = random.Random(5)
    live = list(writer.live)
    sample_w = rng.sample(live, min(50, len(live)))
    lookups = bad = 0
    for node in cluster.nodes:
        for w in sample_w:
            status, body, _ = http.request(node.http, "POST", "/v1/lookup", load.lookup_body(
                hashes=w["keys"], instance_id=load.REST_HOLDER))
            lookups += 1
            if status != 200 or load.instance_blocks(body, load.REST_HOLDER) != load.REST_KEYS:
                bad += 1
                failures.append("server %d: lookup of acknowledged write %d (revision %d): %s"
                                % (node.id, w["seq"], w["revision"], load.describe(status, body)))
        for e in engines:
            prompts = list(e.prompts)
            for p, want in [(p, load.PROMPT_BLOCKS) for p in rng.sample(prompts, min(10, len(prompts)))] + \
                    [(p, 0) for p in list(e.evicted)[-10:]]:
                status, body, _ = http.request(node.http, "POST", "/v1/lookup", load.lookup_body(
                    p["tokens"], instance_id=e.instance))
                lookups += 1
                got = load.instance_blocks(body, e.instance) if status == 200 else None
                if got != want:
                    bad += 1
                    failures.append("server %d: lookup of a %s prompt of %s found %s blocks, %d "
                                    "expected" % (node.id, "held" if want else "evicted",
                                                  e.instance, got, want))
    if not bad:
        checks.append("%d final lookups on every server found what was acknowledged and not "
                      "what was evicted" % lookups)

    # 6. The servers' state digests agree, compared at one applied index: background entries
    # (replica audit points, every few seconds) may still be applying on one server.
    digests = {}

    def read_digests():
        digests.clear()
        for node in cluster.nodes:
            status, body, _ = http.request(node.http, "GET", "/v1/admin/digest")
            if status == 200:
                digests[node.id] = (body["applied_index"], body["state_digest"])
        indexes = {index for index, _ in digests.values()}
        return len(digests) == len(cluster.nodes) and len(indexes) == 1, digests

    wait_until("every server at one applied index", read_digests, 30.0, failures)
    if len(set(digests.values())) == 1 and len(digests) == len(cluster.nodes):
        checks.append("every server's state digest is %s... at applied index %d"
                      % (digests[1][1][:16], digests[1][0]))
    elif digests:
        failures.append("the servers' state digests differ: %s" % digests)

    # 7. Every watcher saw every acknowledged write once, at its revision, in order.
    for w in watchers:
        check_watcher(journal, w, failures, checks)

    # 8. The engine streams, summed over the servers (each followed them while it led).
    totals = {}
    for node in cluster.nodes:
        status, body, _ = http.request(node.http, "GET", "/v1/streams")
        streams = body if isinstance(body, list) else (body or {}).get("streams", [])
        for s in streams:
            t = totals.setdefault(s.get("instance_id"), {})
            for k, v in s.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in (
                        "last_seq", "dp_rank", "lag_seconds", "connecting_for_ms"):
                    t[k] = t.get(k, 0) + v
            if s.get("error"):
                failures.append("server %d: stream %s has an error: %s"
                                % (node.id, s.get("instance_id"), s["error"]))
    result["streams"] = totals
    for inst, t in sorted(totals.items()):
        wrong = {k: t.get(k, 0) for k in ("decode_failures", "malformed_messages",
                                          "apply_failures", "skipped_events",
                                          "skipped_namespace_events", "lost_batches",
                                          "replay_failures")
                 if t.get(k, 0)}
        if wrong:
            failures.append("stream %s: %s" % (inst, wrong))
        checks.append("stream %s: %s batches applied, %s gaps, %s replays, %s restarts, "
                      "%s duplicates, no loss or decode failure%s" % (
                          inst, t.get("batches_applied"), t.get("gaps"), t.get("replays"),
                          t.get("restarts"), t.get("duplicates"), "" if not wrong else " (NO)"))
    http.close()


def check_watcher(journal, w, failures, checks):
    seen = {}
    prev = 0
    for rev, op, keys in w.records:
        if rev < prev:
            failures.append("watcher %d: revision %d after %d" % (w.idx, rev, prev))
        prev = rev
        for k in keys:
            seen.setdefault((op, k & MASK), []).append(rev)
    problems = []
    for a in journal.acked:
        for op, keys in (("stored", a["keys"]), ("removed", a["removed"])):
            for k in keys:
                revs = seen.get((op, k & MASK), [])
                ok = len(revs) == 1 and (revs[0] == a["revision"] if a["attempts"] == 1
                                         else revs[0] <= a["revision"])
                if not ok:
                    problems.append("write %d (revision %d, %d attempts): %s key %d seen at %s"
                                    % (a["seq"], a["revision"], a["attempts"], op, k, revs))
    if problems:
        failures.append("watcher %d (%d reconnects) did not see the acknowledged writes exactly "
                        "once at their revisions: %d problems, e.g. %s"
                        % (w.idx, w.reconnects, len(problems), problems[:3]))
    else:
        checks.append("watcher %d saw all %d acknowledged writes once, at their revisions, in "
                      "order (%d records, %d reconnects across the servers, %d cuts, %d broken "
                      "streams)" % (w.idx, len(journal.acked), len(w.records), w.reconnects,
                                    w.cuts, w.breaks))


_NUM = re.compile(r"\d+")


def scan_logs(cluster):
    """(ERROR lines, {normalised WARNING message: count}) of every server's log."""
    errors, warnings = [], {}
    for node in cluster.nodes:
        try:
            with open(node.log_path, errors="replace") as f:
                for line in f:
                    line = line.rstrip("\n")
                    if " ERROR " in line:
                        errors.append("server %d: %s" % (node.id, line))
                    elif " WARNING " in line:
                        msg = _NUM.sub("N", line.split(" WARNING ", 1)[1])[:160]
                        warnings[msg] = warnings.get(msg, 0) + 1
        except OSError as e:
            errors.append("server %d: cannot read its log: %s" % (node.id, e))
    return errors, warnings
