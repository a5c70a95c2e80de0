"""The soak's load: fake engines publishing vLLM/SGLang KV events over ZMQ, an idempotent
REST writer, lookups, routes, watchers, and the chaos (leader transfers, engine restarts).

Every driver records what it saw into a Journal: latencies per kind, acknowledged writes,
and errors, each either `unexpected` (the soak fails) or `transient` (an answer a client is
told to retry — 429, 503, 504 — counted and reported, retried with the same writer
sequence so that it cannot lose or double a write).
"""

import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
import http.client

from cluster import Http

MODEL, BS = "soak-model", 16
REST_HOLDER = "soak-rest"
PROMPT_BLOCKS = 8          # blocks per engine prompt
REST_KEYS = 4              # blocks per REST write
TRANSIENT = {429, 503, 504}
# A write may also get 421 when a follower forwarded it to a leader that handed leadership
# away meanwhile (docs/api.md §Writes on followers: "after a 421, 503 or timeout, resend").
WRITE_TRANSIENT = TRANSIENT | {421}


class Journal:
    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.latency = collections.defaultdict(list)   # kind -> [(t, seconds)]
        self.errors = []                               # (t, source, message)
        self.transient = []                            # (t, source, status, code)
        self.events = []                               # (t, what): transfers, restarts
        self.acked = []                                # REST writes acknowledged
        self.stop = threading.Event()

    def now(self):
        return time.monotonic() - self.t0

    def lat(self, kind, seconds):
        with self.lock:
            self.latency[kind].append((self.now(), seconds))

    def error(self, source, message):
        with self.lock:
            self.errors.append((round(self.now(), 2), source, message))

    def soft(self, source, status, body):
        code = body.get("code") if isinstance(body, dict) else None
        with self.lock:
            self.transient.append((round(self.now(), 2), source, status, code))

    def event(self, what):
        with self.lock:
            self.events.append((round(self.now(), 2), what))


def paced(stop, rate, step):
    """Calls step() `rate` times a second until `stop` is set (late calls catch up by at
    most a second's worth)."""
    period = 1.0 / rate
    next_t = time.monotonic()
    while not stop.is_set():
        step()
        next_t = max(next_t + period, time.monotonic() - 1.0)
        time.sleep(max(0.0, next_t - time.monotonic()))


def describe(status, body):
    if isinstance(body, dict):
        return "%s %s: %s" % (status, body.get("code"), body.get("message"))
    return "%s %r" % (status, body)


# ---- engines ---------------------------------------------------------------------------

class Engine:
    """A fake engine (tests/integration/fake_engine_publisher.py) and the prompts it holds:
    every step stores new prompts, copies some to CPU (offload) and evicts the oldest past
    `window` prompts (removes in GPU, and CPU when offloaded), so that its share of the
    index reaches a steady state."""

    def __init__(self, journal, nodes, publisher, idx, encoding, window, rate, per_step):
        self.j, self.nodes, self.publisher = journal, nodes, publisher
        self.idx, self.encoding = idx, encoding
        self.type = "SGLang" if encoding.startswith("sglang") else "vLLM"
        self.instance = "engine-%d" % idx
        self.window, self.rate, self.per_step = window, rate, per_step
        self.lock = threading.Lock()          # held by a step and by a restart
        self.prompts = collections.deque()    # {"tokens", "hashes", "cpu"}
        self.evicted = collections.deque(maxlen=64)
        self.pending_offload = []
        self.endpoint = self.replay_endpoint = None
        self.proc = None
        self.restarts = 0
        self.rng = random.Random(1000 + idx)

    def spawn(self):
        ep = self.endpoint or "tcp://127.0.0.1:0"
        rep = self.replay_endpoint or "tcp://127.0.0.1:0"
        self.proc = subprocess.Popen(
            [sys.executable, self.publisher, "--endpoint", ep, "--replay-endpoint", rep,
             "--encoding", self.encoding, "--buffer-steps", "50000"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        ready = json.loads(self.proc.stdout.readline() or b"{}")
        if not ready.get("ready"):
            raise RuntimeError("fake engine %d did not start: %s" %
                               (self.idx, self.proc.stderr.read().decode(errors="replace")))
        self.endpoint, self.replay_endpoint = ready["endpoint"], ready["replay_endpoint"]

    def cmd(self, obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("fake engine %d exited" % self.idx)
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError("fake engine %d refused %s: %s" % (self.idx, obj.get("op"),
                                                                  reply["error"]))
        return reply

    def register(self, http):
        body = {"endpoint": self.endpoint, "replay_endpoint": self.replay_endpoint,
                "type": self.type, "modelname": MODEL, "instance_id": self.instance,
                "block_size": BS, "dp_rank": 0}
        deadline = time.time() + 60
        while True:
            node = random.choice(self.nodes)
            status, answer, _ = http.request(node.http, "POST", "/register", body)
            if status == 200:
                break
            if status not in WRITE_TRANSIENT and status != 0 or time.time() > deadline:
                raise RuntimeError("POST /register of %s: %s" % (self.instance,
                                                                describe(status, answer)))
            time.sleep(0.2)
        self.cmd({"op": "wait_peer", "count": 1, "timeout_ms": 10000})

    def step(self):
        events, stored = [], []
        for p in self.pending_offload:
            events.append({"op": "offload", "hashes": p["hashes"], "medium": "CPU"})
            p["cpu"] = True
        self.pending_offload = []
        for _ in range(self.per_step):
            tokens = [self.rng.randrange(1, 50000) for _ in range(PROMPT_BLOCKS * BS)]
            events.append({"op": "store", "tokens": tokens, "block_size": BS})
            stored.append({"tokens": tokens, "hashes": None, "cpu": False})
        while len(self.prompts) + len(stored) > self.window and self.prompts:
            old = self.prompts.popleft()
            events.append({"op": "remove", "hashes": old["hashes"], "medium": "GPU"})
            if old["cpu"]:
                events.append({"op": "remove", "hashes": old["hashes"], "medium": "CPU"})
            self.evicted.append(old)
        reply = self.cmd({"op": "batch", "events": events})
        results = [r for e, r in zip(events, reply["results"]) if e["op"] == "store"]
        for p, r in zip(stored, results):
            p["hashes"] = r["all_hashes"]
            self.prompts.append(p)
            if self.rng.random() < 0.25:
                self.pending_offload.append(p)

    def run(self):
        def locked_step():
            with self.lock:
                try:
                    self.step()
                except Exception as e:  # noqa: BLE001 - the soak reports it and goes on
                    self.j.error(self.instance, "publishing failed: %s" % e)
                    time.sleep(1)
        paced(self.j.stop, self.rate, locked_step)

    def sample(self):
        with self.lock:
            return random.choice(self.prompts) if self.prompts else None

    def last_seq(self):
        return self.cmd({"op": "status"})["next_seq"] - 1

    def restart(self, leader_http_of):
        """Stops the publisher process once the leader has applied all it published, and
        starts a new one on the same endpoints: a new stream from sequence 0, which the
        server takes as an engine restart and clears the holder (docs/engine-events.md)."""
        with self.lock:
            wait_stream(self.j, leader_http_of, self, 60)
            try:
                self.cmd({"op": "quit"})
            except RuntimeError:
                pass
            self.proc.wait(timeout=10)
            self.evicted.extend(self.prompts)
            self.prompts.clear()
            self.pending_offload = []
            self.spawn()
            self.cmd({"op": "wait_peer", "count": 1, "timeout_ms": 10000})
            self.restarts += 1

    def quit(self):
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.cmd({"op": "quit"})
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()


def stream_of(http, hostport, instance):
    status, body, _ = http.request(hostport, "GET", "/v1/streams")
    if status != 200:
        return None
    streams = body if isinstance(body, list) else body.get("streams", [])
    for s in streams:
        if s.get("instance_id") == instance:
            return s
    return None


def wait_stream(journal, leader_http_of, engine, deadline_s):
    """Until the leader's stream of `engine` has handed on its last published batch."""
    http = Http()
    want = engine.last_seq()
    deadline = time.time() + deadline_s
    s = None
    while time.time() < deadline:
        s = stream_of(http, leader_http_of(), engine.instance)
        if s is not None and s.get("last_seq") is not None and s["last_seq"] >= want:
            http.close()
            return True
        time.sleep(0.1)
    http.close()
    journal.error(engine.instance, "the leader's stream did not reach sequence %d within %d s: %s"
                  % (want, deadline_s, json.dumps(s)))
    return False


# ---- REST writer -----------------------------------------------------------------------

class RestWriter:
    """POST /v1/events, one batch in flight, numbered (writer_id, writer_sequence) so that a
    resend after an unknown outcome is applied at most once (docs/api.md §Idempotent writes).
    Each batch stores REST_KEYS new keys for holder soak-rest and removes the keys stored
    `window` batches before: the holder's entries stay at window × REST_KEYS."""

    GIVE_UP_S = 120.0

    def __init__(self, journal, nodes, window, rate, inject_lost=False):
        self.j, self.nodes, self.window, self.rate = journal, nodes, window, rate
        self.inject_lost = inject_lost
        self.writer_id = "soak-%d-%d" % (os.getpid(), int(time.time()))
        self.seq = 0
        self.live = collections.deque()     # acked writes whose keys are not removed
        self.lock = threading.Lock()
        self.removing = set()               # seqs whose keys a write in flight removes
        self.rng = random.Random(7)

    def event(self, op, keys):
        return {"event_type": op, "model_name": MODEL, "block_size": BS,
                "backend_id": REST_HOLDER, "seq_hashes": keys}

    def write_one(self, http):
        self.seq += 1
        keys = [self.rng.getrandbits(64) for _ in range(REST_KEYS)]
        if self.inject_lost and self.seq == 20:
            # Self-test (--inject lost-write): an "acknowledged" write never sent.
            prev = self.j.acked[-1] if self.j.acked else {"revision": 0}
            w = {"seq": -1, "revision": prev["revision"], "keys": keys, "removed": [],
                 "removed_seq": None, "attempts": 1, "t": round(self.j.now(), 3)}
            with self.lock:
                self.live.append(w)
            with self.j.lock:
                self.j.acked.append(w)
            self.j.event("injected: write of keys %s recorded as acknowledged, never sent" % keys)
            keys = [self.rng.getrandbits(64) for _ in range(REST_KEYS)]
        events = [self.event("stored", keys)]
        removed, removed_seq = [], None
        with self.lock:
            if len(self.live) >= self.window:
                old = self.live[0]
                removed, removed_seq = old["keys"], old["seq"]
                self.removing.add(removed_seq)
        if removed:
            events.append(self.event("removed", removed))
        body = {"events": events, "writer_id": self.writer_id, "writer_sequence": self.seq}
        t0 = time.monotonic()
        attempts = 0
        while True:
            attempts += 1
            node = self.rng.choice(self.nodes)
            status, answer, _ = http.request(node.http, "POST", "/v1/events", body)
            if status == 200:
                break
            if status in WRITE_TRANSIENT or status == 0:
                self.j.soft("rest-writer", status, answer)
                if status == 0:
                    self.j.error("rest-writer", "no answer from server %d: %s"
                                 % (node.id, answer.get("message")))
            else:
                self.j.error("rest-writer", "POST /v1/events to server %d: %s"
                             % (node.id, describe(status, answer)))
            if time.monotonic() - t0 > self.GIVE_UP_S or self.j.stop.is_set() and attempts > 50:
                self.j.error("rest-writer", "write %d never acknowledged (%d attempts, %.0f s)"
                             % (self.seq, attempts, time.monotonic() - t0))
                with self.lock:
                    self.removing.discard(removed_seq)
                return
            time.sleep(0.05 * min(attempts, 10))
        latency = time.monotonic() - t0
        self.j.lat("commit", latency)
        w = {"seq": self.seq, "revision": answer["revision"], "keys": keys,
             "removed": removed, "removed_seq": removed_seq, "attempts": attempts,
             "t": round(self.j.now(), 3)}
        with self.lock:
            if removed:
                assert self.live[0]["seq"] == removed_seq
                self.live.popleft()
                self.removing.discard(removed_seq)
            self.live.append(w)
        with self.j.lock:
            self.j.acked.append(w)

    def run(self):
        http = Http()
        paced(self.j.stop, self.rate, lambda: self.write_one(http))
        http.close()

    def recent(self):
        """An acked write whose keys are not being removed, or None."""
        with self.lock:
            n = len(self.live)
            if n == 0:
                return None
            w = self.live[self.rng.randrange(max(0, n - self.window // 2), n)]
            return None if w["seq"] in self.removing else w

    def still_live(self, w):
        with self.lock:
            return w["seq"] not in self.removing and (self.live and self.live[0]["seq"] <= w["seq"])


# ---- readers ---------------------------------------------------------------------------

def lookup_body(tokens=None, hashes=None, **extra):
    body = {"model_name": MODEL, "block_size": BS}
    if tokens is not None:
        body["token_ids"] = tokens
    else:
        body["seq_hashes"] = hashes
    body.update(extra)
    return body


def instance_blocks(answer, instance):
    for inst in answer.get("instances", []):
        if inst["instance_id"] == instance:
            return inst["longest_matched"]["blocks"]
    return 0


class Reader:
    """REST lookups and routes on random servers at `rate` per second: engine prompts
    (eventually consistent: not checked), misses, and REST-written keys read with
    min_revision = the write's revision (read-your-writes on any server: they must be
    found unless the writer has removed them since)."""

    def __init__(self, journal, nodes, engines, writer, rate, kind):
        self.j, self.nodes, self.engines, self.writer = journal, nodes, engines, writer
        self.rate, self.kind = rate, kind
        self.rng = random.Random(hash(kind) & 0xffff)
        self.stale_reads = 0
        self.checked_reads = 0

    def one(self, http):
        node = self.rng.choice(self.nodes)
        r = self.rng.random()
        if self.kind == "route":
            p = self.rng.choice(self.engines).sample()
            tokens = p["tokens"] if p else [1] * (PROMPT_BLOCKS * BS)
            cands = [{"instance_id": e.instance,
                      "queued_prefill_tokens": self.rng.randrange(0, 4096),
                      "active_decode_blocks": self.rng.randrange(0, 512)} for e in self.engines]
            status, answer, dt = http.request(node.http, "POST", "/v1/route",
                                              lookup_body(tokens, candidates=cands))
            self.check(node, "POST /v1/route", status, answer, dt)
            return
        if r < 0.35:
            w = self.writer.recent()
            if w is not None:
                status, answer, dt = http.request(
                    node.http, "POST", "/v1/lookup",
                    lookup_body(hashes=w["keys"], instance_id=REST_HOLDER,
                                min_revision=w["revision"]))
                if self.check(node, "POST /v1/lookup", status, answer, dt):
                    self.checked_reads += 1
                    got = instance_blocks(answer, REST_HOLDER)
                    if got != REST_KEYS and self.writer.still_live(w):
                        self.stale_reads += 1
                        self.j.error("lookup", "server %d answered %d of %d blocks of write %d "
                                     "(revision %d) at revision %s: a lost or stale write"
                                     % (node.id, got, REST_KEYS, w["seq"], w["revision"],
                                        answer.get("revision")))
                return
        if r < 0.85:
            p = self.rng.choice(self.engines).sample()
            tokens = p["tokens"] if p else None
        else:
            tokens = None
        if tokens is None:
            tokens = [self.rng.randrange(1, 50000) for _ in range(PROMPT_BLOCKS * BS)]
        status, answer, dt = http.request(node.http, "POST", "/v1/lookup", lookup_body(tokens))
        self.check(node, "POST /v1/lookup", status, answer, dt)

    def check(self, node, what, status, answer, dt):
        if status == 200:
            self.j.lat(self.kind, dt)
            return True
        if status in TRANSIENT:
            self.j.soft(self.kind, status, answer)
        else:
            self.j.error(self.kind, "%s on server %d: %s" % (what, node.id,
                                                            describe(status, answer)))
        return False

    def run(self):
        http = Http()
        paced(self.j.stop, self.rate, lambda: self.one(http))
        http.close()


class RpcReader:
    """Lookups over the binary protocol with the repository's Python client (kvatlas,
    docs/python.md) when it can be imported."""

    def __init__(self, journal, nodes, engines, rate, kvatlas):
        self.j, self.nodes, self.engines, self.rate, self.kv = journal, nodes, engines, rate, kvatlas
        self.rng = random.Random(11)

    def run(self):
        try:
            self.loop()
        except Exception as e:  # noqa: BLE001 - a failure of the soak, reported
            self.j.error("lookup_rpc", "binary lookups stopped: %s: %s" % (type(e).__name__, e))

    def loop(self):
        clients = [self.kv.Client([n.rpc], deadline=10.0) for n in self.nodes]
        ctx = self.kv.Context(MODEL, BS)

        def one():
            i = self.rng.randrange(len(clients))
            p = self.rng.choice(self.engines).sample()
            tokens = p["tokens"] if p else [1] * (PROMPT_BLOCKS * BS)
            t0 = time.monotonic()
            try:
                clients[i].lookup(ctx, tokens=tokens)
                self.j.lat("lookup_rpc", time.monotonic() - t0)
            except self.kv.Error as e:
                code = getattr(e, "code", None)
                if str(code).lower() in ("unavailable", "deadline_exceeded", "resource_exhausted"):
                    self.j.soft("lookup_rpc", 0, {"code": str(code)})
                else:
                    self.j.error("lookup_rpc", "binary lookup on server %d: %s"
                                 % (self.nodes[i].id, e))
        paced(self.j.stop, self.rate, one)


# ---- watchers --------------------------------------------------------------------------

class Watcher:
    """GET /v1/watch?backend_id=soak-rest from revision 0, reconnecting every 10–40 s to
    another server and resuming from the last revision received whole (its `id:`). Records
    after that id on a dropped connection are discarded (the server sends them again)."""

    def __init__(self, journal, nodes, idx, reconnect_s):
        self.j, self.nodes, self.idx, self.reconnect_s = journal, nodes, idx, reconnect_s
        self.last = 0                 # last revision received whole
        self.records = []             # (revision, op, keys) committed, in arrival order
        self.reconnects = 0
        self.cuts = 0
        self.breaks = 0
        self.order_errors = 0
        self.rng = random.Random(100 + idx)
        self.server = idx % len(nodes)
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            node = self.nodes[self.server]
            try:
                self.follow(node)
            except (OSError, http.client.HTTPException) as e:
                # A stream that broke (no keep-alive within 10 s on a starved machine, a
                # reset) is resumed as a client would; the final check proves that nothing
                # was missed or repeated across it.
                self.breaks += 1
                self.j.soft("watch", 0, {"code": "broken: %s" % type(e).__name__})
                self.j.event("watcher %d: stream on server %d broke (%s: %s); resuming"
                             % (self.idx, node.id, type(e).__name__, e))
                time.sleep(0.5)
            self.reconnects += 1
            self.server = (self.server + 1) % len(self.nodes)

    def follow(self, node):
        host, port = node.http.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        try:
            conn.request("GET", "/v1/watch?from=%d&backend_id=%s" % (self.last, REST_HOLDER))
            resp = conn.getresponse()
            if resp.status != 200:
                body = resp.read()
                try:
                    answer = json.loads(body)
                except ValueError:
                    answer = body[:200]
                msg = answer.get("message", "") if isinstance(answer, dict) else ""
                if resp.status == 400 and "future" in msg:
                    time.sleep(0.2)   # that server has not applied our revision yet
                    return
                if resp.status in TRANSIENT:
                    self.j.soft("watch", resp.status, answer)
                    time.sleep(0.5)
                    return
                self.j.error("watch-%d" % self.idx, "GET /v1/watch from %d on server %d: %s"
                             % (self.last, node.id, describe(resp.status, answer)))
                time.sleep(1)
                return
            until = time.monotonic() + self.rng.uniform(*self.reconnect_s)
            pending, event = [], {}
            while not self.stop.is_set() and time.monotonic() < until:
                line = resp.readline()
                if not line:
                    return  # the server closed the stream
                line = line.rstrip(b"\r\n").decode()
                if line:
                    if line.startswith(":"):
                        continue
                    name, _, value = line.partition(":")
                    event[name] = value[1:] if value.startswith(" ") else value
                    continue
                if not event:
                    continue
                ev, event = event, {}
                if ev.get("event") == "error":
                    err = json.loads(ev.get("data", "{}"))
                    if err.get("code") == "watch_cut":
                        self.cuts += 1
                        self.j.soft("watch", 429, err)
                        self.last = max(self.last, int(err.get("resume_from", self.last)))
                    else:
                        self.j.error("watch-%d" % self.idx, "watch on server %d ended: %s"
                                     % (node.id, ev.get("data")))
                    return
                if "data" in ev:
                    rec = json.loads(ev["data"])
                    rev = rec["revision"]
                    if rev <= self.last or pending and rev < pending[-1][0]:
                        self.order_errors += 1
                        self.j.error("watch-%d" % self.idx, "server %d sent revision %d after %d"
                                     % (node.id, rev, pending[-1][0] if pending else self.last))
                    pending.append((rev, rec["op"], tuple(rec.get("keys", ()))))
                if "id" in ev:
                    rid = int(ev["id"])
                    done = [p for p in pending if p[0] <= rid]
                    if len(done) != len(pending):
                        self.j.error("watch-%d" % self.idx, "server %d: id %d before records of "
                                     "a later revision" % (node.id, rid))
                    self.records.extend(done)
                    pending = pending[len(done):]
                    self.last = max(self.last, rid)
        finally:
            conn.close()


# ---- chaos -----------------------------------------------------------------------------

def transfer_leader(journal, cluster, http):
    """POST /v1/cluster/transfer {} to a random server; returns the new leader id or 0."""
    node = random.choice(cluster.nodes)
    before = None
    status, body, _ = http.request(node.http, "GET", "/v1/cluster")
    if status == 200:
        before = body.get("leader_id")
    status, body, dt = http.request(node.http, "POST", "/v1/cluster/transfer", {})
    if status == 200:
        after = body.get("leader_id") or 0
        deadline = time.time() + 10
        while not after and time.time() < deadline:   # an answer without leader_id
            for n in cluster.nodes:
                s, view, _ = http.request(n.http, "GET", "/v1/cluster")
                if s == 200 and view.get("state") == "leader" and view["id"] != before:
                    after = view["id"]
            time.sleep(0.05)
        journal.event("leader transfer via server %d: %s -> %s (answered in %.2f s)"
                      % (node.id, before, after or "?", dt))
        return after
    if status in WRITE_TRANSIENT:
        journal.soft("transfer", status, body)
        journal.event("leader transfer via server %d refused: %s" % (node.id, describe(status, body)))
    else:
        journal.error("transfer", "POST /v1/cluster/transfer on server %d: %s"
                      % (node.id, describe(status, body)))
    return 0


class Chaos:
    """Every `interval` seconds, alternately a leader transfer and an engine restart (the
    next engine in turn)."""

    def __init__(self, journal, cluster, engines, interval, leader_http_of):
        self.j, self.cluster, self.engines, self.interval = journal, cluster, engines, interval
        self.leader_http_of = leader_http_of
        self.transfers = self.restarts = 0

    def run(self):
        http = Http()
        turn = 0
        while not self.j.stop.wait(self.interval):
            if turn % 2 == 0:
                transfer_leader(self.j, self.cluster, http)
                self.transfers += 1
            else:
                engine = self.engines[(turn // 2) % len(self.engines)]
                try:
                    engine.restart(self.leader_http_of)
                    self.j.event("engine %s restarted (publisher process stopped and started)"
                                 % engine.instance)
                    self.restarts += 1
                except Exception as e:  # noqa: BLE001
                    self.j.error("chaos", "restarting %s failed: %s" % (engine.instance, e))
            turn += 1
        http.close()


def leader_finder(cluster):
    """A function answering the current leader's REST address (asks the servers)."""
    http = Http(timeout=5)
    lock = threading.Lock()

    def find():
        with lock:
            for _ in range(200):
                for node in cluster.nodes:
                    status, body, _ = http.request(node.http, "GET", "/v1/cluster")
                    if status == 200 and body.get("state") == "leader":
                        return node.http
                time.sleep(0.05)
            return cluster.nodes[0].http
    return find

